"""LFM2 (Lfm2ForCausalLM; Liquid AI 2025, "LFM2"; transformers' ``configuration_lfm2.py`` / ``modeling_lfm2.py``):
gated short convolutions interleaved with GQA attention.

Layer i is attention (``Lfm2Attention``: q/k/v/out without bias, RoPE, q/k RMSNorm(head_dim)) when
``layer_types[i]`` is ``full_attention`` (without ``layer_types``: when i is in ``full_attn_idxs``, default every
layer), else a short convolution (``Lfm2ShortConv``: in_proj d -> 3 d, a causal depthwise conv of
``conv_L_cache`` taps, out_proj d -> d, all biased when ``conv_bias``). Every layer then has the gated
``Lfm2MLP`` (w1, w3, w2) of ``intermediate_size`` adjusted as ``Lfm2MLP`` does when ``block_auto_adjust_ff_dim``:
int(2 f / 3), times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``. Pre-norm RMSNorms
(operator_norm, ffn_norm) and a final RMSNorm (``embedding_norm``, applied after the layers); the head tied by
default.

LFM2-MoE (Lfm2MoeForCausalLM; ``configuration_lfm2_moe.py`` / ``modeling_lfm2_moe.py``; LiquidAI/LFM2-8B-A1B) keeps
the same attention, short convolution and norms, with two changes. Its layout comes only from ``layer_types``
(``Lfm2MoeConfig`` has no ``full_attn_idxs`` and no default list: ``Lfm2MoeDecoderLayer`` indexes
``config.layer_types`` and fails without it). Its FFN is ``Lfm2MoeMLP`` of ``intermediate_size`` as written (no
auto-adjust) in the first ``num_dense_layers`` layers, and ``Lfm2MoeSparseMoeBlock`` after them: a bias-free router
Linear(hidden, ``num_experts``) (``Lfm2MoeTopKRouter.weight``), ``num_experts`` gated experts of
``moe_intermediate_size`` (``gate_up_proj`` E x 2f x d, ``down_proj`` E x d x f), top ``num_experts_per_tok``
by sigmoid score; ``use_expert_bias`` adds ``expert_bias``, an ``nn.Buffer`` of E (no parameters), to the scores
that pick the experts.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_shape
from embedcalc.sources.hf.families.hybrid import positive, replace_mapped
from embedcalc.sources.hf.layered import checked_layer_types, ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_FF_KEYS = ("intermediate_size", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of")


def ffn_width(r: KeyReader) -> int | None:
    """The MLP width ``Lfm2MLP`` builds from ``intermediate_size`` (module docstring); None and a problem if not."""
    width = positive(r, "intermediate_size")
    _, adjust, _ = r.value("block_auto_adjust_ff_dim")
    mult_key, multiplier, _ = r.value("block_ffn_dim_multiplier")
    if width is None or not adjust:
        return width
    width = int(2 * width / 3)
    if multiplier is None:
        return width
    multiple = positive(r, "block_multiple_of")
    if not isinstance(multiplier, int | float) or isinstance(multiplier, bool) or multiplier <= 0:
        r.problem(mult_key, f"{mult_key} = {multiplier!r} must be a positive number")
        return None
    if multiple is None:
        return None
    width = int(multiplier * width)
    return multiple * ((width + multiple - 1) // multiple)


def _layer_types(r: KeyReader, layers: int) -> tuple[str, list[str]] | None:
    key, types = r.lookup("layer_types")
    idx_key, idxs = r.lookup("full_attn_idxs")
    if types is not MISSING and types is not None:
        r.ignore(idx_key, "layer_types decides which layers are attention")
        checked = checked_layer_types(r, key, types, layers, ("conv", "full_attention"))
        return None if checked is None else (key, checked)
    if idxs is MISSING or idxs is None:
        return key, ["full_attention"] * layers  # Lfm2Config's default: every layer attends
    if not isinstance(idxs, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in idxs):
        r.problem(idx_key, f"{idx_key} must be a list of layer indices; got {idxs!r}")
        return None
    return idx_key, ["full_attention" if i in idxs else "conv" for i in range(layers)]


def _read_common(r: KeyReader) -> None:
    """What LFM2 and LFM2-MoE share: the fixed layout of the stack, the shape keys, the tied head, the attention's
    q/k norms and the keys with no parameters."""
    for name, value in (
        ("architecture", "decoder"),
        ("norm", "rmsnorm"),
        ("norm_placement", "pre"),
        ("embedding_norm", False),
        ("position", "rope"),
        ("bias", False),
        ("lm_head", True),
        ("activation", "swiglu"),
        ("qkv_bias", False),
        ("out_bias", False),
        ("ffn_bias", False),
    ):
        r.fixed(name, value)  # fmt: skip
    read_shape(r)
    r.copy("tie_word_embeddings", "tie_embeddings")
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "Lfm2Attention: q/k RMSNorm(head_dim)")
    for key in ("rope_theta", "rope_scaling", "rope_parameters", "rope_type"):
        r.ignore(key, hf_keys.ROPE)
    r.ignore("norm_eps", "a norm epsilon; numerics only")


def _conv_mixer(r: KeyReader, kernel: int) -> dict[str, Any]:
    """The short convolution of the ``conv`` layers as an embedcalc mixer spec (``Lfm2ShortConv``)."""
    _, bias, _ = r.value("conv_bias")
    return {"kind": "short_conv", "inner_dim": r.data.get("embed_dim"), "conv_kernel": kernel,
            "conv_bias": bool(bias), "bias": bool(bias)}  # fmt: skip


def _read_lfm2(r: KeyReader) -> None:
    _read_common(r)
    width = ffn_width(r)
    layers = r.data.get("num_layers")
    kernel = positive(r, "conv_L_cache")
    if width is None or kernel is None or not isinstance(layers, int):
        return
    ff_key = ", ".join(k for k in _FF_KEYS if k in r.raw) or "intermediate_size"
    replace_mapped(r, "ffn_dim", width, ff_key, origin(r, ff_key), "as Lfm2MLP adjusts it")
    decided = _layer_types(r, layers)
    if decided is None:
        return
    types_key, types = decided
    names = ["conv" if t == "conv" else "default" for t in types]
    note = f"{names.count('conv')} short-convolution layers, {names.count('default')} attention layers"
    used = ", ".join(k for k in (types_key, "conv_L_cache", "conv_bias") if k in r.raw) or types_key
    put_layout(r, names, {"conv": {"mixer": _conv_mixer(r, kernel)}}, used, note)
    if "conv" not in names:
        r.ignore(types_key, "every layer is full attention (the default block)")
        r.ignore("conv_L_cache", "no layer is a short-convolution layer")
        r.ignore("conv_bias", "no layer is a short-convolution layer")


def _dense_layers(r: KeyReader) -> int | None:
    """``num_dense_layers``: how many leading layers keep the dense MLP (0 allowed); None and a problem if not."""
    key, value, _ = r.value("num_dense_layers")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        r.problem(
            key, f"{key} = {value!r} must be a non-negative integer (the leading layers with a dense MLP)"
        )
        return None
    return value


def _read_lfm2_moe(r: KeyReader) -> None:
    _read_common(r)
    ignore_moe_keys(r)
    r.ignore(
        "use_expert_bias", "expert_bias is a buffer of num_experts added to the routing scores; no parameters"
    )
    layers = r.data.get("num_layers")
    kernel = positive(r, "conv_L_cache")
    dense = _dense_layers(r)
    moe = read_moe(r, "num_experts")
    types_key, types = r.lookup("layer_types")
    if kernel is None or dense is None or moe is None or not isinstance(layers, int):
        return
    if types is MISSING or types is None:
        example = ["conv", "conv", "full_attention"][: min(layers, 3)]
        r.problem(types_key, f"Lfm2MoeConfig has no default layer_types, and Lfm2MoeDecoderLayer cannot be built "
                             f"without it: list 'conv' or 'full_attention' for each of the {layers} layers "
                             f"(layer_types: {example}...)")  # fmt: skip
        return
    checked = checked_layer_types(r, types_key, types, layers, ("conv", "full_attention"))
    if checked is None:
        return
    conv = _conv_mixer(r, kernel)
    variants: dict[str, dict[str, Any]] = {}
    names = []
    for i, kind in enumerate(checked):
        name = ("conv" if kind == "conv" else "attn") + ("" if i < dense else "_moe")
        spec: dict[str, Any] = {"ffn": moe} if i >= dense else {}
        if kind == "conv":
            spec["mixer"] = conv
        variants[name] = spec
        names.append("default" if name == "attn" else name)
    convs, moes = checked.count("conv"), max(layers - dense, 0)
    note = (f"{convs} short-convolution layers, {layers - convs} attention layers; {layers - moes} dense MLP "
            f"layers then {moes} MoE layers")  # fmt: skip
    wanted = ("layer_types", "conv_L_cache", "conv_bias", "num_dense_layers", "num_experts", "num_experts_per_tok",
              "moe_intermediate_size")  # fmt: skip
    put_layout(r, names, variants, ", ".join(k for k in wanted if k in r.raw) or types_key, note)
    if "conv" not in checked:
        r.ignore("conv_L_cache", "no layer is a short-convolution layer")
        r.ignore("conv_bias", "no layer is a short-convolution layer")


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, hidden_size=2560, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, max_position_embeddings=128_000, tie_word_embeddings=True, conv_bias=False,
    conv_L_cache=3, block_multiple_of=256, block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=True,
)  # fmt: skip
# Lfm2MoeConfig's defaults: the LiquidAI/LFM2-8B-A1B shape (its @auto_docstring checkpoint), 32 layers
_MOE_DEFAULTS: dict[str, Any] = dict(
    vocab_size=65536, hidden_size=2048, intermediate_size=7168, moe_intermediate_size=1792, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=128_000, tie_word_embeddings=True,
    conv_bias=False, conv_L_cache=3, num_dense_layers=2, num_experts_per_tok=4, num_experts=32,
    use_expert_bias=True, layer_types=None,
)  # fmt: skip
FAMILIES = (
    Family("lfm2", "Lfm2Config", "Lfm2ForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small", _DEFAULTS,
           _read_lfm2, {"block_ff_dim": "intermediate_size", "tie_embedding": "tie_word_embeddings"}),
    Family("lfm2_moe", "Lfm2MoeConfig", "Lfm2MoeForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small",
           _MOE_DEFAULTS, _read_lfm2_moe, {"tie_embedding": "tie_word_embeddings"}),
)  # fmt: skip
