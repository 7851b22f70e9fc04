"""Which reader counts a target, and the general reader's orchestration (DESIGN §19).

A Hugging Face ``config.json`` whose ``model_type`` a native reader maps (:mod:`embedcalc.sources.hf.registry`) is
read natively: every analytic command works on it (``reader: native``). One that no native reader maps (the error
code ``hf_unsupported_family``) is counted by the general reader when torch and transformers are installed: built
by transformers' own class on the meta device (:mod:`embedcalc.modeling.hf_meta`), its parameters, active
parameters, FLOPs and cache placed on embedcalc's breakdown keys (:mod:`embedcalc.reconcile.general`),
``reader: transformers-meta``. Without them the native refusal stands and says which extra brings the general
reader. ``--set key=value`` on such a file sets the config.json's own key (``--set num_hidden_layers=4``).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.workload import Workload, with_model_dtype
from embedcalc.config.dtypes import ALIASES, DTYPE_BYTES
from embedcalc.errors import ConfigError, Problem, UnsupportedEnvironmentError
from embedcalc.sources.loading import parse_override, resolve_target, target_origin

if TYPE_CHECKING:
    from embedcalc.analysis.budget import Budget
    from embedcalc.api.serving import ServingOptions
    from embedcalc.api.timing import TimeOptions
    from embedcalc.modeling.hf_meta import MetaModel
    from embedcalc.reconcile.general import GeneralCount, GeneralReport

__all__ = [
    "EXTRA",
    "GENERAL_CODES",
    "count_general",
    "general_available",
    "general_fallback",
    "general_hint",
    "read_general",
]

EXTRA = "pip install 'embedcalc[transformers]'"
"""The install command that brings the general reader (torch and transformers)."""
GENERAL_CODES = frozenset({"hf_unsupported_family", "hf_refused_family"})
"""The native readers' refusals the general reader takes over: a family without a native mapping, and one
embedcalc's layer model cannot describe exactly (:data:`~embedcalc.sources.hf.registry.REFUSED`)."""


