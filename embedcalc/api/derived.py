"""A family without a native reader, read as embedcalc's own layer model derived from transformers' module tree
(DESIGN §19): the derivation (:mod:`embedcalc.reconcile.general_layers`) is only a proposal, kept where its counts
equal transformers' count of the same file exactly, at a short length and at the longest the model runs; else the
general reader's count stands alone (:mod:`embedcalc.api.general`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from embedcalc.analysis.workload import Workload
from embedcalc.api.general import _meta, count_general, general_available, general_hint, handover_reason
from embedcalc.config.dtypes import ALIASES
from embedcalc.errors import ConfigError
from embedcalc.sources.loading import LoadedConfig, parse_override

__all__ = ["derived_load"]


def derived_load(
    refusal: ConfigError, target: str, origin: str, raw: Mapping[str, Any], overrides: Sequence[str] | None
) -> LoadedConfig:
    """A family no native reader maps, loaded as embedcalc's layer model derived from transformers' module tree
    (:mod:`embedcalc.reconcile.general_layers`) when that model's parameters (per component), forward FLOPs and KV
    cache equal transformers' count of the file exactly; else ``refusal``, told how to get the general reader when
    it is missing (analyze and check then count the file through transformers alone)."""
    from embedcalc.analysis.checked import analyze_loaded
    from embedcalc.reconcile.general_layers import derive_layer_model
    from embedcalc.sources.loading import load_parsed

    if not general_available():
        raise general_hint(refusal)
    if raw.get("is_encoder_decoder") is True:
        # the derivation reads decoders of identical layers only (reconcile/general_layers.py): an encoder-decoder
        # (an unbalanced T5Gemma) would be built on the meta device for nothing, a second time beside the count
        raise refusal
    if any(p.code == "hf_shared_read_key" for p in refusal.problems):
        # a key only transformers' caches and masks read (a window on every layer) shows at lengths past it, not in
        # the short forward that checks a derived layer model: transformers' own count alone
        raise refusal
    data = dict(raw)
    for text in overrides or []:
        key, value = parse_override(text)
        data[key] = value
    check = Workload(seq_len=8, gen_tokens=8)
    try:
        count = count_general(data, origin, target, check)
    except ConfigError:
        raise refusal from None
    meta = _meta(data, origin, check)
    proposal = derive_layer_model(meta.parameters, meta.text_attrs, str(data.get("_name_or_path") or target))
    if proposal is None or meta.text_only is not None or count.flops is None:
        raise refusal
    dtype = next((data[k] for k in ("dtype", "torch_dtype") if isinstance(data.get(k), str)), None)
    if dtype in ALIASES:
        proposal["dtype"] = ALIASES[dtype]
    try:
        loaded = load_parsed(proposal, "file", origin, target=target)
        analysis = analyze_loaded(loaded, check, model_dtype=False)
    except ConfigError:
        raise refusal from None
    same = (analysis.params.as_dict() == count.params.as_dict() and analysis.flops.forward == count.flops.total
            and analysis.memory.kv_cache_bytes == count.kv_cache_bytes)  # fmt: skip
    longest = _longest(meta.text_attrs)
    if not same or not _same_at_length(data, origin, target, loaded, longest):
        raise refusal
    handed = refusal.code == "hf_refused_family" and refusal.problems
    lead = handover_reason(refusal) if handed else f"no native mapping of {meta.class_name}'s family"
    note = (
        f"{lead}: embedcalc's layer model derived from transformers' "
        f"module tree ({count.counted_by}; params per component, FLOPs and KV cache agree exactly, at 8 tokens and "
        f"at {longest:,})"
    )
    return LoadedConfig(target, loaded.config, "transformers", loaded.user_keys, [*loaded.notes, note])


_LONGEST_CHECK = 1 << 20  # tokens; a longer maximum is checked at this length (a window past it is not seen)
_NO_MAXIMUM = 131_072  # tokens checked when the config names no maximum length


def _longest(attrs: Mapping[str, Any]) -> int:
    """The length a derived layer model is checked at a second time: the config's maximum positions. An 8-token
    forward cannot show a sliding window, a chunk or any other limit on what a token attends to or what the cache
    keeps, which a family's own modeling code may read from a key embedcalc has not derived; at the longest length
    the model runs, any such limit that matters shows in the FLOPs and the cache. On the meta device the length
    costs nothing (a 131,072-token forward of a small model: ~0.2 s, as an 8-token one)."""
    positions = attrs.get("positions")
    if isinstance(positions, int) and not isinstance(positions, bool) and positions > 0:
        return min(positions, _LONGEST_CHECK)
    return _NO_MAXIMUM


def _same_at_length(
    data: Mapping[str, Any], origin: str, target: str, loaded: LoadedConfig, length: int
) -> bool:
    """Whether the derived layer model's FLOPs and KV cache still equal transformers' count at ``length`` tokens."""
    from embedcalc.analysis.checked import analyze_loaded

    if length <= 8:
        return True
    run = Workload(seq_len=length, gen_tokens=8)
    try:
        count = count_general(data, origin, target, run)
        analysis = analyze_loaded(loaded, run, model_dtype=False)
    except ConfigError:
        return False
    return (count.flops is not None and analysis.flops.forward == count.flops.total
            and analysis.memory.kv_cache_bytes == count.kv_cache_bytes)  # fmt: skip
