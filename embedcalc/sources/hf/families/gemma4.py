"""The Gemma 4 text model (transformers 5.24 ``Gemma4TextConfig`` / ``Gemma4ForCausalLM``, ``modeling_gemma4.py``).

Gemma 3's decoder (sandwich RMSNorms, q/k norms of head_dim, GeGLU, scaled embeddings, sliding and full layers by
``layer_types``, the last layer forced full) with its layer types made structurally different and three new parts:

- **full-attention layers** have their own head width ``global_head_dim`` (512) and, with ``attention_k_eq_v``,
  their own key/value heads ``num_global_key_value_heads`` and no value projection (the values are the key
  projection's output; ``Gemma4TextAttention.use_alternative_attention``). Files re-saved by transformers carry the
  same as ``per_layer_config`` ({layer: {head_dim, num_key_value_heads}}), which wins when present;
- **KV sharing**: the last ``num_kv_shared_layers`` layers reuse the keys and values of the last earlier layer of
  their layer type (``kv_sharing_modes``): no k/v projections or k norm, no KV cache (``DummyLayer``); with
  ``use_double_wide_mlp`` their MLP is twice as wide;
- **per-layer embeddings** (``hidden_size_per_layer_input`` > 0): a vocab_size_per_layer_input x (layers x p)
  table, a hidden_size -> layers x p projection with its RMSNorm, and per layer a gate, a projection back and a
  norm (embedcalc's ``per_layer_input_dim``).

The value norm (``v_norm``, no weight), ``layer_scalar`` (a buffer), proportional RoPE on the full layers and
final-logit soft-capping own no parameters and no matmul. The MoE block (``enable_moe_block``, 26B-A4B): routed
experts beside the dense MLP, which embedcalc counts as one shared expert, with the router's input and per-expert
scales and three more norms (FFN ``router_scale``, ``branch_norms``).
"""

from __future__ import annotations

from typing import Any, TypeGuard

from embedcalc.sources.hf.families.gemma import read_common
from embedcalc.sources.hf.layered import FULL, SLIDING, checked_layer_types, pattern_types, put_layout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_OVERRIDES = {"head_dim": "head_dim", "num_key_value_heads": "num_kv_heads"}


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_types(r: KeyReader, layers: int) -> list[str] | None:
    key, value = r.lookup("layer_types")
    if value is MISSING or value is None:
        types = pattern_types(layers, 6)  # Gemma4TextConfig: five sliding to one full
    else:
        checked = checked_layer_types(r, key, value, layers, (SLIDING, FULL))
        if checked is None:
            return None
        types = checked
    if types and types[-1] != FULL:
        r.notes.append("the last layer is full attention: Gemma4TextConfig forces it")
        types[-1] = FULL
    return types


