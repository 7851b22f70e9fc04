"""Token mixers beyond softmax attention (DESIGN.md §16): what a block's mixer can be, as data, and its resolved view.

A block mixes tokens with one of:

- ``attention``: the block's :class:`~embedcalc.config.blocks.AttentionSpec` (standard or latent attention, the
  default);
- ``mamba2``: a Mamba-2 selective state-space layer computed in its chunked (SSD) form (Dao & Gu 2024,
  "Transformers are SSMs", §6-7; transformers' ``Mamba2Mixer`` / ``GraniteMoeHybridMambaLayer`` /
  ``NemotronHMamba2Mixer``): in_proj d -> (z, x, B, C, dt), a causal depthwise conv over (x, B, C), the SSD scan
  with per-head A, D, dt_bias, a gated RMSNorm, out_proj inner -> d;
- ``none``: no mixer at all (Nemotron-H's MLP-only and MoE-only layers, the NAS models' attention-free layers).

A recurrent mixer carries a fixed-size **state** per sequence instead of a KV cache that grows with the context:
Mamba-2 keeps the last conv_kernel inputs of its convolution (conv_dim x conv_kernel, transformers' and mamba_ssm's
conv-state layout) and the SSM state (num_heads x head_dim x state_size). :class:`Mixer` is the resolved,
hashable view both implementations read (``analysis/mixers.py``, ``modeling/ssm.py``); nothing here counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

PositiveInt = Annotated[int, Field(strict=True, gt=0)]

MixerKind = Literal["attention", "mamba2", "none"]
RECURRENT_KINDS = frozenset({"mamba2"})
_FROZEN = ConfigDict(extra="forbid", frozen=True, strict=True)
_REQUIRED = {"mamba2": ("state_size", "num_heads", "head_dim")}
_EXAMPLE = {"mamba2": "Granite-4.0-H-Small has state_size: 128, num_heads: 128, head_dim: 64"}


class MixerSpec(BaseModel):
    """What mixes the tokens of a block: attention (the block's attention spec), a state-space layer, or nothing."""

    model_config = _FROZEN

    kind: MixerKind = Field(
        default="attention",
        description=(
            "attention: the block's attention (standard or mla). mamba2: a Mamba-2 state-space layer (SSD, Dao & "
            "Gu 2024), a constant-size recurrent state per sequence instead of a KV cache. none: no mixer (the "
            "block is its FFN only)."
        ),
    )
    state_size: PositiveInt | None = Field(
        default=None, description="mamba2: SSM state size N per head and group (mamba_d_state, ssm_state_size)."
    )
    num_heads: PositiveInt | None = Field(
        default=None, description="mamba2: SSM heads H (mamba_n_heads); the inner width is num_heads x head_dim."
    )
    head_dim: PositiveInt | None = Field(
        default=None, description="mamba2: channels P per SSM head (mamba_d_head)."
    )
    groups: PositiveInt = Field(
        default=1,
        description="mamba2: groups G sharing one B and C projection (mamba_n_groups); must divide num_heads.",
    )
    conv_kernel: PositiveInt = Field(
        default=4, description="mamba2: width K of the causal depthwise convolution over x, B and C (mamba_d_conv)."
    )
    chunk_size: PositiveInt = Field(
        default=256,
        description="mamba2: tokens per chunk Q of the chunked SSD scan (mamba_chunk_size); FLOPs pad to whole chunks.",
    )
    conv_bias: bool = Field(default=True, description="mamba2: the convolution has a bias (mamba_conv_bias).")
    bias: bool = Field(default=False, description="mamba2: in_proj and out_proj have biases (mamba_proj_bias).")
    norm_before_gate: bool = Field(
        default=False,
        description=(
            "mamba2: the gated RMSNorm normalises before multiplying by silu(z) (true) or after (false, Granite 4, "
            "Nemotron-H); changes the values, not the cost."
        ),
    )

    @model_validator(mode="after")
    def _complete(self) -> MixerSpec:
        missing = [name for name in _REQUIRED.get(self.kind, ()) if getattr(self, name) is None]
        if missing:
            raise PydanticCustomError(
                "mixer_incomplete",
                "kind {kind} needs {fields} ({example})",
                {"kind": self.kind, "fields": ", ".join(missing), "example": _EXAMPLE[self.kind]},
            )
        if self.kind == "mamba2" and self.num_heads is not None and self.num_heads % self.groups:
            raise PydanticCustomError(
                "mixer_groups",
                "groups ({groups}) must divide num_heads ({heads}): each group's B and C serve num_heads / groups "
                "heads; use groups {fix}",
                {"groups": self.groups, "heads": self.num_heads, "fix": _divisor_near(self.num_heads, self.groups)},
            )
        return self


def _divisor_near(n: int, k: int) -> int:
    """The divisor of ``n`` nearest ``k`` (the smaller on a tie)."""
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - k), d))


@dataclass(frozen=True)
class Mixer:
    """One block's recurrent token mixer, every default resolved (kind ``mamba2``)."""

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

    @property
    def inner(self) -> int:
        """Width of x, z and the scan's output: num_heads x head_dim (Mamba-2's d_inner = expand x d_model)."""
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels the convolution runs over: x, B and C (inner + 2 x groups x state_size)."""
        return self.inner + 2 * self.groups * self.state_size

    @property
    def in_width(self) -> int:
        """Output width of in_proj: z, (x, B, C) and dt (one per head)."""
        return self.inner + self.conv_dim + self.num_heads

    @property
    def conv_state_values(self) -> int:
        """Values of the convolution state per sequence: conv_dim x conv_kernel."""
        return self.conv_dim * self.conv_kernel

    @property
    def ssm_state_values(self) -> int:
        """Values of the SSM state per sequence: num_heads x head_dim x state_size."""
        return self.num_heads * self.head_dim * self.state_size

    @property
    def state_values(self) -> int:
        """Values of the whole recurrent state per sequence (constant in the sequence length)."""
        return self.conv_state_values + self.ssm_state_values


def resolve_mixer(spec: MixerSpec) -> Mixer | None:
    """The resolved recurrent mixer of ``spec``, or None for attention and for no mixer."""
    if spec.kind not in RECURRENT_KINDS:
        return None
    assert spec.state_size is not None and spec.num_heads is not None and spec.head_dim is not None
    return Mixer(
        kind=spec.kind, state_size=spec.state_size, num_heads=spec.num_heads, head_dim=spec.head_dim,
        groups=spec.groups, conv_kernel=spec.conv_kernel, chunk_size=spec.chunk_size, conv_bias=spec.conv_bias,
        bias=spec.bias, norm_before_gate=spec.norm_before_gate,
    )  # fmt: skip
