"""Hybrid recurrent / attention families (DESIGN.md §16): Granite 4.0-H (GraniteMoeHybridForCausalLM) and
Qwen3-Next (Qwen3NextForCausalLM).

Qwen3-Next (Qwen team 2025; transformers' ``modeling_qwen3_next.py``): layer i is gated DeltaNet linear attention
(``Qwen3NextGatedDeltaNet``) when ``layer_types[i]`` is ``linear_attention`` (default: every layer but each
``full_attention_interval``-th), else gated full attention: q_proj twice as wide (the queries and a sigmoid output
gate), q/k RMSNorm(head_dim), partial rotary (``partial_rotary_factor``); the FFN is Qwen2-MoE's (``num_experts``
experts of ``moe_intermediate_size``, a shared expert of ``shared_expert_intermediate_size`` behind a sigmoid gate)
on the layers ``decoder_sparse_step`` and ``mlp_only_layers`` select, a dense MLP of ``intermediate_size`` on the
others. The DeltaNet layer: in_proj_qkvz and in_proj_ba (d -> 2 key_dim + 2 value_dim, d -> 2 value heads, no
bias), a bias-free conv of ``linear_conv_kernel_dim`` over q, k, v, A_log and dt_bias per value head, a per-head
RMSNorm of ``linear_value_head_dim`` and out_proj.

Granite 4.0-H (IBM 2025; transformers' ``modeling_granitemoehybrid.py``): a LLaMA-shaped decoder whose layer i is
a Mamba-2 layer (``GraniteMoeHybridMambaLayer``) when ``layer_types[i]`` is ``mamba`` / ``linear_attention`` and
GQA attention (no RoPE unless ``position_embedding_type`` is ``rope``) when it is ``attention`` /
``full_attention``; every layer then has a mixture of ``num_local_experts`` experts of ``intermediate_size``
(router without bias, gated experts) plus a gated shared MLP of ``shared_intermediate_size`` that every token
goes through, or only that MLP when ``num_local_experts`` is 0. The Mamba-2 layer: in_proj hidden ->
2 x inner + 2 x groups x d_state + heads (bias ``mamba_proj_bias``), a depthwise conv of ``mamba_d_conv`` taps over
inner + 2 x groups x d_state channels (bias ``mamba_conv_bias``), A_log / D / dt_bias per head, a gated RMSNorm
over inner and out_proj inner -> hidden, with inner = ``mamba_expand`` x hidden = ``mamba_n_heads`` x
``mamba_d_head`` (transformers checks both).

The scan's state of both (and of Jamba's Mamba-1 and Falcon-H1's Mamba-2) is kept in float32
(:data:`TORCH_STATE_DTYPE`): transformers' torch paths cast the scan's inputs to float32 (granitemoehybrid's
``torch_forward``: ``hidden_states.float()``, B and C ``.float()``; Qwen3-Next's ``torch_chunk_gated_delta_rule``:
q, k, v ``.to(torch.float32)``), and the cache keeps the state they return; the convolution window stays in the
model's dtype. Measured at bf16 after a prefill and a decode step: tests/sources/hf/test_ssm_state_dtype.py.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.qwen3 import moe_flags
from embedcalc.sources.hf.layered import checked_layer_types, ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.sources.hf.mappings import map_partial_rotary
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, Origin, all_of

_MAMBA = frozenset({"mamba", "linear_attention"})
_ATTENTION = frozenset({"attention", "full_attention"})
_MAMBA_KEYS = ("mamba_n_heads", "mamba_d_state", "mamba_d_head", "mamba_n_groups", "mamba_d_conv", "mamba_chunk_size",
               "mamba_expand", "mamba_conv_bias", "mamba_proj_bias")  # fmt: skip
_GRANITE_SCALARS = ("embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier")
# the scan's state as transformers' torch path keeps it (module docstring); MiniMax keeps its lightning state in the
# model's dtype and LFM2 has none
TORCH_STATE_DTYPE = "fp32"


def replace_mapped(r: KeyReader, name: str, value: Any, key: str, how: Origin, note: str = "") -> None:
    """Map ``name`` again, dropping what an earlier (shared) rule mapped onto it, so the report shows one entry."""
    r.mapped = [m for m in r.mapped if m.field != name]
    r.put(name, value, key, how, note)


def positive(r: KeyReader, key: str) -> int | None:
    """The positive integer ``key`` holds (the file's value, else transformers' default); None and a problem if not."""
    written, value, _ = r.value(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        r.problem(written, f"{written} = {value!r} must be a positive integer")
        return None
    return value


def mamba2_spec(r: KeyReader) -> dict[str, Any] | None:
    """The Mamba-2 mixer of the ``mamba`` layers as an embedcalc mixer spec (None and a problem if unusable)."""
    hidden = r.data.get("embed_dim")
    sizes = {name: positive(r, key) for name, key in (("num_heads", "mamba_n_heads"), ("state_size", "mamba_d_state"),
             ("groups", "mamba_n_groups"), ("conv_kernel", "mamba_d_conv"), ("chunk_size", "mamba_chunk_size"),
             ("expand", "mamba_expand"))}  # fmt: skip
    head_key, head, _ = r.value("mamba_d_head")
    if any(v is None for v in sizes.values()) or not isinstance(hidden, int):
        return None
    heads, expand = sizes.pop("num_heads"), sizes.pop("expand")
    assert heads is not None and expand is not None
    inner = expand * hidden
    if head == "auto":
        head = inner // heads
    if not isinstance(head, int) or isinstance(head, bool) or head * heads != inner:
        r.problem(head_key, f"mamba_d_head ({head!r}) x mamba_n_heads ({heads}) must equal mamba_expand x "
                            f"hidden_size = {inner} (transformers refuses the file otherwise)")  # fmt: skip
        return None
    spec: dict[str, Any] = {"kind": "mamba2", "num_heads": heads, "head_dim": head, **sizes,
                            "ssm_state_dtype": TORCH_STATE_DTYPE}  # fmt: skip
    for name, key in (("conv_bias", "mamba_conv_bias"), ("bias", "mamba_proj_bias")):
        _, value, _ = r.value(key)
        spec[name] = bool(value)
    return spec


def _read_granitemoehybrid(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    pos_key, pos, _ = r.value("position_embedding_type")
    position = "rope" if pos == "rope" else "none"
    replace_mapped(
        r, "position", position, pos_key, origin(r, pos_key), "GraniteMoeHybridModel: RoPE only for rope"
    )
    for key in _GRANITE_SCALARS:
        r.ignore(key, "a scalar multiplier; element-wise only")
    r.ignore("time_step_limit", "clamps the Mamba-2 time step; element-wise only")
    r.ignore("normalization_function", "RMSNorm, which GraniteMoeHybridModel always builds")
    r.ignore("init_method", "an initialisation scheme (mup); no effect on sizes or FLOPs")
    ignore_moe_keys(r)
    shared = positive(r, "shared_intermediate_size")
    _, experts, _ = r.value("num_local_experts")
    if shared is None:
        return
    replace_mapped(r, "ffn_dim", shared, "shared_intermediate_size", origin(r, "shared_intermediate_size"),
                   "the shared MLP every layer has")  # fmt: skip
    if experts == 0:
        r.ignore("intermediate_size", "num_local_experts is 0: no experts, only the shared MLP")
        r.ignore("num_experts_per_tok", "num_local_experts is 0: no experts, only the shared MLP")
        ffn: dict[str, Any] | None = None
    else:
        extra = {"num_shared_experts": 1, "shared_expert_dim": shared}
        ffn = read_moe(r, "num_local_experts", width_key="intermediate_size", extra=extra)
        if ffn is None:
            return
        key = "num_local_experts, num_experts_per_tok, intermediate_size, shared_intermediate_size"
        r.put("ffn", ffn, key, origin(r, key), "every layer: router + experts + the shared MLP")
    _layout(r)


def _layout(r: KeyReader) -> None:
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    types_key, types = r.lookup("layer_types")
    if types is MISSING or types is None:
        types = ["linear_attention"] * layers  # GraniteMoeHybridConfig's default
    if not isinstance(types, list) or len(types) != layers or not all_of(types, _MAMBA | _ATTENTION):
        r.problem(types_key, f"layer_types must list mamba / linear_attention or attention / full_attention for "
                             f"each of the {layers} layers; got {types!r}")  # fmt: skip
        return
    mamba = mamba2_spec(r) if set(types) & _MAMBA else None
    if set(types) & _MAMBA and mamba is None:
        return
    if mamba is None:
        for key in _MAMBA_KEYS:
            r.ignore(key, "no layer is a Mamba-2 layer")
    names = ["mamba" if t in _MAMBA else "default" for t in types]
    note = f"{names.count('mamba')} Mamba-2 layers, {names.count('default')} attention layers"
    wanted = [types_key, *(_MAMBA_KEYS if mamba is not None else ())]
    put_layout(r, names, {"mamba": {"mixer": mamba or {}}}, ", ".join(k for k in wanted if k in r.raw) or types_key,
               note)  # fmt: skip


_GDN_KEYS = (("num_heads", "linear_num_value_heads"), ("head_dim", "linear_value_head_dim"),
             ("num_k_heads", "linear_num_key_heads"), ("head_k_dim", "linear_key_head_dim"),
             ("conv_kernel", "linear_conv_kernel_dim"))  # fmt: skip


def _read_qwen3_next(r: KeyReader) -> None:
    _read_gated_hybrid(r, "sparse_step")


def _read_qwen3_5(r: KeyReader) -> None:
    _read_gated_hybrid(r, "dense")


def _read_qwen3_5_moe(r: KeyReader) -> None:
    _read_gated_hybrid(r, "every")


def _read_gated_hybrid(r: KeyReader, moe_layers: str) -> None:
    """Qwen3-Next's stack; ``moe_layers``: ``sparse_step`` (Qwen3-Next: ``decoder_sparse_step`` and
    ``mlp_only_layers``), ``dense`` (Qwen3.5: a dense MLP of ``intermediate_size`` in every layer) or ``every``
    (Qwen3.5-MoE: the MoE block in every layer)."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.put("attention", {"qk_norm": "head", "output_gate": True}, "model_type", "family",
          "Qwen3NextAttention: q_norm / k_norm RMSNorm(head_dim); q_proj also makes a sigmoid output gate")  # fmt: skip
    map_partial_rotary(r, 0.25)
    ignore_moe_keys(r)
    r.ignore("full_attention_interval", "decides which layers are full attention (mapped as layers)")
    for key in ("use_sliding_window", "sliding_window", "max_window_layers"):
        r.ignore(key, "Qwen3NextForCausalLM never reads it: no layer slides")
    moe: dict[str, Any] | None = None
    if moe_layers != "dense":
        _, shared, _ = r.value("shared_expert_intermediate_size")
        extra = (
            {"num_shared_experts": 1, "shared_expert_dim": shared, "shared_expert_gate": True}
            if shared
            else {}
        )
        moe = read_moe(r, "num_experts", extra=extra)
        if moe is None:
            return
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    types_key, types = r.lookup("layer_types")
    if types is MISSING or types is None:
        _, interval = r.lookup("full_attention_interval")
        every = interval if isinstance(interval, int) and interval > 0 else 4
        types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
    types = checked_layer_types(r, types_key, types, layers, ("linear_attention", "full_attention"))
    flags = [moe_layers == "every"] * layers if moe_layers != "sparse_step" else None
    if types is not None and flags is None:
        flags = moe_flags(r, layers)
    if types is None or flags is None:
        return
    gdn: dict[str, Any] = {"kind": "gated_deltanet", "ssm_state_dtype": TORCH_STATE_DTYPE}
    for name, key in _GDN_KEYS:
        value = positive(r, key)
        if value is None:
            return
        gdn[name] = value
    names, variants = [], {}
    for kind, is_moe in zip(types, flags, strict=True):
        name = ("linear" if kind == "linear_attention" else "full") + ("_moe" if is_moe else "")
        spec: dict[str, Any] = {"ffn": moe} if is_moe else {}
        if kind == "linear_attention":
            spec["mixer"] = gdn
        variants[name] = spec
        names.append("default" if name == "full" else name)
    if moe_layers == "every" and "intermediate_size" in r.raw:
        r.ignore("intermediate_size", "every layer is an MoE block: no dense MLP reads it")
    note = f"{types.count('linear_attention')} gated DeltaNet layers, {types.count('full_attention')} gated attention"
    wanted = [
        types_key,
        *(key for _, key in _GDN_KEYS),
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "decoder_sparse_step",
        "mlp_only_layers",
    ]
    put_layout(r, names, variants, ", ".join(k for k in wanted if k in r.raw) or types_key, note)