def _full_overrides(r: KeyReader, types: list[str]) -> tuple[dict[str, Any], str] | None:
    """The full-attention layers' head_dim / num_kv_heads overrides: ``per_layer_config`` when the file has it
    (every full layer must carry the same), else ``global_head_dim`` and, with ``attention_k_eq_v``,
    ``num_global_key_value_heads``."""
    k_eq_v = r.value("attention_k_eq_v")[1] is True
    key, per_layer = r.lookup("per_layer_config")
    if per_layer is not MISSING and per_layer is not None:
        r.ignore("global_head_dim", "per_layer_config holds the full layers' head_dim")
        r.ignore("num_global_key_value_heads", "per_layer_config holds the full layers' key/value heads")
        if not isinstance(per_layer, dict) or not all(str(k).isdigit() for k in per_layer):
            r.problem(key, f"{key} must map layer indices to overrides; got {per_layer!r}")
            return None
        by_layer = {int(k): v for k, v in per_layer.items()}  # transformers writes "05" for layer 5
        seen: list[dict[str, Any]] = []
        for index, kind in enumerate(types):
            entry: Any = by_layer.get(index, {}) if kind == FULL else {}
            if kind == SLIDING and index in by_layer:
                r.problem(key, f"{key} overrides sliding layer {index}, which embedcalc's Gemma 4 reader does "
                               "not model (only the full layers differ)")  # fmt: skip
                return None
            if kind == FULL:
                unknown = sorted(set(entry) - set(_OVERRIDES)) if isinstance(entry, dict) else [repr(entry)]
                if unknown:
                    r.problem(key, f"{key}[{index}] sets {', '.join(unknown)}; only head_dim and "
                                   "num_key_value_heads are modelled")  # fmt: skip
                    return None
                seen.append(entry)
        if any(e != seen[0] for e in seen):
            r.problem(key, f"{key} gives the full-attention layers different overrides; embedcalc's Gemma 4 "
                           "reader models one full-layer shape")  # fmt: skip
            return None
        overrides = {_OVERRIDES[k]: v for k, v in (seen[0] if seen else {}).items()}
        source = key
    else:
        hd_key, head_dim = r.lookup("global_head_dim")
        overrides = {
            "head_dim": 512 if head_dim is MISSING else head_dim
        }  # Gemma4TextConfig's kwargs default
        source = hd_key
        kv_key, kv = r.lookup("num_global_key_value_heads")
        if k_eq_v and kv is not MISSING and kv is not None:
            overrides["num_kv_heads"] = kv
            source = f"{hd_key}, {kv_key}"
        elif kv is not MISSING:
            r.ignore(kv_key, "read only with attention_k_eq_v (Gemma4TextConfig); the full layers keep "
                             "num_key_value_heads")  # fmt: skip
    for name, value in overrides.items():
        if not _int(value) or value < 1:
            r.problem(source, f"{source}: the full layers' {name} must be a positive integer; got {value!r}")
            return None
    if overrides.get("head_dim") == r.data.get("head_dim"):
        overrides.pop("head_dim")
    if overrides.get("num_kv_heads") == r.data.get("num_kv_heads"):
        overrides.pop("num_kv_heads")
    if "attention_k_eq_v" in r.raw:
        source += ", attention_k_eq_v"
    if k_eq_v:
        overrides["values_from_keys"] = True
    r.notes.append(f"full-attention layers: {overrides or 'the flat head shape'} (from {source})")
    return overrides, source


def first_shared_layer(r: KeyReader, layers: int, types: list[str]) -> int | None:
    """The first KV-sharing layer (``num_hidden_layers - num_kv_shared_layers``), checked as transformers'
    ``kv_sharing_modes`` does: every layer type that shares must have an earlier layer producing its cache."""
    key, shared, _ = r.value("num_kv_shared_layers")
    if not _int(shared) or not 0 <= shared <= layers:
        r.problem(key, f"{key} = {shared!r}: must be an integer from 0 to num_hidden_layers ({layers})")
        return None
    first: int = layers - shared
    if (
        shared and shared == layers
    ):  # transformers >= 5.25 builds it (every layer "reuse"), with no cache producer
        r.problem(key, f"{key} = {shared} shares the cache of every layer (num_hidden_layers {layers}), so no layer "
                       "computes the keys and values the others would reuse: embedcalc does not model a stack "
                       "without a producing layer")  # fmt: skip
        return None
    if shared and not set(types[first:]) <= set(types[:first]):
        r.problem(key, f"{key} = {shared}: a layer type among the last {shared} layers has no earlier layer of its "
                       "type computing the keys and values it would reuse (transformers' kv_sharing_modes raises "
                       "the same)")  # fmt: skip
        return None
    return first


def _read_gemma4_text(r: KeyReader) -> None:
    read_gemma4_text(r)


