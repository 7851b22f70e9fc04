"""Nemotron-H (NemotronHForCausalLM; NVIDIA 2025, "Nemotron-H: A Family of Accurate and Efficient Hybrid
Mamba-Transformer Models"; transformers' ``configuration_nemotron_h.py`` / ``modeling_nemotron_h.py``).

Every block is one pre-norm (RMSNorm) sublayer and its residual, of the kind ``layers_block_type[i]`` names (or
the older ``hybrid_override_pattern`` string, one character per layer): ``M`` / ``linear_attention`` a Mamba-2 mixer
alone (``NemotronHMamba2Mixer``: in_proj d -> 2 inner + 2 groups state + heads with bias ``use_bias``, a depthwise
conv of ``conv_kernel`` over inner + 2 groups state (bias ``use_conv_bias``), A_log / D / dt_bias per head, a gated
RMSNorm over inner, out_proj; inner = ``mamba_num_heads`` x ``mamba_head_dim``), ``*`` / ``full_attention`` GQA
attention alone (q/k/v/o without bias, no positional encoding, ``head_dim``), ``-`` / ``mlp`` an MLP alone
(``NemotronHMLP``: up and down of ``intermediate_size``, squared ReLU, bias ``mlp_bias``), ``E`` / ``moe`` a mixture
of experts alone (``NemotronHMoE``: ``n_routed_experts`` non-gated experts of ``moe_intermediate_size``, a
bias-free sigmoid router (its score-correction bias is a buffer), top ``num_experts_per_tok``, one shared MLP of
``moe_shared_expert_intermediate_size``; with ``moe_latent_size`` L, Nemotron-3's latent MoE: the routed experts
run in L between ``fc1_latent_proj`` d -> L and ``fc2_latent_proj`` L -> d, biased by ``mlp_bias``, the router and
the shared MLP on d: the layer model's ``latent_dim``). So blocks have no FFN (M, *) or no token mixer (-, E): the
layer model's ``ffn: none`` and ``mixer: none`` (DESIGN.md §16).
"""

from __future__ import annotations

from typing import Any

from embedcalc.config.dtypes import ALIASES
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import positive, replace_mapped
from embedcalc.sources.hf.layered import ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of

_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
_MAMBA_KEYS = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size",
               "use_conv_bias", "use_bias", "mamba_ssm_cache_dtype")  # fmt: skip
_MOE_KEYS = (
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_shared_expert_intermediate_size",
)
# transformers' remap_legacy_layer_types
_LEGACY = {
    "mamba": "linear_attention",
    "attention": "full_attention",
}
_IGNORED = {
    "use_mamba_kernels": "whether the fused CUDA kernels run the scan; the same computation",
    "num_logits_to_keep": "how many prompt positions generate() computes logits for; embedcalc's head counts every "
    "position, as the forward pass of the counting rule does",
    "mamba_hidden_act": "the activation after the convolution; element-wise only",
    "time_step_min": "initialises and clamps the Mamba-2 time step; element-wise only",
    "time_step_max": "initialises the Mamba-2 time step; no effect on sizes or FLOPs",
    "time_step_floor": "initialises the Mamba-2 time step; no effect on sizes or FLOPs",
    "time_step_limit": "clamps the Mamba-2 time step; element-wise only (its upper bound may be Infinity)",
    "time_step_rank": "an older remote-code key: NemotronHMamba2Mixer has no dt projection to give a rank",
    "expand": "NemotronHMamba2Mixer's inner width is mamba_num_heads x mamba_head_dim; it never reads expand",
    "residual_in_fp32": "the residual stream's precision; the same matmuls",
    "rescale_prenorm_residual": "an initialisation scheme; no effect on sizes or FLOPs",
    "hidden_dropout": "NemotronHModel never reads it; dropout has no parameters or matmul FLOPs",
    "sliding_window": "NemotronHAttention never reads it: no layer slides",
    "attention_bias": "NemotronHAttention builds q/k/v/o without bias whatever it says",
    "mamba_proj_bias": "NemotronHMamba2Mixer takes its projections' bias from use_bias; it never reads this key",
    "n_shared_experts": "NemotronHMoE builds one shared MLP of moe_shared_expert_intermediate_size whatever it says",
    "mtp_layers_block_type": "multi-token-prediction layers, which transformers does not build",
    "mtp_hybrid_override_pattern": "multi-token-prediction layers, which transformers does not build",
}


