"""What the layer-model families share: per-layer attention kinds (transformers' ``layer_types`` or the older
``sliding_window_pattern``), MoE layer placement, and writing them as embedcalc's ``blocks`` and ``layers`` runs.

A family module reads its keys into one block name per layer (``default``, ``local``, ``moe``, ...) and the
attention / FFN fields of each variant; :func:`put_layout` stores the default block's fields in ``attention`` /
``ffn``, the variants in ``blocks`` and the per-layer names as ``layers`` runs (DESIGN.md §9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embedcalc.config.spec_shapes import DEFAULT_BLOCK
from embedcalc.sources.hf.reader import MISSING, KeyReader, Origin, all_of, yaml_hint

SLIDING, FULL = "sliding_attention", "full_attention"
MOE_KEYS_IGNORED = {
    "output_router_logits": "whether forward() returns the router logits (for the auxiliary loss); same matmuls",
    "router_aux_loss_coef": "the weight of the load-balancing loss in training; no parameters or matmul FLOPs",
    "norm_topk_prob": "whether the top-k routing weights are renormalised; element-wise only",
    "router_jitter_noise": "training-time noise on the router logits; element-wise only",
    "input_jitter_noise": "training-time noise on the MoE input; element-wise only",
    "routed_scaling_factor": "a scalar on the routed experts' output; element-wise only",
    "aux_loss_alpha": "the weight of the load-balancing loss in training; no parameters or matmul FLOPs",
    "seq_aux": "whether the auxiliary loss is per sequence; training only",
    "scoring_func": "softmax or sigmoid over the router logits; element-wise only",
    "topk_method": "how the top-k experts are picked (greedy or group-limited); the same k experts per token",
    "n_group": "expert groups for group-limited routing; each token still reaches num_experts_per_tok experts",
    "topk_group": "groups a token may route to; each token still reaches num_experts_per_tok experts",
    "ep_size": "the expert-parallel degree of the original training code; use --ep to model it",
    "num_nextn_predict_layers": (
        "multi-token-prediction layers of the checkpoint, which transformers does not build; the counting rule "
        "counts the model transformers builds"
    ),
    "num_mtp_layers": (
        "multi-token-prediction layers of the checkpoint, which transformers does not build; the counting rule "
        "counts the model transformers builds"
    ),
}


def ignore_moe_keys(r: KeyReader) -> None:
    for key, reason in MOE_KEYS_IGNORED.items():
        r.ignore(key, reason)


def layer_types(r: KeyReader, num_layers: int, derive: Sequence[str] | None) -> tuple[str, list[str] | None]:
    """(the key that decided it, one of ``sliding_attention`` / ``full_attention`` per layer): transformers'
    ``layer_types`` when the file has a list, else ``derive`` (the family's rule for older files); None when the
    list is malformed (a problem is recorded)."""
    key, value = r.lookup("layer_types")
    if value is MISSING or value is None:
        return key, list(derive) if derive is not None else [FULL] * num_layers
    return key, checked_layer_types(r, key, value, num_layers, (SLIDING, FULL))


def checked_layer_types(
    r: KeyReader, key: str, value: Any, num_layers: int, kinds: Sequence[str]
) -> list[str] | None:
    """``value`` (the file's ``layer_types``) as a list of one of ``kinds`` per layer; None when it is not (a
    problem naming ``key`` is recorded)."""
    if not isinstance(value, list) or len(value) != num_layers or not all(k in kinds for k in value):
        allowed = " or ".join(repr(k) for k in kinds)
        r.problem(key, f"layer_types must list {allowed} for each of the {num_layers} layers; got {value!r}")
        return None
    return list(value)


def pattern_types(num_layers: int, pattern: int) -> list[str]:
    """Every ``pattern``-th layer global, the rest sliding (Gemma 3, Cohere 2, EXAONE 4: ``(i + 1) % pattern``);
    a pattern of 0 or 1 has no sliding layers."""
    if pattern <= 1:
        return [FULL] * num_layers
    return [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]


def runs(names: Sequence[str]) -> list[dict[str, Any]]:
    """Per-layer block names as ``layers`` runs: from each position, the repeated pattern (up to 16 long) that
    covers the most layers, else a single layer (``[a, b] * 21`` -> one run of 21; ``[a] + [b] * 60`` -> two)."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(names):
        best_p, best_r = 1, 1
        for p in range(1, min(16, len(names) - i) + 1):
            pattern = list(names[i : i + p])
            r = 1
            while list(names[i + r * p : i + (r + 1) * p]) == pattern:
                r += 1
            if r > 1 and p * r > best_p * best_r:
                best_p, best_r = p, r
        out.append({"pattern": list(names[i : i + best_p]), "repeat": best_r})
        i += best_p * best_r
    return out


def origin(r: KeyReader, key: str) -> Origin:
    """``file`` when any of the comma-separated keys is in the file, else ``default`` (transformers' defaults)."""
    return "file" if any(k.strip() in r.raw for k in key.split(",")) else "default"


def put_layout(
    r: KeyReader,
    names: Sequence[str],
    variants: dict[str, dict[str, Any]],
    key: str,
    note: str = "",
) -> None:
    """Store the per-layer block ``names`` (each ``default`` or a key of ``variants``, whose values are
    ``{"attention": {...}, "ffn": {...}, "mixer": {...}}`` overrides). A uniform stack is the default block changed
    in place."""
    used = set(names)
    if len(used) == 1 and DEFAULT_BLOCK not in used:
        (only,) = used
        for part in ("attention", "ffn", "mixer"):
            if variants[only].get(part):
                merged = {**(r.data.get(part) or {}), **variants[only][part]}
                r.put(part, merged, key, origin(r, key), note)
        return
    blocks = {name: spec for name, spec in variants.items() if name in used}
    if not blocks:
        return
    r.put("blocks", blocks, key, origin(r, key), note)
    r.put("layers", runs(names), key, origin(r, key), note)


def put_window_ffn_layout(
    r: KeyReader,
    windows: Sequence[int | None],
    ffns: Sequence[str],
    specs: dict[str, dict[str, Any]],
    key: str,
    note: str = "",
) -> None:
    """Per-layer sliding windows (None: full attention) and FFN variants (``dense`` is the default block's FFN, any
    other name a key of ``specs``, an ffn spec) as blocks named ``<ffn>[_w<window>]`` and ``layers`` runs."""
    names, variants = [], {}
    for window, ffn in zip(windows, ffns, strict=True):
        name = ffn + (f"_w{window}" if window else "")
        spec: dict[str, Any] = {}
        if window:
            spec["attention"] = {"sliding_window": window}
        if ffn != "dense":
            spec["ffn"] = specs[ffn]
        variants[name] = spec
        names.append(name)
    put_layout(r, [DEFAULT_BLOCK if n == "dense" else n for n in names], variants, key, note)


def put_windows(
    r: KeyReader, types: Any, window: Any, window_key: str, types_key: str, *, cap_at_context: bool = False,
    full_cache: bool = False,
) -> None:  # fmt: skip
    """The one per-layer window mapper: ``sliding_attention`` / ``full_attention`` per layer (``types``, decided by
    ``types_key``) as ``layers`` runs of a ``local`` block with ``window`` (a window every layer shares: the default
    block's). No window, or no sliding layer, sets none; with ``cap_at_context``, neither does a window of at least
    the context (the family's config then limits nothing); ``full_cache``: the family's cache keeps every token of
    a sliding layer (GPT-Neo)."""
    if not isinstance(types, list) or not all_of(types, {SLIDING, FULL}):
        r.problem(types_key, f"{types_key} = {types!r}: expected a list of {SLIDING} / {FULL}")
        return
    keys = list(dict.fromkeys((types_key, window_key)))
    context = r.data.get("max_seq_len")
    if cap_at_context and isinstance(window, int) and isinstance(context, int) and window >= context:
        for k in keys:
            r.ignore(
                k,
                f"a window of {window} >= max_position_embeddings ({context}) limits nothing in the context",
            )
        return
    if window is None or SLIDING not in types:
        for k in keys:
            r.ignore(k, "no layer uses sliding attention")
        return
    names = ["local" if t == SLIDING else "default" for t in types]
    note = f"{names.count('local')} sliding-window layers of {window}, {names.count('default')} global"
    local: dict[str, Any] = {"sliding_window": window} | ({"full_cache": True} if full_cache else {})
    if full_cache:
        note += "; the KV cache keeps every token of the sliding layers too"
    put_layout(r, names, {"local": {"attention": local}}, ", ".join(keys), note)


def put_window_layout(
    r: KeyReader, layers: int, derived: Sequence[str] | None, window: Any, window_key: str, pattern_key: str | None,
    *, cap_at_context: bool = True,
) -> None:  # fmt: skip
    """Per-layer windows from ``layer_types`` (or the ``derived`` list, the family's rule for files without it,
    from ``pattern_key`` when the file has that key) through :func:`put_windows`."""
    types_key, types = layer_types(r, layers, derived)
    if types is None:
        return
    if types_key in r.raw and pattern_key is not None:
        r.ignore(pattern_key, "layer_types decides which layers slide")
    if types_key not in r.raw:
        types_key = pattern_key if pattern_key is not None and pattern_key in r.raw else window_key
    put_windows(r, types, window, window_key, types_key, cap_at_context=cap_at_context)


def int_list(r: KeyReader, key: str, value: Any, num_layers: int) -> list[int] | None:
    """A list of layer indices (``mlp_only_layers``, ``moe_layers``), checked; None (and a problem) if not."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        r.problem(key, f"{key} must be a list of layer indices; got {value!r}")
        return None
    outside = [v for v in value if not 0 <= v < num_layers]
    if outside:
        r.problem(key, f"{key} names layers {outside} outside 0..{num_layers - 1}")
        return None
    return list(value)


def refuse(r: KeyReader, key: str, what: str) -> None:
    """A feature that changes the count and that embedcalc cannot describe."""
    r.problem(key, f"{what}, which embedcalc's layer model cannot describe. {yaml_hint(r.family)}")


def read_moe(
    r: KeyReader,
    experts_key: str,
    *,
    top_k_key: str = "num_experts_per_tok",
    width_key: str | None = "moe_intermediate_size",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The routed experts of one MoE layer as an embedcalc ffn spec (None and a problem when unusable)."""
    e_key, experts, _ = r.value(experts_key)
    k_key, top_k, _ = r.value(top_k_key)
    spec: dict[str, Any] = {"kind": "moe"}
    for key, value, name in ((e_key, experts, "num_experts"), (k_key, top_k, "top_k")):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            r.problem(key, f"{key} = {value!r}: a mixture of experts needs a positive {name}")
            return None
        spec[name] = value
    if width_key is not None:
        _, width, _ = r.value(width_key)
        spec["expert_dim"] = width
    else:
        spec["expert_dim"] = r.data.get("ffn_dim")
    return spec | (extra or {})
