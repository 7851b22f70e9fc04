"""The Gemma 3n text model (transformers 5.24 ``Gemma3nTextConfig`` / ``Gemma3nForCausalLM``,
``modeling_gemma3n.py``; a ``gemma3n`` file's ``text_config`` is counted as it, without the audio and vision towers).

Gemma 3's decoder (sandwich RMSNorms, q/k norms of head_dim, GeGLU-tanh, scaled embeddings, sliding and full layers
by ``layer_types``, default every fifth full) with Gemma 4's per-layer embeddings (``hidden_size_per_layer_input``)
and KV sharing (the last ``num_kv_shared_layers`` layers reuse the keys and values of the last earlier layer of
their type: no k/v projections or k norm, no cache), plus:

- **AltUp** (``Gemma3nTextAltUp``): ``altup_num_inputs`` copies of the residual stream, embedcalc's
  ``altup_inputs`` (config/rules/altup.py, analysis/altup.py, modeling/altup.py);
- **Laurel** (``Gemma3nTextLaurelBlock``): a ``laurel_rank`` low-rank residual beside attention (``laurel_rank``);
- ``intermediate_size`` may be a list, one MLP width per layer (``Gemma3nTextMLP(config, layer_idx)``).

``activation_sparsity_pattern`` (``Gemma3nTextMLP._gaussian_topk``: the gate's mean and standard deviation per token
and a ReLU above a quantile) owns no parameter and no matmul; the FFN's matmuls stay dense and are counted in full.
The value norm (no weight), AltUp's coefficient clip and output-scale switch, and final-logit soft-capping own no
parameters and no matmul.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from embedcalc.sources.hf.families.gemma import read_common
from embedcalc.sources.hf.families.gemma4 import first_shared_layer, per_layer_embeddings
from embedcalc.sources.hf.layered import FULL, SLIDING, checked_layer_types, pattern_types, put_layout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_ELEMENTWISE = "element-wise only: no parameter, no matmul"


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_types(r: KeyReader, layers: int) -> list[str] | None:
    key, value = r.lookup("layer_types")
    if value is MISSING or value is None:
        return pattern_types(layers, 5)  # Gemma3nTextConfig: full_attention where (i + 1) % 5 == 0
    return checked_layer_types(r, key, value, layers, (SLIDING, FULL))


def _ffn_widths(r: KeyReader, layers: int) -> list[int] | None:
    """One MLP width per layer: ``intermediate_size`` as an int (every layer) or a list of num_hidden_layers."""
    key, value, _ = r.value("intermediate_size")
    widths = value if isinstance(value, list) else [value] * layers
    if len(widths) != layers or not all(_int(w) and w > 0 for w in widths):
        r.problem(key, f"{key} must be a positive integer or a list of {layers} (num_hidden_layers) positive "
                       f"integers, one per layer; got {value!r}")  # fmt: skip
        return None
    if isinstance(value, list):  # read_shape copied the list: the flat width is the first layer's
        r.mapped[:] = [m for m in r.mapped if m.field != "ffn_dim"]
        uniform = len(set(widths)) == 1
        r.put("ffn_dim", widths[0], key, "file", "every layer's MLP" if uniform else "the first layer's MLP; "
              "the others' own widths are per-block ffn_dim")  # fmt: skip
    return widths


def _sparsity(r: KeyReader, layers: int) -> None:
    key, value, _ = r.value("activation_sparsity_pattern")
    if isinstance(value, list) and len(value) != layers:
        r.problem(key, f"{key} must give one sparsity per layer ({layers}, num_hidden_layers); got {len(value)} "
                       "(transformers refuses it too)")  # fmt: skip
        return
    r.ignore(key, "Gemma3nTextMLP's gaussian top-k on the gate: a mean, a standard deviation and a ReLU per token, "
             "no parameter, no matmul; the MLP's matmuls stay dense and are counted in full")  # fmt: skip


def _altup_and_laurel(r: KeyReader) -> None:
    r.copy("altup_num_inputs", "altup_inputs", note="Gemma3nTextAltUp in every layer; altup_projections and "
           "altup_unembed_projections (n - 1 each)")  # fmt: skip
    r.copy("laurel_rank", "laurel_rank", note="Gemma3nTextLaurelBlock beside every layer's attention")
    r.ignore("altup_active_idx", "which copy each layer runs on; the counts are the same for any")
    r.ignore("altup_coef_clip", "clamps the coefficient weights while training: " + _ELEMENTWISE)
    r.ignore("altup_lr_multiplier", "a training learning-rate multiplier of the AltUp weights (in files written by "
             "transformers 4.53; Gemma3nTextConfig no longer declares it): no effect on shape or cost")  # fmt: skip
    r.ignore("altup_correct_scale", "whether correct_output_scale multiplies the corrected copy: " + _ELEMENTWISE
             + "; the parameter is built either way")  # fmt: skip


def _read_gemma3n_text(r: KeyReader) -> None:
    read_common(r, "hidden_activation", "hidden_act", "sandwich")
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim); v_norm "
          "has no weight")  # fmt: skip
    per_layer_embeddings(r)
    _altup_and_laurel(r)
    layers = r.data.get("num_layers")
    if not _int(layers):
        return
    _sparsity(r, layers)
    widths = _ffn_widths(r, layers)
    types = _layer_types(r, layers)
    if types is None or widths is None:
        return
    first_shared = first_shared_layer(r, layers, types)
    if first_shared is None:
        return
    window_key, window, _ = r.value("sliding_window")
    names, variants = [], {}
    for index, (kind, width) in enumerate(zip(types, widths, strict=True)):
        shared = index >= first_shared
        name = ("local" if kind == SLIDING else "global") + ("_shared" if shared else "")
        name += "" if width == widths[0] else f"_ffn{width}"
        attention: dict[str, Any] = {"sliding_window": window if kind == SLIDING else None}
        spec: dict[str, Any] = {"attention": attention | ({"kv_shared": True} if shared else {})}
        if width != widths[0]:
            spec["ffn"] = {"ffn_dim": width}
        names.append(name)
        variants[name] = spec
    keys = ("layer_types", window_key, "num_kv_shared_layers", "intermediate_size")
    note = (f"{types.count(SLIDING)} sliding ({window}) and {types.count(FULL)} full layers; "
            f"{layers - first_shared} reuse an earlier layer's keys and values")  # fmt: skip
    put_layout(r, names, variants, ", ".join(k for k in keys if k in r.raw) or "layer_types", note)


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=262400, hidden_size=2048, intermediate_size=16384, num_hidden_layers=35, num_attention_heads=8,
    num_key_value_heads=2, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32768,
    tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, sliding_window=512,
    final_logit_softcapping=30.0, vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256,
    altup_active_idx=0, altup_coef_clip=120.0, altup_correct_scale=True, altup_num_inputs=4,
    num_kv_shared_layers=15, laurel_rank=64, activation_sparsity_pattern=None,
)  # fmt: skip
FAMILIES = (
    Family("gemma3n_text", "Gemma3nTextConfig", "Gemma3nForCausalLM (AutoModelForCausalLM)", "gemma-4-31b",
           _DEFAULTS, _read_gemma3n_text),
)  # fmt: skip