def _block_types(r: KeyReader) -> tuple[str, list[str]] | None:
    """(the key that decided it, one transformers layer type per layer), as ``NemotronHConfig.__post_init__``
    reads them: ``layers_block_type`` (or ``layer_types``), else ``hybrid_override_pattern``, else its default."""
    key, types = r.lookup("layers_block_type")
    pattern_key, pattern = r.lookup("hybrid_override_pattern")
    if types is not MISSING and types is not None:
        if pattern is not MISSING:
            r.ignore(pattern_key, "layers_block_type decides the layers (NemotronHConfig drops the pattern)")
        if (
            not isinstance(types, list)
            or not types
            or not all_of(types, set(_PATTERN.values()) | set(_LEGACY))
        ):
            r.problem(key, f"{key} must be a non-empty list of {', '.join(_PATTERN.values())}; got {types!r}")
            return None
        return key, [str(_LEGACY.get(t, t)) for t in types]
    if pattern is MISSING:
        return key, ["linear_attention", "moe", "full_attention", "mlp"]  # NemotronHConfig's default
    if not isinstance(pattern, str) or not pattern or set(pattern) - set(_PATTERN):
        r.problem(pattern_key, f"{pattern_key} must be a string of M (Mamba-2), * (attention), - (MLP) and E "
                               f"(MoE), one per layer; got {pattern!r}")  # fmt: skip
        return None
    return pattern_key, [_PATTERN[c] for c in pattern]


def _mamba2(r: KeyReader) -> dict[str, Any] | None:
    sizes = {name: positive(r, key) for name, key in (("num_heads", "mamba_num_heads"), ("head_dim", "mamba_head_dim"),
             ("state_size", "ssm_state_size"), ("groups", "n_groups"), ("conv_kernel", "conv_kernel"),
             ("chunk_size", "chunk_size"))}  # fmt: skip
    if any(v is None for v in sizes.values()):
        return None
    spec: dict[str, Any] = {"kind": "mamba2", **sizes}
    for name, key in (("conv_bias", "use_conv_bias"), ("bias", "use_bias")):
        _, value, _ = r.value(key)
        spec[name] = bool(value)
    # the SSM state's dtype (the class default float32; transformers' torch path keeps it in float32 whatever the
    # key says, vLLM in the key's dtype, the convolution window in the model's): "auto" follows the model
    key, value, _ = r.value("mamba_ssm_cache_dtype")
    state_dtype = ALIASES.get(value, value) if isinstance(value, str) else value
    if state_dtype not in ("fp32", "bf16", "fp16", "auto"):
        r.problem(
            key, f"{key} = {value!r} is not a dtype of the SSM state; use float32, bfloat16, float16 or auto"
        )
        return None
    if state_dtype != "auto":
        spec["ssm_state_dtype"] = state_dtype
    return spec