_QWEN3_NEXT: dict[str, Any] = dict(
    vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=48, num_attention_heads=16,
    num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, head_dim=256, linear_conv_kernel_dim=4, linear_key_head_dim=128,
    linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32, decoder_sparse_step=1,
    moe_intermediate_size=512, shared_expert_intermediate_size=512, num_experts_per_tok=10, num_experts=512,
    mlp_only_layers=None,
)  # fmt: skip
_DEFAULTS: dict[str, Any] = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, num_local_experts=8, num_experts_per_tok=2,
    shared_intermediate_size=1024, position_embedding_type=None, mamba_n_heads=128, mamba_n_groups=1,
    mamba_d_state=256, mamba_d_head="auto", mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256,
    mamba_conv_bias=True, mamba_proj_bias=False,
)  # fmt: skip
_NOT_QWEN3_5 = (
    "decoder_sparse_step",
    "mlp_only_layers",
)  # Qwen3_5TextConfig deletes them from Qwen3NextConfig
_QWEN3_5: dict[str, Any] = {k: v for k, v in _QWEN3_NEXT.items() if "expert" not in k and "moe" not in k
                             and k not in _NOT_QWEN3_5}  # fmt: skip
_QWEN3_5 |= dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
                 num_key_value_heads=4)  # fmt: skip
