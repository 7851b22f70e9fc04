"""``analyze`` and ``compare``: params, FLOPs and memory of configs for one workload, and what the CLI's commands
of the same names add to them (the time options, budgets), as one call per command.

:func:`analyze` (with the time and serving options, under their keyword names) and :func:`compare` are the public
verbs; :func:`analyze_report` and :func:`compare_reports` are
``embedcalc analyze`` and ``embedcalc compare`` (TARGET strings, ``--set`` on each, the time and budget options),
returning :class:`~embedcalc.api.results.AnalysisReport`, whose ``to_json()`` is the command's ``results[]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import Workload
from embedcalc.api.load import ConfigLike, as_loaded, label, load_target
from embedcalc.api.results import AnalysisReport, Comparison
from embedcalc.api.timing import TimeOptions, apply_time, memory_limit, time_options
from embedcalc.api.workload import usage, workload_of
from embedcalc.errors import ConfigError, Problem
from embedcalc.sources.loading import LoadedConfig

if TYPE_CHECKING:
    from embedcalc.analysis.budget import Budget
    from embedcalc.api.finetune import FinetuneOptions
    from embedcalc.api.serving import ServingOptions
    from embedcalc.reconcile.general import GeneralReport

__all__ = [
    "analyze",
    "analyze_or_general",
    "analyze_report",
    "analyze_target",
    "budget_problems",
    "compare",
    "compare_reports",
]


def analyze(
    config: ConfigLike,
    workload: Workload | None = None,
    *,
    hardware: str | os.PathLike[str] | None = None,
    efficiency: float | str | Mapping[str, float] | None = None,
    kv_dtype: str | None = None,
    train_tokens: int | str | None = None,
    devices: int | None = None,
    price_per_hour: float | None = None,
    global_batch: int | None = None,
    concurrency: int | None = None,
    memory_utilization: float | None = None,
    max_memory: int | str | None = None,
    **workload_fields: Any,
) -> Analysis:
    """Params, FLOPs and memory of one config for one workload, and its expected time on a device: what
    ``embedcalc analyze`` computes, with the same options.

    Keyword arguments are :class:`Workload` fields (``batch_size``, ``seq_len``, ``tgt_len``, ``dtype``,
    ``mode``, ``attention``, ``recompute``, ``optimizer``, ``gen_tokens``, ``logits``, ``parallel``, ...) and
    replace those of ``workload``; the defaults are the CLI's (batch 1 × 128 tokens, inference). The rest are the
    CLI's time and serving options under their own names:

    - ``hardware``: the device (a catalogue name as ``embedcalc hardware`` lists, ``"local"``, or a device YAML
      file): ``result.time`` is then the expected time (prefill/TTFT, decode per token, tokens/s; a training step
      and, with ``train_tokens``, the whole run) with its lower bound at peak, and the largest batch and context
      that fit. ``efficiency`` (a fraction, ``{"compute": F, "memory": F}`` or ``"measured"``) replaces the
      calibrated fractions of peak; ``kv_dtype`` stores the KV cache apart from the activations.
    - ``train_tokens`` (an int or ``"100B"``), ``devices``, ``price_per_hour`` and ``global_batch``: a training
      run's wall time, device-hours and cost (``mode="training"``).
    - ``concurrency`` and ``memory_utilization`` (inference): ``result.serving``, the memory a server holds for
      that many sequences in flight and whether it fits the device (or ``max_memory``, bytes or ``"80GiB"``).

    ``result.to_json()`` is the ``results[]`` entry of ``embedcalc analyze --format json`` with the same options;
    the config's warnings are on ``result.warnings``. Bad arguments raise :class:`EmbedcalcError` naming the
    keyword; a workload the config cannot run, :class:`ConfigError`.

    >>> import embedcalc
    >>> r = embedcalc.analyze("bert-base", seq_len=128)
    >>> r.params.total, r.flops.forward
    (109482240, 22348431360)
    >>> r.params.group(1)["encoder"]
    85054464
    >>> r.params["encoder/attention/qkv"]
    21261312
    >>> train = embedcalc.analyze("gpt2", batch_size=8, seq_len=1024, mode="training", dtype="bf16")
    >>> train.memory.total_bytes > train.memory.weights_bytes
    True
    >>> r.to_json()["flops"]["forward"]
    22348431360
    >>> t = embedcalc.analyze("llama-3.1-8b", hardware="h100-sxm", seq_len=1024, gen_tokens=256)
    >>> t.time.hardware, t.time.prefill_s > 0, t.time.decode_s_per_token > 0
    ('h100-sxm', True, True)
    """
    run = workload_of(workload, workload_fields)
    time = time_options(hardware, efficiency, kv_dtype, train_tokens, devices, price_per_hour, global_batch)
    limit = memory_limit(max_memory)
    analysis = analyze_loaded(as_loaded(config), run)
    if time == TimeOptions() and limit is None and concurrency is None and memory_utilization is None:
        return analysis
    from embedcalc.api.serving import ServingOptions, apply_serving

    analysis = _timed(analysis, time, limit)
    serving = ServingOptions(concurrency, memory_utilization)
    held = apply_serving(analysis, serving, time.hardware, limit, time.kv_dtype, spell=str)
    return replace(analysis, serving=held)


def compare(
    configs: Sequence[ConfigLike], workload: Workload | None = None, **workload_fields: Any
) -> Comparison:
    """Analyse every config for the same workload; one :class:`ConfigError` names the problems of all of them.

    >>> import embedcalc
    >>> c = embedcalc.compare(["bert-base", "bert-large"], seq_len=512)
    >>> [(a.target, a.params.total) for a in c]
    [('bert-base', 109482240), ('bert-large', 335141888)]
    """
    if isinstance(configs, str | bytes | Path | Mapping) or not isinstance(configs, Sequence):
        raise usage(f"compare takes a list of configs, e.g. compare(['bert-base', 'bert-large']), got "
                    f"{type(configs).__name__}", "configs")  # fmt: skip
    run = workload_of(workload, workload_fields)
    loaders = [(label(c), partial(as_loaded, c)) for c in configs]
    return Comparison(tuple(_analyze_each(loaders, run)), run)


def _analyze_each(loaders: Sequence[tuple[str, Callable[[], LoadedConfig]]], run: Workload) -> list[Analysis]:
    """Load and analyse each; the problems of every one that fails in one :class:`ConfigError`, each problem's
    path prefixed with the config's name."""
    results, problems, messages = [], [], []
    for where, loader in loaders:
        try:
            results.append(analyze_loaded(loader(), run))
        except ConfigError as exc:
            problems += [Problem(f"{where}: {p.path}", p.message, p.code) for p in exc.problems]
            messages.append(exc.message)
    if problems:
        raise ConfigError("\n".join(messages), problems)
    return results


