"""Token mixers beyond softmax attention (DESIGN.md §16): what a block's mixer can be, as data, and its resolved view.

A block mixes tokens with one of:

- ``attention``: the block's :class:`~embedcalc.config.block_spec.AttentionSpec` (standard or latent attention, the
  default);
- ``mamba2``: a Mamba-2 selective state-space layer computed in its chunked (SSD) form (Dao & Gu 2024,
  "Transformers are SSMs", §6-7; transformers' ``Mamba2Mixer`` / ``GraniteMoeHybridMambaLayer`` /
  ``NemotronHMamba2Mixer``): in_proj d -> (z, x, B, C, dt), a causal depthwise conv over (x, B, C), the SSD scan
  with per-head A, D, dt_bias, a gated RMSNorm, out_proj inner -> d;
- ``mamba``: a Mamba-1 selective scan (Gu & Dao 2023, "Mamba", Algorithm 2; transformers' ``MambaMixer`` /
  ``JambaMambaMixer``), token by token: in_proj d -> (x, z) of inner_dim each, a causal depthwise conv over x,
  x_proj -> (dt, B, C), dt_proj dt_rank -> inner_dim, A_log (inner_dim x N) and D, out_proj; its state is
  inner_dim x N (and the conv window);
- ``gated_deltanet``: gated DeltaNet linear attention (Yang, Kautz & Hatamizadeh 2025, "Gated Delta Networks";
  transformers' ``Qwen3NextGatedDeltaNet``): in_proj d -> (q, k, v, z, beta, a), a causal depthwise conv over
  (q, k, v), the chunked gated delta rule with per-value-head A_log and dt_bias, an RMSNorm over each value head
  (one head_dim-wide weight) gated by silu(z), out_proj -> d; its state is num_heads x head_k_dim x head_dim;
- ``kda``: Kimi Delta Attention (Kimi Team 2025, "Kimi Linear", arXiv:2510.26692 §3; transformers'
  ``KimiLinearDeltaAttention``): q, k, v and beta from the input (num_heads heads of head_dim), a causal depthwise
  conv over q, k, v (no bias), the chunked delta rule with a decay **per channel** (low-rank f_a -> f_b, dt_bias per
  channel, A_log per head), an RMSNorm over each head (one head_dim-wide weight) times sigmoid of a low-rank output
  gate (g_a -> g_b), out_proj -> d; its state is num_heads x head_dim x head_dim;
- ``short_conv``: LFM2's gated short convolution (Liquid AI 2025; transformers' ``Lfm2ShortConv``): in_proj
  d -> (B, C, x) of inner_dim each, a causal depthwise conv of conv_kernel (``conv_L_cache``) taps over B * x, no
  activation, gated by C, out_proj inner_dim -> d; its state is the conv window, inner_dim x conv_kernel
  (transformers' conv-state layout), and no scan state;
- ``lightning``: MiniMax's lightning attention, linear attention with a fixed exponential decay per head (Qin et
  al. 2024, "Lightning Attention-2", arXiv:2401.04658; MiniMax 2025, arXiv:2501.08313; transformers'
  ``MiniMaxLightningAttention``): qkv_proj d -> 3 x heads x head_dim (silu), the block form (intra-block masked
  Q Kᵀ, inter-block Q times the carried K ᵀV state), an RMSNorm over the heads' concatenated output, times
  sigmoid(output_gate(x)) (a second Linear d -> heads x head_dim), out_proj -> d. Its decay rates are computed
  from the head and layer index (no parameters); no convolution; its state is num_heads x head_dim x head_dim;
- ``projection``: one bias-free embed_dim x embed_dim linear behind the block's input norm, mixing no tokens
  (DeciLM's ``replace_with_linear`` attention, ``DeciLMLinearAttention`` in NVIDIA's ``modeling_decilm.py``): no
  KV cache, no state;
- ``none``: no mixer at all (Nemotron-H's MLP-only and MoE-only layers, the NAS models' attention-free layers).

A recurrent mixer may also run **in parallel with the block's attention** (``parallel_attention``; Falcon-H1, TII
2025, arXiv:2507.22448 §2.1, transformers' ``FalconH1DecoderLayer``): both read the output of the one input norm,
their outputs add into the residual, then the FFN follows as its own pre-norm sublayer. Falcon-H1's µP multipliers
(``attention_in/out_multiplier``, ``ssm_in/out_multiplier``, ``ssm_multipliers``, ``key_multiplier``, ...) scale
activations and own no parameters; they change values, not sizes or matmul FLOPs, and are not modelled.

A recurrent mixer carries a fixed-size **state** per sequence instead of a KV cache that grows with the context:
Mamba-2 keeps the last conv_kernel inputs of its convolution (conv_dim x conv_kernel, transformers' and mamba_ssm's
conv-state layout) and the SSM state (num_heads x head_dim x state_size). :class:`Mixer`
(:mod:`embedcalc.config.mixer_plan`) is the resolved, hashable view both implementations read
(``analysis/mixers.py``, ``modeling/ssm.py``); nothing here counts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.bounded import PositiveInt
from embedcalc.config.fields import MixerFields
from embedcalc.config.kinds import MixerKind
from embedcalc.config.mixer_plan import RECURRENT_KINDS, Mixer, resolve_mixer

# the resolved view lives in config/mixer_plan.py (no pydantic: a shipped preset's path) and is re-exported here
__all__ = ["RECURRENT_KINDS", "Mixer", "MixerKind", "MixerSpec", "resolve_mixer"]


# the kinds with a scan state beside (or instead of) the convolution window: all but the short convolution
SSM_STATE_KINDS = frozenset({"mamba", "mamba2", "gated_deltanet", "kda", "lightning"})
_FROZEN = ConfigDict(extra="forbid", frozen=True, strict=True)
_REQUIRED = {
    "mamba": ("state_size", "inner_dim", "dt_rank"),
    "mamba2": ("state_size", "num_heads", "head_dim"),
    "gated_deltanet": ("num_heads", "head_dim", "num_k_heads", "head_k_dim"),
    "kda": ("num_heads", "head_dim"),
    "short_conv": ("inner_dim",),
    "lightning": ("num_heads", "head_dim"),
}
# fields a lightning layer has no use for (no convolution, no SSM state size, no groups): one off its default is an
# error
_NOT_LIGHTNING = ("state_size", "groups", "conv_kernel", "conv_bias", "inner_dim", "dt_rank", "num_k_heads",
                  "head_k_dim")  # fmt: skip
_EXAMPLE = {
    "mamba": "Jamba-Mini-1.7 has state_size: 16, inner_dim: 8192, dt_rank: 256",
    "mamba2": "Granite-4.0-H-Small has state_size: 128, num_heads: 128, head_dim: 64",
    "gated_deltanet": "Qwen3-Next-80B-A3B has num_heads: 32, head_dim: 128, num_k_heads: 16, head_k_dim: 128",
    "kda": "Kimi-Linear-48B-A3B has num_heads: 32, head_dim: 128",
    "short_conv": "LFM2-1.2B has inner_dim: 2048 (its hidden size), conv_kernel: 3",
    "lightning": "MiniMax-M1-80k has num_heads: 64, head_dim: 128",
}


class MixerSpec(MixerFields, BaseModel):
    """What mixes the tokens of a block: attention (the block's attention spec), a state-space layer, or nothing."""

    model_config = _FROZEN

    kind: MixerKind = Field(
        default="attention",
        description=(
            "attention: the block's attention (standard or mla). mamba2: a Mamba-2 state-space layer (SSD, Dao & "
            "Gu 2024), a constant-size recurrent state per sequence instead of a KV cache. mamba: Mamba-1. "
            "gated_deltanet: gated DeltaNet linear attention. kda: Kimi Delta Attention (Kimi Linear: the delta "
            "rule with a decay per channel). short_conv: LFM2's gated short convolution. "
            "lightning: MiniMax's lightning attention (linear attention with a per-head decay). projection: one "
            "bias-free embed_dim x embed_dim linear behind the block's input norm, mixing no tokens (the Nemotron NAS "
            "models' replace_with_linear attention): no KV cache. none: no mixer (the block is its FFN only)."
        ),
    )
    state_size: PositiveInt | None = Field(
        default=None,
        description="mamba2: SSM state size N per head and group (mamba_d_state, ssm_state_size).",
    )
    num_heads: PositiveInt | None = Field(
        default=None,
        description=(
            "mamba2: SSM heads H (mamba_n_heads); the inner width is num_heads x head_dim. gated_deltanet: value "
            "heads (linear_num_value_heads). lightning: its heads (MiniMax: num_attention_heads)."
        ),
    )
    head_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "mamba2: channels P per SSM head (mamba_d_head). gated_deltanet: value head width. lightning: the "
            "query, key and value width per head (MiniMax: head_dim)."
        ),
    )
    inner_dim: PositiveInt | None = Field(
        default=None,
        description="mamba: the inner width d_inner = mamba_expand x embed_dim. short_conv: the convolved channels "
        "(LFM2: embed_dim).",
    )
    dt_rank: PositiveInt | None = Field(
        default=None,
        description="mamba: rank of the time-step projection (mamba_dt_rank; 'auto' = ceil(d / 16)).",
    )
    bc_norms: bool = Field(
        default=False,
        description="mamba: RMSNorms on dt, B and C (Jamba's dt/b/c_layernorm), dt_rank + 2 N weights.",
    )
    num_k_heads: PositiveInt | None = Field(
        default=None,
        description="gated_deltanet: query/key heads (linear_num_key_heads); must divide num_heads.",
    )
    head_k_dim: PositiveInt | None = Field(
        default=None, description="gated_deltanet: query/key head width (linear_key_head_dim)."
    )
    groups: PositiveInt = Field(
        default=1,
        description="mamba2: groups G sharing one B and C projection (mamba_n_groups); must divide num_heads.",
    )
    conv_kernel: PositiveInt = Field(
        default=4,
        description="mamba2: width K of the causal depthwise convolution over x, B and C (mamba_d_conv).",
    )
    chunk_size: PositiveInt | None = Field(
        default=None,
        description=(
            "Tokens per chunk Q of the chunked scan (mamba2: mamba_chunk_size, default 256; gated_deltanet: 64, "
            "transformers' fixed chunk; lightning: block_size, default 256); FLOPs pad to whole chunks (lightning: "
            "the last block runs at its own length, as transformers runs it)."
        ),
    )
    conv_bias: bool | None = Field(
        default=None,
        description="The convolution has a bias (mamba2: mamba_conv_bias, default true; gated_deltanet: none).",
    )
    bias: bool = Field(
        default=False, description="mamba2: in_proj and out_proj have biases (mamba_proj_bias)."
    )
    norm_before_gate: bool = Field(
        default=False,
        description=(
            "mamba2: the gated RMSNorm normalises before multiplying by silu(z) (true) or after (false, Granite 4, "
            "Nemotron-H); changes the values, not the cost."
        ),
    )
    gate_norm: bool = Field(
        default=True,
        description=(
            "mamba2: the scan output goes through the gated RMSNorm (inner weights, per group); false: it is only "
            "gated by silu(z), no norm and no weights (Falcon-H1's mamba_rms_norm false)."
        ),
    )
    out_bias: bool | None = Field(
        default=None,
        description=(
            "The output projection (out_proj) has a bias; default bias (Falcon-H1 takes it from projectors_bias, "
            "apart from the input projection's mamba_proj_bias)."
        ),
    )
    parallel_attention: bool = Field(
        default=False,
        description=(
            "The block also runs its attention, in parallel with this mixer on the same normalised input; the two "
            "outputs add into one residual and the FFN follows (Falcon-H1's hybrid block, the layer model's "
            "parallel sublayers of DESIGN.md §9 applied to the token mixers). One input norm (attention/norm) "
            "serves both; the block keeps the attention's KV cache and this mixer's state."
        ),
    )

    ssm_state_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        default=None,
        description=(
            "mamba, mamba2, gated_deltanet, lightning: the dtype the scan's state (SSM or delta-rule state) is kept "
            "in, e.g. fp32 as transformers' torch path keeps it for Jamba, Granite 4.0-H, Falcon-H1, Nemotron-H "
            "(its mamba_ssm_cache_dtype) and Qwen3-Next; the convolution window stays in the activation dtype. "
            "Default: the activation dtype."
        ),
    )

    @field_validator("gate_norm")
    @classmethod
    def _gate_norm_of_mamba2(cls, value: bool, info: ValidationInfo) -> bool:
        kind = info.data.get("kind")
        if not value and kind != "mamba2":
            raise PydanticCustomError(
                "field_of_other_kind",
                "mixer.gate_norm (false) applies to kind mamba2 only (its optional gated RMSNorm), but kind is "
                "{kind}, so it would be ignored: add kind: mamba2 or remove gate_norm",
                {"kind": kind},
            )
        return value

    @field_validator("parallel_attention")
    @classmethod
    def _parallel_needs_recurrent(cls, value: bool, info: ValidationInfo) -> bool:
        kind = info.data.get("kind")
        if value and kind not in RECURRENT_KINDS:
            raise PydanticCustomError(
                "parallel_needs_recurrent",
                "mixer.parallel_attention (true) runs the block's attention beside a recurrent mixer, but kind is "
                "{kind}: set kind to one of {kinds} (Falcon-H1: mamba2), or remove parallel_attention",
                {"kind": kind, "kinds": ", ".join(sorted(RECURRENT_KINDS))},
            )
        return value

    @model_validator(mode="after")
    def _complete(self) -> MixerSpec:
        missing = [name for name in _REQUIRED.get(self.kind, ()) if getattr(self, name) is None]
        if missing:
            raise PydanticCustomError(
                "mixer_incomplete",
                "kind {kind} needs {fields} ({example})",
                {"kind": self.kind, "fields": ", ".join(missing), "example": _EXAMPLE[self.kind]},
            )
        if self.ssm_state_dtype is not None and self.kind not in SSM_STATE_KINDS:
            raise PydanticCustomError(
                "mixer_field_unused",
                "ssm_state_dtype ({dtype}) sets the dtype of a scan's state; kind {kind} has none (its only state is "
                "the convolution window). Remove ssm_state_dtype or use one of {kinds}",
                {
                    "dtype": self.ssm_state_dtype,
                    "kind": self.kind,
                    "kinds": ", ".join(sorted(SSM_STATE_KINDS)),
                },
            )
        fields = type(self).model_fields
        unused = [name for name in _NOT_LIGHTNING if getattr(self, name) != fields[name].default]
        if self.kind == "lightning" and unused:
            raise PydanticCustomError(
                "mixer_field_unused",
                "kind lightning has no {fields} (no convolution, no SSM state size: its state is num_heads x head_dim "
                "x head_dim); remove {fields}",
                {"fields": ", ".join(unused)},
            )
        if (
            self.kind == "gated_deltanet"
            and self.num_heads
            and self.num_k_heads
            and self.num_heads % self.num_k_heads
        ):
            raise PydanticCustomError(
                "mixer_groups",
                "num_k_heads ({groups}) must divide num_heads ({heads}): each query/key head serves num_heads / "
                "num_k_heads value heads; use num_k_heads {fix}",
                {"groups": self.num_k_heads, "heads": self.num_heads,
                 "fix": _divisor_near(self.num_heads, self.num_k_heads)},
            )  # fmt: skip
        if self.kind == "mamba2" and self.num_heads is not None and self.num_heads % self.groups:
            raise PydanticCustomError(
                "mixer_groups",
                "groups ({groups}) must divide num_heads ({heads}): each group's B and C serve num_heads / groups "
                "heads; use groups {fix}",
                {
                    "groups": self.groups,
                    "heads": self.num_heads,
                    "fix": _divisor_near(self.num_heads, self.groups),
                },
            )
        return self


def _divisor_near(n: int, k: int) -> int:
    """The divisor of ``n`` nearest ``k`` (the smaller on a tie), found by a bounded search outward from ``k``
    (issue 33: every divisor up to ``n`` was tried, and a Hugging Face config's mamba_num_heads of 30 digits never
    answered)."""
    from embedcalc.config.divisors import nearest_divisors  # on a refusal only (start-up)

    return nearest_divisors(n, k, 1)[0]