def _read_nemotron_h(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn="mlp_bias", gated=False, act_key="mlp_hidden_act")
    replace_mapped(
        r, "position", "none", "model_type", "family", "NemotronHAttention has no positional encoding"
    )
    ignore_moe_keys(r)
    for key, reason in _IGNORED.items():
        r.ignore(key, reason)
    decided = _block_types(r)
    if decided is None:
        return
    types_key, types = decided
    layers_key, layers = r.lookup("num_hidden_layers")
    if layers is not MISSING and layers != len(types):
        r.notes.append(f"{layers_key} = {layers!r} disagrees with the {len(types)} layers {types_key} lists; "
                       "NemotronHConfig uses the list (as here)")  # fmt: skip
    replace_mapped(r, "num_layers", len(types), types_key, origin(r, types_key), "one layer per entry")
    r.ignore(
        layers_key, f"NemotronHConfig counts the layers of {types_key} ({len(types)}) and ignores this key"
    )
    # older remote-code files: NemotronHAttention reads head_dim
    head_key, head = r.lookup("attention_head_dim")
    if head is not MISSING:
        r.derived(head_key, r.data.get("head_dim"), "head_dim")
    _, latent, _ = r.value("moe_latent_size")
    if latent is None:
        r.ignore("moe_latent_size", "null: the experts run in the hidden width")
    elif "moe" not in types:
        r.ignore("moe_latent_size", "no layer is a mixture-of-experts layer")
    variants: dict[str, dict[str, Any]] = {
        "attn": {"ffn": {"kind": "none"}},
        "mlp": {"mixer": {"kind": "none"}},
    }
    wanted = [types_key]
    if "linear_attention" in types:
        mamba = _mamba2(r)
        if mamba is None:
            return
        variants["mamba"] = {"mixer": mamba, "ffn": {"kind": "none"}}
        wanted += _MAMBA_KEYS
    else:
        for key in _MAMBA_KEYS:
            r.ignore(key, "no layer is a Mamba-2 layer")
    if "moe" in types:
        width = positive(r, "moe_shared_expert_intermediate_size")
        # NemotronHExperts: stacked up/down weights without biases, whatever mlp_bias says (the shared MLP has them)
        extra = {"num_shared_experts": 1, "shared_expert_dim": width, "expert_bias": False}
        moe = read_moe(r, "n_routed_experts", extra=extra)
        if (
            latent is not None
        ):  # Nemotron-3's latent MoE: NemotronHMoE's fc1/fc2_latent_proj around the experts
            latent = positive(r, "moe_latent_size")
            wanted.append("moe_latent_size")
            if moe is not None:
                moe["latent_dim"] = latent
        if moe is None or width is None or (latent is None and "moe_latent_size" in wanted):
            return
        variants["moe"] = {"mixer": {"kind": "none"}, "ffn": moe}
        wanted += _MOE_KEYS
    else:
        for key in _MOE_KEYS:
            r.ignore(key, "no layer is a mixture-of-experts layer")
    r.ignore(
        "moe_shared_expert_overlap",
        "whether the shared expert's matmuls overlap the routed ones; the same FLOPs",
    )
    names = [{"linear_attention": "mamba", "full_attention": "attn"}.get(t, t) for t in types]
    counts = ", ".join(f"{names.count(n)} {label}" for n, label in (("mamba", "Mamba-2"), ("attn", "attention"),
                       ("mlp", "MLP"), ("moe", "MoE")) if n in names)  # fmt: skip
    used = ", ".join(dict.fromkeys(k for k in wanted if k in r.raw)) or types_key
    put_layout(r, names, variants, used, f"{counts} blocks, one sublayer each")


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=131072, hidden_size=4096, tie_word_embeddings=False, num_attention_heads=32, num_key_value_heads=8,
    head_dim=128, max_position_embeddings=4096, attention_dropout=0.0, intermediate_size=21504, num_hidden_layers=4,
    mlp_hidden_act="relu2", mlp_bias=False, ssm_state_size=128, mamba_num_heads=128, mamba_head_dim=64, n_groups=8,
    conv_kernel=4, use_conv_bias=True, chunk_size=128, use_bias=False, n_routed_experts=8, num_experts_per_tok=2,
    moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688, moe_latent_size=None,
    mamba_ssm_cache_dtype="float32",
)  # fmt: skip
FAMILIES = (
    Family("nemotron_h", "NemotronHConfig", "NemotronHForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small",
           _DEFAULTS, _read_nemotron_h,
           {"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts", "mamba_n_groups": "n_groups",
            "mamba_d_conv": "conv_kernel", "mamba_expand": "expand", "mamba_conv_bias": "use_conv_bias",
            "mamba_chunk_size": "chunk_size", "mamba_dt_min": "time_step_min", "mamba_dt_max": "time_step_max",
            "mamba_dt_limit": "time_step_limit", "mamba_dt_init_floor": "time_step_floor"},
           non_finite=frozenset({"time_step_limit", "mamba_dt_limit"})),
)  # fmt: skip