def general_available() -> bool:
    """Whether torch and transformers can be imported (found, not imported: start-up stays light)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))


def general_hint(error: ConfigError) -> ConfigError:
    """The native refusal of a family without a mapping, told how to get the general reader."""
    if error.code not in GENERAL_CODES or EXTRA in error.message:  # told once
        return error
    missing = [n for n in ("torch", "transformers") if importlib.util.find_spec(n) is None]
    hint = (
        f". With {' and '.join(missing)} installed ({EXTRA}), embedcalc counts any model_type transformers can "
        "build through transformers' own class on the meta device (params per component, active experts, FLOPs, "
        "KV cache; analyze and check)"
    )
    message = error.message + hint
    problems = [
        replace(p, message=p.message + hint) if p.code in GENERAL_CODES else p for p in error.problems
    ]
    return ConfigError(message, problems, error.code)


def _raw(target: str | Mapping[str, Any], overrides: Sequence[str] | None) -> tuple[dict[str, Any], str, str]:
    """(config.json mapping with ``--set`` applied to its own keys, origin for messages, model dtype key)."""
    if isinstance(target, Mapping):
        raw, origin = dict(target), str(target.get("_name_or_path") or "config")
    else:
        raw, source, path = resolve_target(target)
        origin = target_origin(target, source, path)
    for text in overrides or []:
        key, value = parse_override(text)
        raw[key] = value
    if not isinstance(raw.get("model_type"), str):
        message = (
            f"{origin}: the general reader reads a Hugging Face config.json; this file has no model_type"
        )
        raise ConfigError(message, [Problem("model_type", message, "hf_no_model_type")], "hf_no_model_type")
    dtype = next((raw[k] for k in ("dtype", "torch_dtype") if isinstance(raw.get(k), str)), "")
    return raw, origin, str(dtype)


def _remote_code(raw: Mapping[str, Any]) -> list[str]:
    """The classes a file's ``auto_map`` names in the checkpoint's own code (``modeling_kimi.KimiForCausalLM``)."""
    auto = raw.get("auto_map")
    if not isinstance(auto, Mapping):
        return []
    refs = [r for v in auto.values() for r in (v if isinstance(v, list) else [v])]
    return [r for r in refs if isinstance(r, str) and r]


def _no_class(origin: str, model_type: str, raw: Mapping[str, Any], version: str | None) -> str:
    """Why transformers cannot build ``model_type``: the missing family, whether its remote code (and so
    ``trust_remote_code``) is what would build it, and the related types this transformers has."""
    from embedcalc.modeling.hf_classes import related_model_types

    remote = _remote_code(raw)
    if remote:
        code = (
            f"the file's auto_map names the checkpoint's own code ({', '.join(remote[:3])}): transformers builds it "
            "only with trust_remote_code=True, running that code, which embedcalc does not do"
        )
    else:
        code = "the file names no remote code (no auto_map) either, so trust_remote_code would not build it"
    related = related_model_types(model_type)
    near = (
        f"; transformers {version} has {', '.join(repr(t) for t in related)}: if this file is one of those under "
        "another name, set its model_type in a copy"
        if related
        else ""
    )
    return (
        f"{origin}: model_type {model_type!r} is a family neither embedcalc maps nor transformers {version} has a "
        f"class for; {code}{near}. Describe it in embedcalc's own YAML (`embedcalc schema`)"
    )


def _refused(origin: str, model_type: str, exc: Exception, raw: Mapping[str, Any]) -> ConfigError:
    from embedcalc.modeling.hf_classes import NoAutoClassError, transformers_version

    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    version = transformers_version()
    if isinstance(exc, ValueError) and "Unrecognized" in text:
        message = _no_class(origin, model_type, raw, version)
        return ConfigError(message, [Problem("model_type", message, "hf_no_class")], "hf_no_class")
    if isinstance(exc, NoAutoClassError):
        message = (
            f"{origin}: transformers {version} has the config class of model_type {model_type!r} but no model "
            f"class the general reader can build and count as a text model ({text}); describe it in embedcalc's "
            "own YAML (`embedcalc schema`)"
        )
        return ConfigError(
            message, [Problem("model_type", message, "hf_no_model_class")], "hf_no_model_class"
        )
    message = f"{origin}: transformers {version} refuses to build this {model_type} config: {exc!r:.300}"
    return ConfigError(
        message, [Problem("model_type", message, "hf_transformers_refused")], "hf_transformers_refused"
    )


def read_general(
    target: str | Mapping[str, Any], overrides: Sequence[str] | None = None, run: Workload | None = None
) -> GeneralCount:
    """Count ``target`` (a Hugging Face ``config.json`` path, hub id or mapping) through transformers' own class on
    the meta device, for one workload (``batch_size``, ``seq_len``, ``tgt_len``, ``gen_tokens``, ``dtype``; the
    model's own dtype unless one was chosen). Needs torch and transformers (exit 4 without them).

    >>> import embedcalc  # doctest: +SKIP
    >>> from embedcalc.api.general import read_general  # doctest: +SKIP
    >>> r = read_general({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2})  # doctest: +SKIP
    >>> r.counted_by  # doctest: +SKIP
    "counted by transformers' MambaForCausalLM on the meta device"
    """
    from embedcalc.api.torch_env import require_torch

    raw, origin, dtype = _raw(target, overrides)
    if not general_available():
        require_torch()
        raise UnsupportedEnvironmentError(
            f"{origin}: transformers is not installed; the general reader builds the model with it: {EXTRA}",
            code="no_transformers",
        )
    workload = with_model_dtype(run or Workload(), ALIASES.get(dtype), "config")
    return count_general(raw, origin, str(target) if not isinstance(target, Mapping) else origin, workload)


_BUILT: dict[
    str, Any
] = {}  # one meta build per file and workload in a process (load's derivation, then analyze)


def _meta(raw: Mapping[str, Any], origin: str, workload: Workload) -> MetaModel:
    from embedcalc.modeling.hf_meta import build_meta_model

    shape = (workload.batch_size, workload.seq_len, workload.tgt_len, workload.seq_len + workload.gen_tokens)
    key = json.dumps([raw, shape], sort_keys=True, default=str)
    if key not in _BUILT:
        _refuse_misplaced(raw, origin)
        try:
            _BUILT.clear()  # the last one only: a meta model's description is small, but a sweep has many
            _BUILT[key] = build_meta_model(raw, *shape)
        except Exception as exc:  # transformers' refusal of a config, in whatever class it raises
            raise _refused(origin, str(raw["model_type"]), exc, raw) from None
    meta: MetaModel = _BUILT[key]
    return meta


def _refuse_misplaced(raw: Mapping[str, Any], origin: str) -> None:
    """A multimodal file whose text model's keys sit at the top level, where transformers' class ignores them and
    builds its default text model: refused (exit 3), not counted as that default."""
    from embedcalc.modeling.hf_classes import misplaced_text_keys

    try:
        found = misplaced_text_keys(raw)
    except Exception:  # a config transformers refuses: the build below names why
        return
    if not found:
        return

    def short(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    shown = ", ".join(f"{k} = {short(v)} (built: {short(b)})" for k, v, b in found[:6])
    more = f" and {len(found) - 6} more" if len(found) > 6 else ""
    message = (f"{origin}: the text model's keys are at the top level of this {raw['model_type']!r} file, where "
               f"transformers' class does not read them and builds its default text model instead: {shown}{more}. "
               "Move them under \"text_config\" (as the model's published config.json has them)")  # fmt: skip
    raise ConfigError(
        message, [Problem("text_config", message, "hf_misplaced_text_keys")], "hf_misplaced_text_keys"
    )


def count_general(raw: Mapping[str, Any], origin: str, target: str, workload: Workload) -> GeneralCount:
    """The general reader on a parsed config.json (:func:`read_general` after loading)."""
    from embedcalc.reconcile.general import ExpertGroup, GeneralCount, cache_layers, place_flops, place_params

    model_type = str(raw["model_type"])
    meta = _meta(raw, origin, workload)
    element = int(DTYPE_BYTES[workload.activation_dtype])
    notes = [
        f"counted by transformers {meta.version}'s {meta.class_name} ({meta.auto_class}) on the meta device"
    ]
    if meta.text_only is not None and meta.architecture == "encoder-decoder":  # T5Gemma 2
        notes.append(f"multimodal: only the encoder's text model ({meta.text_only}), the decoder and the LM head are "
                     "counted")  # fmt: skip
    elif meta.text_only is not None:
        notes.append(f"multimodal: only the language model ({meta.text_only}) and the LM head are counted")
    if meta.ran_alone is not None:
        notes.append(f"FLOPs and cache: the language model ({meta.text_only}) run alone on token ids, the vision tower "
                     f"not run ({meta.class_name}'s own forward on token ids alone: {meta.ran_alone})")  # fmt: skip
    experts = tuple(ExpertGroup(e.path, e.params, e.num_experts, e.top_k) for e in meta.experts)
    if any(e.top_k is None for e in experts):
        notes.append("routed experts without a top-k transformers exposes: active parameters not counted")
    outside = sum(math.prod(shape) for _, shape in meta.outside)
    return GeneralCount(
        target=target,
        model_type=model_type,
        class_name=meta.class_name,
        auto_class=meta.auto_class,
        architecture=meta.architecture,
        transformers_version=meta.version,
        workload=workload.as_dict() | {"parallel": None},
        params=place_params(meta.parameters, meta.architecture, meta.layer_children),
        experts=experts,
        outside_params=outside,
        flops=None if meta.flops is None else place_flops(meta.flops, meta.architecture, meta.layer_children),
        flops_error=meta.flops_error,
        cache=None if meta.cache is None else cache_layers(meta.cache, element),
        cache_class=meta.cache_class,
        cache_error=meta.cache_error,
        weight_bytes_per_param=workload.weight_bytes_per_param,
        notes=notes,
        ran_alone=meta.text_only if meta.ran_alone is not None else None,
    )


def _unsupported_options(
    run: Workload, time: TimeOptions | None, serving: ServingOptions | None
) -> list[str]:
    """The options of ``analyze`` that need embedcalc's layer model, which the general reader does not derive."""
    asked = []
    if time is not None and any(v is not None for v in vars(time).values()):
        asked.append("--hardware and the time options")
    if serving is not None and serving.asked:
        asked.append("--concurrency / --memory-utilization")
    if run.parallel != Workload().parallel:
        asked.append("--tp / --pp / --dp / --ep / --zero")
    if run.mode != "inference":
        asked.append("--mode training")
    return asked


def general_fallback(
    refusal: ConfigError,
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    time: TimeOptions,
    budget: Budget,
    serving: ServingOptions | None = None,
) -> GeneralReport:
    """After the native readers' ``refusal`` of ``target``: the general reader's count with its budget judged, or
    the refusal again (told how to get the general reader, or which options need the layer model)."""
    if refusal.code not in GENERAL_CODES:
        raise refusal
    if not general_available():
        raise general_hint(refusal) from None
    asked = _unsupported_options(run, time, serving)
    if asked:
        message = (
            f"{target}: no native embedcalc mapping for this family, so it is counted by transformers' own "
            f"class (params, FLOPs, KV cache of one inference forward); {', '.join(asked)} need embedcalc's "
            "layer model: drop them, or describe the model in embedcalc's own YAML (`embedcalc schema`)"
        )
        raise ConfigError(message, [Problem("target", message, "general_reader_option")],
                          "general_reader_option") from None  # fmt: skip
    from embedcalc.reconcile.general import GeneralReport

    try:
        count = read_general(target, overrides, run)
    except ConfigError as exc:
        raise beyond_general(refusal, exc) from None
    count = with_refusal_note(count, refusal)
    return GeneralReport(count, general_budget(budget, count))


NOT_NATIVE = "not read natively: "
"""How a general-reader note says why the native reader handed the file over (an unbalanced T5Gemma)."""


def native_refusal_note(refusal: ConfigError, count: GeneralCount) -> str:
    """The note saying why the native reader handed the file to the general reader: each key with why the native
    reader did not read it (the problem's ``reason``: the refusal's advice, to describe the model in YAML, was for a
    file nothing counts), and the reader that counted it."""
    return (f"{handover_reason(refusal)}; counted instead by the general reader: transformers "
            f"{count.transformers_version}'s {count.class_name} ({count.auto_class}) on the meta device")  # fmt: skip


def handover_reason(refusal: ConfigError) -> str:
    """Why the native reader handed a file over, key by key, without the refusal's advice."""
    return NOT_NATIVE + "; ".join(_keyed(p.path, p.reason or p.message) for p in refusal.problems)


def _keyed(path: str, text: str) -> str:
    """``text`` led by the key it is about (a reason that does not name it first gets ``path: `` in front)."""
    return text if text.startswith(path) else f"{path}: {text}"


def with_refusal_note(count: GeneralCount, refusal: ConfigError) -> GeneralCount:
    """``count`` with the note saying why the native reader handed it over (``hf_refused_family``: an unbalanced
    T5Gemma, a key only transformers' shared modules read, a family embedcalc's layer model cannot describe);
    unchanged for a family no native reader has."""
    if refusal.code == "hf_refused_family" and refusal.problems:
        return replace(count, notes=[*count.notes, native_refusal_note(refusal, count)])
    return count


def beyond_general(refusal: ConfigError, why: ConfigError) -> ConfigError:
    """The native refusal (the families read, the YAML way), with why the general reader cannot count it either."""
    tail = why.message.split(": ", 1)[-1]
    message = f"{refusal.message}. The general reader cannot count it either: {tail}"
    problems = [Problem(p.path, f"{p.message}. The general reader cannot count it either: {tail}", p.code)
                for p in refusal.problems]  # fmt: skip
    return ConfigError(message, problems, refusal.code)


def general_budget(budget: Budget, count: GeneralCount) -> list[Problem]:
    """One problem per exceeded limit: params, memory (weights + cache) and forward FLOPs of the count."""
    from embedcalc.analysis.budget import check_budget

    problems = []
    flops = count.flops.total if count.flops is not None else 0
    for v in check_budget(budget, count.params.total, count.memory_bytes, flops):
        text = f"{count.target}: {v.flag} {v.limit:,} exceeded: {v.value:,} is {v.excess:,} over"
        problems.append(Problem(f"{count.target}: {v.flag}", text, "over_budget"))
    return problems