def budget_problems(budget: Budget, analyses: Sequence[Analysis]) -> list[Problem]:
    """One problem per exceeded limit, naming the flag, the limit, the value and the excess."""
    from embedcalc.analysis.budget import check_budget
    from embedcalc.units import binary_bytes

    problems = []
    for a in analyses:
        flops = a.flops.training_step if a.workload.mode == "training" else a.flops.forward
        for v in check_budget(budget, a.params.total, a.memory.total_bytes, flops):
            fmt = binary_bytes if v.flag == "--max-memory" else (lambda x: f"{x:,}")
            text = (
                f"{a.target}: {v.flag} {fmt(v.limit)} exceeded: {fmt(v.value)} is {fmt(v.excess)} "
                f"({v.excess_fraction:.1%}) over"
            )
            problems.append(Problem(f"{a.target}: {v.flag}", text, "over_budget"))
    return problems


def _timed(analysis: Analysis, time: TimeOptions, max_memory: int | None) -> Analysis:
    """The analysis with its KV cache in ``time.kv_dtype`` and its time estimate (:func:`apply_time`)."""
    analysis, estimate = apply_time(analysis, time, max_memory)
    return replace(analysis, time=estimate)


def _report(analysis: Analysis, time: TimeOptions, budget: Budget) -> AnalysisReport:
    analysis = _timed(analysis, time, budget.max_memory_bytes)
    return AnalysisReport(analysis, budget_problems(budget, [analysis]))


def analyze_target(
    target: str, overrides: Sequence[str] | None, run: Workload, model_dtype: bool = True
) -> Analysis:
    """TARGET as the CLI names it, loaded with ``--set``, checked against the workload and analysed (its warnings
    on the result); in the model's own dtype unless one was chosen or ``model_dtype`` is False (bench)."""
    return analyze_loaded(load_target(target, overrides, records=True), run, model_dtype)


def analyze_report(
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    time: TimeOptions,
    budget: Budget,
    serving: ServingOptions | None = None,
    finetune: FinetuneOptions | None = None,
) -> AnalysisReport:
    """``embedcalc analyze``: :func:`analyze_target`, its time estimated as ``time`` asks, its budget judged, the
    serving memory ``serving`` asks for (:mod:`embedcalc.api.serving`) and the fine-tune ``finetune`` describes
    (:mod:`embedcalc.api.finetune`)."""
    report = _report(analyze_target(target, overrides, run), time, budget)
    if finetune is not None:
        from embedcalc.api.finetune import apply_finetune

        report = replace(report, finetune=apply_finetune(report.analysis, finetune))
    if serving is None or not serving.asked:
        return report
    from embedcalc.api.serving import apply_serving

    held = apply_serving(report.analysis, serving, time.hardware, budget.max_memory_bytes, time.kv_dtype)
    return replace(report, analysis=replace(report.analysis, serving=held))


def analyze_or_general(
    target: str,
    overrides: Sequence[str] | None,
    run: Workload,
    time: TimeOptions,
    budget: Budget,
    serving: ServingOptions | None = None,
    finetune: FinetuneOptions | None = None,
) -> AnalysisReport | GeneralReport:
    """``embedcalc analyze``: :func:`analyze_report`, or, for a Hugging Face family no native reader maps, the
    general reader's count through transformers' own class on the meta device (:mod:`embedcalc.api.general`,
    loaded only then: a preset's path stays as light as it was)."""
    try:
        return analyze_report(target, overrides, run, time, budget, serving, finetune)
    except ConfigError as exc:
        from embedcalc.api.general import GENERAL_CODES, general_fallback

        if exc.code not in GENERAL_CODES:
            raise
        if finetune is not None:
            raise usage(f"{target}: fine-tuning (--peft, --freeze, --offload) needs a family embedcalc maps "
                        "natively; this one is counted by transformers' class only", "--peft") from exc  # fmt: skip
        return general_fallback(exc, target, overrides, run, time, budget, serving)


def compare_reports(
    targets: Sequence[str], overrides: Sequence[str] | None, run: Workload, time: TimeOptions, budget: Budget
) -> list[AnalysisReport]:
    """``embedcalc compare``: :func:`analyze_report` of every target (``--set`` applies to each); the problems of
    every target that fails in one :class:`ConfigError`."""
    loaders = [(t, partial(load_target, t, overrides, records=True)) for t in targets]
    return [_report(a, time, budget) for a in _analyze_each(loaders, run)]