def read_gemma4_text(r: KeyReader, drafter: bool = False) -> None:
    """A Gemma 4 text model; ``drafter``: Gemma 4's assistant's (families/gemma4_assistant.py), whose every layer
    attends to the target model's keys and values (``kv_external``) instead of sharing an earlier layer's."""
    if r.lookup("use_bidirectional_attention")[1] == "all":
        r.problem("use_bidirectional_attention", "use_bidirectional_attention 'all' makes every layer "
                  "bidirectional with a halved window (an encoder), which the Gemma 4 reader does not map")  # fmt: skip
    read_common(r, "hidden_activation", "hidden_act", "sandwich")
    r.put("attention", {"qk_norm": "head"}, "model_type", "family", "q_norm, k_norm: RMSNorm(head_dim); v_norm "
          "has no weight")  # fmt: skip
    moe = _read_moe(r)
    per_layer_embeddings(r)
    layers = r.data.get("num_layers")
    if not _int(layers):
        return
    types = _layer_types(r, layers)
    if types is None:
        return
    found = _full_overrides(r, types)
    first_shared = 0 if drafter else first_shared_layer(r, layers, types)  # the assistant's checks its own
    if found is None or first_shared is None:
        return
    full, full_keys = found
    window_key, window, _ = r.value("sliding_window")
    wide_key, wide, _ = r.value("use_double_wide_mlp")
    ffn = r.data.get("ffn_dim")
    names, variants = [], {}
    for index, kind in enumerate(types):
        shared = index >= first_shared
        name = ("local" if kind == SLIDING else "global") + (
            "_target" if drafter else "_shared" if shared else ""
        )
        attention: dict[str, Any] = (
            {"sliding_window": window} if kind == SLIDING else {"sliding_window": None, **full}
        )
        borrowed = {"kv_external": True} if drafter else {"kv_shared": True} if shared else {}
        spec: dict[str, Any] = {"attention": attention | borrowed}
        if (
            shared and wide is True and _int(ffn)
        ):  # Gemma4TextMLP: intermediate_size x 2 in the sharing layers
            # a variant's ffn is validated on its own: the whole MoE spec, with the wider shared expert
            spec["ffn"] = {**r.data["ffn"], "shared_expert_dim": 2 * ffn} if moe else {"ffn_dim": 2 * ffn}
        names.append(name)
        variants[name] = spec
    keys = ", ".join(k for k in ("layer_types", window_key, "num_kv_shared_layers", wide_key) if k in r.raw)
    keys = ", ".join(k for k in (keys, full_keys) if k)
    whose = "the target model's" if drafter else "an earlier layer's"
    note = (f"{types.count(SLIDING)} sliding ({window}) and {types.count(FULL)} full layers; "
            f"{layers - first_shared} reuse {whose} keys and values")  # fmt: skip
    put_layout(r, names, variants, keys or "layer_types", note)
    if wide is not True:
        r.ignore(wide_key, "false: every MLP is intermediate_size wide")


def _read_moe(r: KeyReader) -> bool:
    """Gemma 4's MoE block (``enable_moe_block``; 26B-A4B): every layer keeps its dense MLP of intermediate_size
    (a shared expert to embedcalc) beside num_experts routed experts of moe_intermediate_size, top top_k_experts,
    with the router's two learned scales and three more norms (``router_scale``, ``branch_norms``)."""
    moe_key, moe, _ = r.value("enable_moe_block")
    keys = ("num_experts", "top_k_experts", "moe_intermediate_size")
    if moe is not True:
        r.ignore(moe_key, f"{moe!r}: every layer's FFN is the dense MLP")
        for key in keys:
            r.ignore(key, "read only with enable_moe_block")
        return False
    spec: dict[str, Any] = {"kind": "moe"}
    for key, name in zip(keys, ("num_experts", "top_k", "expert_dim"), strict=True):
        written, value, _ = r.value(key)
        if not _int(value) or value < 1:
            r.problem(written, f"{written} = {value!r}: enable_moe_block needs a positive {key}")
            return False
        spec[name] = value
    ffn = r.data.get("ffn_dim")
    spec |= {"num_shared_experts": 1, "shared_expert_dim": ffn, "router_scale": True, "branch_norms": True}
    r.put("ffn", spec, ", ".join((moe_key, *keys)), "file", "Gemma4TextExperts beside the dense Gemma4TextMLP "
          "(its shared expert), Gemma4TextRouter's scales, three more norms per layer")  # fmt: skip
    return True


def per_layer_embeddings(r: KeyReader) -> None:
    key, width, _ = r.value("hidden_size_per_layer_input")
    vocab_key = "vocab_size_per_layer_input"
    if width in (0, None):
        r.ignore(key, f"{width!r}: no per-layer embeddings")
        r.ignore(vocab_key, "no per-layer embeddings to size")
        return
    r.copy(key, "per_layer_input_dim", note="embed_tokens_per_layer, per_layer_model_projection and per layer a "
           "gate, a projection and a norm")  # fmt: skip
    r.copy(vocab_key, "per_layer_vocab_size")


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30, num_attention_heads=8,
    num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072,
    tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, sliding_window=512,
    vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256, attention_k_eq_v=False,
    num_kv_shared_layers=0, enable_moe_block=False, use_double_wide_mlp=False, num_experts=None,
    top_k_experts=None, moe_intermediate_size=None,
)  # fmt: skip
FAMILIES = (
    Family("gemma4_text", "Gemma4TextConfig", "Gemma4ForCausalLM (AutoModelForCausalLM)", "gemma-4-31b",
           _DEFAULTS, _read_gemma4_text),
)  # fmt: skip