_QWEN3_5_MOE: dict[str, Any] = {k: v for k, v in _QWEN3_NEXT.items() if k not in _NOT_QWEN3_5}
_QWEN3_5_MOE |= dict(vocab_size=248320, hidden_size=2048, intermediate_size=None, num_hidden_layers=40,
                     num_experts_per_tok=8, num_experts=256)  # fmt: skip
FAMILIES = (
    Family("granitemoehybrid", "GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM (AutoModelForCausalLM)",
           "granite-4.0-h-small", _DEFAULTS, _read_granitemoehybrid, {"layers_block_type": "layer_types"},
           non_finite=frozenset({"time_step_limit"})),
    Family("qwen3_next", "Qwen3NextConfig", "Qwen3NextForCausalLM (AutoModelForCausalLM)", "qwen3-next-80b-a3b",
           _QWEN3_NEXT, _read_qwen3_next),
    # Qwen3.5's text models (Qwen3_5ForCausalLM, the language model of Qwen3_5ForConditionalGeneration): Qwen3-Next's
    # stack whose DeltaNet splits in_proj_qkvz / in_proj_ba into in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (the
    # same widths), a dense MLP in every layer (qwen3_5_text) or the MoE block in every layer (qwen3_5_moe_text)
    Family("qwen3_5_text", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM (AutoModelForCausalLM)", "qwen3-next-80b-a3b",
           _QWEN3_5, _read_qwen3_5),
    Family("qwen3_5_moe_text", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM (AutoModelForCausalLM)",
           "qwen3-next-80b-a3b", _QWEN3_5_MOE, _read_qwen3_5_moe),
)  # fmt: skip
