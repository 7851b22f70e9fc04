"""The resolved view of a block's recurrent token mixer (DESIGN.md §16): :class:`Mixer`, every default filled
in, which both implementations read (``analysis/mixers.py``, ``modeling/ssm.py``), and :func:`resolve_mixer`, which
makes it from a mixer spec. No pydantic here: the spec's schema and rules are :mod:`embedcalc.config.mixer_spec`
(which re-exports these); this module is what a shipped preset's path needs (issue 22, start-up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from embedcalc.config.kinds import MixerKind

if TYPE_CHECKING:
    from embedcalc.config.fields import MixerFields

RECURRENT_KINDS = frozenset({"mamba", "mamba2", "gated_deltanet", "kda", "short_conv", "lightning"})
# Mamba-1 scans token by token; mamba2: transformers' mamba_chunk_size default; gated_deltanet: its fixed chunk;
# lightning: MiniMaxConfig's block_size default
_CHUNK = {"mamba": 1, "mamba2": 256, "gated_deltanet": 64, "kda": 64, "short_conv": 1, "lightning": 256}


@dataclass(frozen=True)
class Mixer:
    """One block's recurrent token mixer, every default resolved (kind ``mamba2`` or ``gated_deltanet``)."""

    kind: MixerKind
    state_size: int
    num_heads: int
    head_dim: int
    groups: int
    conv_kernel: int
    chunk_size: int
    conv_bias: bool
    bias: bool
    norm_before_gate: bool
    num_k_heads: int = 0
    head_k_dim: int = 0
    inner_dim: int = 0
    dt_rank: int = 0
    bc_norms: bool = False
    gate_norm: bool = True  # mamba2: the gated RMSNorm after the scan (False: silu(z) gating only)
    out_bias: bool | None = None  # out_proj's bias when it differs from in_proj's (``bias``)
    parallel: bool = False  # runs beside the block's attention on the same normalised input (Falcon-H1)

    @property
    def out_proj_bias(self) -> bool:
        """Whether the output projection has a bias: ``out_bias``, else ``bias``."""
        return self.bias if self.out_bias is None else self.out_bias

    ssm_state_dtype: str | None = None  # the SSM state's dtype; None: the activation dtype

    @property
    def deltanet(self) -> bool:
        return self.kind == "gated_deltanet"

    @property
    def kda(self) -> bool:
        """Kimi Delta Attention (Kimi Linear): the delta rule with a decay per channel, low-rank gates."""
        return self.kind == "kda"

    @property
    def mamba1(self) -> bool:
        return self.kind == "mamba"

    @property
    def short_conv(self) -> bool:
        return self.kind == "short_conv"

    @property
    def lightning(self) -> bool:
        return self.kind == "lightning"

    @property
    def inner(self) -> int:
        """Width of the scan's output (and of z): num_heads x head_dim (Mamba-2's d_inner; DeltaNet's value dim);
        Mamba-1's and the short convolution's inner_dim; lightning's heads x head_dim."""
        return self.inner_dim if self.mamba1 or self.short_conv else self.num_heads * self.head_dim

    @property
    def key_dim(self) -> int:
        """gated_deltanet: width of all query (or key) heads, num_k_heads x head_k_dim."""
        return self.num_k_heads * self.head_k_dim

    @property
    def conv_dim(self) -> int:
        """Channels the convolution runs over: Mamba-2's x, B and C (inner + 2 x groups x state_size); DeltaNet's
        q, k and v (2 key_dim + inner)."""
        if self.deltanet:
            return 2 * self.key_dim + self.inner
        if self.kda:
            return 3 * self.inner  # q, k, v, each num_heads x head_dim
        if self.lightning:
            return 0  # no convolution
        if self.mamba1 or self.short_conv:
            return self.inner
        return self.inner + 2 * self.groups * self.state_size

    @property
    def in_width(self) -> int:
        """Output width of the input projection: Mamba-2's z, (x, B, C) and dt (one per head); DeltaNet's q, k, v,
        z and beta, a (one each per value head)."""
        if self.deltanet:
            return self.conv_dim + self.inner + 2 * self.num_heads
        if self.kda:
            return self.conv_dim + self.num_heads  # q, k, v and beta (its low-rank gates are their own key)
        if self.mamba1:
            return 2 * self.inner  # x and z
        if self.lightning:
            return 4 * self.inner  # q, k, v (qkv_proj) and the output gate (output_gate), both from the input
        if self.short_conv:
            return 3 * self.inner  # B, C and x
        return self.inner + self.conv_dim + self.num_heads

    @property
    def ssm_state_shape(self) -> tuple[int, int, int]:
        """Per sequence: (heads, head_dim, state_size) for Mamba-2, (value heads, head_k_dim, head_dim) for DeltaNet,
        (heads, head_dim, head_dim) for lightning;
        none (a 0-sized shape) for the short convolution, whose only state is its window."""
        if self.short_conv:
            return 0, 0, 0
        if self.deltanet:
            return self.num_heads, self.head_k_dim, self.head_dim
        if self.kda or self.lightning:
            return self.num_heads, self.head_dim, self.head_dim  # transformers' linear_cache: K ᵀV per head
        if self.mamba1:
            return 1, self.inner, self.state_size
        return self.num_heads, self.head_dim, self.state_size

    @property
    def scan_io_values(self) -> int:
        """Values per token the scan reads and writes: its inputs after the convolution and gates, and its output."""
        if self.deltanet:
            return 2 * self.key_dim + 2 * self.inner + 2 * self.num_heads
        if self.kda:
            return 5 * self.inner + self.num_heads  # q, k, v, the per-channel decay and beta in; y out
        if self.mamba1:
            return 3 * self.inner + 2 * self.state_size  # x, dt, B, C in; y out
        if self.short_conv:
            return 0  # no scan
        if self.lightning:
            return 4 * self.inner  # q, k, v in; y out
        return 2 * self.inner + 2 * self.groups * self.state_size + self.num_heads

    @property
    def conv_state_values(self) -> int:
        """Values of the convolution state per sequence: conv_dim x conv_kernel."""
        return self.conv_dim * self.conv_kernel

    @property
    def ssm_state_values(self) -> int:
        """Values of the SSM (or delta-rule) state per sequence: the product of :attr:`ssm_state_shape`."""
        heads, rows, cols = self.ssm_state_shape
        return heads * rows * cols

    @property
    def state_values(self) -> int:
        """Values of the whole recurrent state per sequence (constant in the sequence length)."""
        return self.conv_state_values + self.ssm_state_values


