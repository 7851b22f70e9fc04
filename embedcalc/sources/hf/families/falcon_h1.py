"""Falcon-H1 (FalconH1ForCausalLM; TII 2025, "Falcon-H1: A Family of Hybrid-Head Language Models Redefining
Efficiency and Performance", arXiv:2507.22448 §2.1; transformers' ``configuration_falcon_h1.py`` /
``modeling_falcon_h1.py``): attention and a Mamba-2 mixer in parallel in every block.

``FalconH1DecoderLayer``: ``input_layernorm`` (RMSNorm), then ``FalconH1Mixer`` (Mamba-2) and ``FalconH1Attention``
on the same normalised input, their outputs (each scaled by a µP multiplier) added into the residual; then
``pre_ff_layernorm`` and the gated ``FalconH1MLP`` (gate, up, down of ``intermediate_size``, bias ``mlp_bias``).
So every layer is the layer model's mixer with ``parallel_attention`` (DESIGN.md §16), and caches both the
attention's K and V and the Mamba-2 state. The attention: q/k/v/o of ``num_attention_heads`` /
``num_key_value_heads`` heads of ``head_dim`` (a key the class does not declare, read with
``getattr(config, "head_dim", hidden_size // num_attention_heads)``), bias ``attention_bias``, RoPE. The mixer:
inner = ``mamba_d_ssm`` (null: ``mamba_expand`` x hidden_size) = ``mamba_n_heads`` x ``mamba_d_head`` ("auto":
inner / heads); in_proj hidden -> 2 inner + 2 ``mamba_n_groups`` ``mamba_d_state`` + heads with bias
``mamba_proj_bias``; a depthwise conv of ``mamba_d_conv`` taps (bias ``mamba_conv_bias``); A_log, D, dt_bias per
head; a gated RMSNorm over inner in ``mamba_n_groups`` groups only when ``mamba_rms_norm`` (else the scan output is
gated by silu(z) alone, no weights); out_proj inner -> hidden with bias ``projectors_bias`` (not
``mamba_proj_bias``). The embedding, final RMSNorm and LM head (untied by default) are LLaMA's.

The µP multipliers (``embedding_multiplier``, ``lm_head_multiplier``, ``mlp_multipliers``, ``key_multiplier``,
``attention_in/out_multiplier``, ``ssm_multipliers`` (the non-persistent ``mup_vector`` buffer), ``ssm_in/out_
multiplier``) own no parameters and scale activations element-wise: no effect on sizes or matmul FLOPs. The scan's
state is kept in float32, as transformers' torch path keeps it
(:data:`~embedcalc.sources.hf.families.hybrid.TORCH_STATE_DTYPE`).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import TORCH_STATE_DTYPE, positive
from embedcalc.sources.hf.layered import origin
from embedcalc.sources.hf.reader import Family, KeyReader

_MULTIPLIER = "a µP multiplier: it scales activations and owns no parameters; element-wise only"
_MULTIPLIERS = ("embedding_multiplier", "lm_head_multiplier", "mlp_multipliers", "key_multiplier",
                "attention_in_multiplier", "attention_out_multiplier", "ssm_multipliers", "ssm_in_multiplier",
                "ssm_out_multiplier")  # fmt: skip
_IGNORED = {
    **dict.fromkeys(_MULTIPLIERS, _MULTIPLIER),
    "time_step_limit": "clamps the Mamba-2 time step; element-wise only (its upper bound may be Infinity)",
    "num_logits_to_keep": "how many prompt positions generate() computes logits for; embedcalc's head counts every "
    "position, as the forward pass of the counting rule does",
    # keys of the original release's files that FalconH1Config does not declare and modeling_falcon_h1.py never reads
    "attn_layer_indices": "FalconH1Model never reads it: every layer has attention beside its Mamba-2 mixer",
    "mamba_use_mlp": "FalconH1Model never reads it: every layer has its MLP",
    "mlp_expansion_factor": "FalconH1MLP's width is intermediate_size; it never reads this key",
    "time_step_min": "initialises the Mamba-2 time step; FalconH1Model never reads it",
    "time_step_max": "initialises the Mamba-2 time step; FalconH1Model never reads it",
    "time_step_floor": "initialises the Mamba-2 time step; FalconH1Model never reads it",
    "time_step_rank": "FalconH1Mixer has no dt projection to give a rank; it never reads this key",
}
_MIXER_KEYS = ("mamba_d_ssm", "mamba_expand", "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups",
               "mamba_d_conv", "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "projectors_bias",
               "mamba_rms_norm", "mamba_norm_before_gate")  # fmt: skip


_FLAGS = (("conv_bias", "mamba_conv_bias"), ("bias", "mamba_proj_bias"), ("out_bias", "projectors_bias"),
          ("gate_norm", "mamba_rms_norm"), ("norm_before_gate", "mamba_norm_before_gate"))  # fmt: skip


def _inner(r: KeyReader) -> int | None:
    """The Mamba-2 inner width: ``mamba_d_ssm``, or ``mamba_expand`` x hidden_size when it is null."""
    _, d_ssm, _ = r.value("mamba_d_ssm")
    if d_ssm is not None:
        r.ignore(
            "mamba_expand", "mamba_d_ssm sets the Mamba-2 inner width; FalconH1Mixer then never reads it"
        )
        return positive(r, "mamba_d_ssm")
    expand, hidden = positive(r, "mamba_expand"), r.data.get("embed_dim")
    return expand * hidden if expand is not None and isinstance(hidden, int) else None


def _mixer(r: KeyReader) -> dict[str, Any] | None:
    """The parallel Mamba-2 mixer of every layer as an embedcalc mixer spec (None and a problem if unusable)."""
    flags = {
        name: bool(r.value(key)[1]) for name, key in _FLAGS
    }  # read first: a refused shape leaves none unread
    inner, heads = _inner(r), positive(r, "mamba_n_heads")
    sizes = {name: positive(r, key) for name, key in (("state_size", "mamba_d_state"), ("groups", "mamba_n_groups"),
             ("conv_kernel", "mamba_d_conv"), ("chunk_size", "mamba_chunk_size"))}  # fmt: skip
    head_key, head, _ = r.value("mamba_d_head")
    if inner is None or heads is None or any(v is None for v in sizes.values()):
        return None
    if head == "auto":  # FalconH1Config.__post_init__
        head = inner // heads
    if not isinstance(head, int) or isinstance(head, bool) or inner % heads or head * heads != inner:
        r.problem(head_key, f"mamba_d_head ({head!r}) x mamba_n_heads ({heads}) must equal the Mamba-2 inner width "
                            f"mamba_d_ssm (or mamba_expand x hidden_size) = {inner} (FalconH1Config refuses the "
                            "file otherwise)")  # fmt: skip
        return None
    spec: dict[str, Any] = {"kind": "mamba2", "parallel_attention": True, "num_heads": heads, "head_dim": head,
                            **sizes, **flags, "ssm_state_dtype": TORCH_STATE_DTYPE}  # fmt: skip
    if not spec["gate_norm"]:
        del spec["norm_before_gate"]
        r.ignore("mamba_norm_before_gate", "mamba_rms_norm is false: no gated norm to place")
    return spec


def _read_falcon_h1(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    for key, reason in _IGNORED.items():
        r.ignore(key, reason)
    r.ignore(
        "layer_types", "FalconH1Config's layer types are all hybrid: attention and Mamba-2 in every layer"
    )
    mixer = _mixer(r)
    if mixer is None:
        return
    placed = ("mamba_norm_before_gate",) if mixer.get("gate_norm") else ()  # else ignored: no norm to place
    used = ", ".join(k for k in _MIXER_KEYS if k in r.raw and (k != "mamba_norm_before_gate" or placed))
    # none of them in the file: FalconH1Config's defaults of them all (origin "default", not "file")
    used = used or ", ".join(_MIXER_KEYS)
    note = (
        "FalconH1DecoderLayer: FalconH1Mixer (Mamba-2) beside FalconH1Attention on input_layernorm's output"
    )
    r.put("mixer", mixer, used, origin(r, used), note)


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=8192,
    attention_dropout=0.0, mamba_d_ssm=1024, mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1,
    mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
    mamba_proj_bias=False, mamba_norm_before_gate=True, mamba_rms_norm=False, projectors_bias=False,
    attention_bias=False, mlp_bias=False,
)  # fmt: skip
FAMILIES = (
    Family("falcon_h1", "FalconH1Config", "FalconH1ForCausalLM (AutoModelForCausalLM)", "falcon-h1-34b",
           _DEFAULTS, _read_falcon_h1, {"layer_types": "layers_block_type"},
           non_finite=frozenset({"time_step_limit"})),
)  # fmt: skip