def resolve_mixer(spec: MixerFields) -> Mixer | None:
    """The resolved recurrent mixer of ``spec``, or None for attention and for no mixer."""
    if spec.kind not in RECURRENT_KINDS:
        return None
    deltanet, lightning = spec.kind in ("gated_deltanet", "kda"), spec.kind == "lightning"
    conv_bias = spec.conv_bias if spec.conv_bias is not None else not (deltanet or lightning)
    return Mixer(
        kind=spec.kind, state_size=spec.state_size or 0, num_heads=spec.num_heads or 1, head_dim=spec.head_dim or 0,
        groups=spec.groups, conv_kernel=0 if lightning else spec.conv_kernel,
        chunk_size=spec.chunk_size or _CHUNK[spec.kind], conv_bias=conv_bias, bias=spec.bias,
        norm_before_gate=spec.norm_before_gate or deltanet, num_k_heads=spec.num_k_heads or 0,
        head_k_dim=spec.head_k_dim or 0, inner_dim=spec.inner_dim or 0, dt_rank=spec.dt_rank or 0,
        bc_norms=spec.bc_norms, gate_norm=spec.gate_norm, out_bias=spec.out_bias, parallel=spec.parallel_attention,
        ssm_state_dtype=spec.ssm_state_dtype,
    )  # fmt: skip
