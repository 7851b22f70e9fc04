"""The public Python API behind ``import embedcalc`` (DESIGN.md §13): the same loading, checks and result objects
that the CLI uses, called with Python values instead of flags.

Every function takes a config in any form :func:`load` accepts (a preset name, a file path, a mapping of config
fields, or what :func:`load` returned) and a workload (a :class:`Workload`, or its fields as keyword arguments).
Errors are the package's own: :class:`ConfigError` for an invalid config or a workload that does not fit it,
:class:`EmbedcalcError` for a bad argument, :class:`UnsupportedEnvironmentError` when torch (or CUDA) is missing.
Nothing here prints; the result types of compare and sweep are in :mod:`embedcalc._api_results`. Import it through
``embedcalc``; this module's name is not part of the API.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from embedcalc._api_results import Comparison, Sweep
from embedcalc.analysis.checked import analyze_loaded
from embedcalc.analysis.report import Analysis
from embedcalc.analysis.workload import (
    AttentionImpl,
    Dtype,
    Mode,
    Optimizer,
    Parallelism,
    Recompute,
    Workload,
)
from embedcalc.config.loading import LoadedConfig, Overrides, load_parsed, resolve_target, target_origin
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError, EmbedcalcError, ExitCode, Problem, UnsupportedEnvironmentError

if TYPE_CHECKING:  # numpy and torch load only with the functions that need them
    from embedcalc.reconcile.bench import BenchResult
    from embedcalc.reconcile.verify import VerifyResult

ConfigLike: TypeAlias = str | Path | Mapping[str, Any] | LoadedConfig | ModelConfig
AxisValues: TypeAlias = Sequence[int] | str | None

__all__ = ["ConfigLike", "analyze", "bench", "compare", "load", "sweep", "verify"]


# --- load ---------------------------------------------------------------------------------------------------------


def load(target: ConfigLike, overrides: Overrides = None) -> LoadedConfig:
    """Load and validate a config, as the CLI's TARGET and ``--set``.

    ``target`` is a preset name (``"bert-base"``), a path to a YAML/JSON config or a Hugging Face ``config.json``,
    a mapping of config fields (aliases such as ``n_head`` work; a mapping with ``model_type`` is read as a Hugging
    Face config), or an already loaded config. ``overrides`` is a mapping ``{"num_heads": 16}`` or a list of
    ``"key=value"`` strings (values read as ``--set`` reads them). Raises :class:`ConfigError` listing every
    problem found.

    >>> import embedcalc
    >>> cfg = embedcalc.load("bert-base", overrides={"num_heads": 16})
    >>> cfg.config.num_heads, cfg.config.embed_dim
    (16, 768)
    >>> small = {"architecture": "decoder", "embed_dim": 512, "n_head": 8, "num_layers": 6, "vocab_size": 32000,
    ...          "max_seq_len": 2048}
    >>> embedcalc.load(small).config.num_heads
    8
    >>> try:
    ...     embedcalc.load("bert-base", overrides=["num_heads=7"])
    ... except embedcalc.ConfigError as exc:
    ...     print(exc.problems[0].path, "|", exc.problems[0].code)
    --set num_heads | heads_indivisible
    """
    if isinstance(target, LoadedConfig | ModelConfig):
        loaded = _as_loaded(target)
        if not overrides:
            return loaded
        raw: dict[str, Any] = loaded.config.model_dump(exclude_unset=True)
        origin = loaded.target
        return load_parsed(raw, loaded.source, origin, target=origin, overrides=overrides, rename=True)
    if isinstance(target, Mapping):
        name = str(target.get("name") or "config")
        return load_parsed(dict(target), "python", name, target=name, overrides=overrides, rename=True)
    name = str(target)
    raw, source, path = resolve_target(name)
    origin = target_origin(name, source, path)
    return load_parsed(raw, source, origin, path, target=name, overrides=overrides, rename=True)


def _as_loaded(config: ConfigLike) -> LoadedConfig:
    if isinstance(config, LoadedConfig):
        return config
    if isinstance(config, ModelConfig):
        return LoadedConfig(target=config.name or "config", config=config, source="python")
    return load(config)


# --- workload -----------------------------------------------------------------------------------------------------

_POSITIVE = ("batch_size", "seq_len", "tgt_len")
_NON_NEGATIVE = ("gen_tokens",)


def _workload(workload: Workload | None, overrides: Mapping[str, Any]) -> Workload:
    """``workload`` (default: the CLI's defaults) with ``overrides`` applied; ``parallel`` may be a mapping."""
    names = {f.name for f in fields(Workload)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise _usage(f"unknown workload field {unknown[0]!r}; fields: {', '.join(sorted(names))}", unknown[0])
    values = dict(overrides)
    if isinstance(values.get("parallel"), Mapping):
        values["parallel"] = Parallelism(**values["parallel"])
    for name, value in values.items():
        allowed = get_args(_LITERALS.get(name, Any))
        if allowed and value not in allowed:
            raise _usage(f"{name} {value!r} is not one of {', '.join(map(str, allowed))}", name)
        if name in _POSITIVE + _NON_NEGATIVE and value is not None:
            low = 1 if name in _POSITIVE else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise _usage(f"{name} must be an integer >= {low}, got {value!r}", name)
    return replace(workload, **values) if workload is not None else Workload(**values)


_LITERALS: dict[str, Any] = {"dtype": Dtype, "mode": Mode, "attention": AttentionImpl, "recompute": Recompute,
             "optimizer": Optimizer}  # fmt: skip


def _usage(message: str, path: str) -> EmbedcalcError:
    return EmbedcalcError(message, ExitCode.USAGE, [Problem(path, message, "bad_argument")], "bad_argument")


# --- analyze / compare --------------------------------------------------------------------------------------------


def analyze(config: ConfigLike, workload: Workload | None = None, **workload_fields: Any) -> Analysis:
    """Params, FLOPs and memory of one config for one workload: what ``embedcalc analyze`` renders.

    Keyword arguments are :class:`Workload` fields (``batch_size``, ``seq_len``, ``tgt_len``, ``dtype``,
    ``mode``, ``attention``, ``recompute``, ``optimizer``, ``gen_tokens``, ``parallel``) and replace those of
    ``workload``. ``result.to_json()`` is the ``results[]`` entry of ``embedcalc analyze --format json``; the
    config's warnings are on ``result.warnings``.

    >>> import embedcalc
    >>> r = embedcalc.analyze("bert-base", seq_len=128)
    >>> r.params.total, r.flops.forward
    (109482240, 22348431360)
    >>> r.params.group(1)["encoder"]
    85054464
    >>> r.params["encoder/attention/qkv"]
    21261312
    >>> train = embedcalc.analyze("gpt2", batch_size=8, seq_len=1024, mode="training", dtype="bfloat16")
    >>> train.memory.total_bytes > train.memory.weights_bytes
    True
    >>> r.to_json()["flops"]["forward"]
    22348431360
    """
    return analyze_loaded(_as_loaded(config), _workload(workload, workload_fields))


def compare(
    configs: Sequence[ConfigLike], workload: Workload | None = None, **workload_fields: Any
) -> Comparison:
    """Analyse every config for the same workload; one :class:`ConfigError` names the problems of all of them.

    >>> import embedcalc
    >>> c = embedcalc.compare(["bert-base", "bert-large"], seq_len=512)
    >>> [(a.target, a.params.total) for a in c]
    [('bert-base', 109482240), ('bert-large', 335141888)]
    """
    if isinstance(configs, str | Path | Mapping):
        raise _usage("compare takes a list of configs, e.g. compare(['bert-base', 'bert-large'])", "configs")
    run = _workload(workload, workload_fields)
    results, problems, messages = [], [], []
    for config in configs:
        try:
            results.append(analyze_loaded(_as_loaded(config), run))
        except ConfigError as exc:
            where = config if isinstance(config, str | Path) else _label(config)
            problems += [Problem(f"{where}: {p.path}", p.message, p.code) for p in exc.problems]
            messages.append(exc.message)
    if problems:
        raise ConfigError("\n".join(messages), problems)
    return Comparison(tuple(results), run)


def _label(config: ConfigLike) -> str:
    if isinstance(config, LoadedConfig):
        return config.target
    if isinstance(config, ModelConfig):
        return config.name or "config"
    return str(dict(config).get("name") or "config") if isinstance(config, Mapping) else str(config)


# --- sweep --------------------------------------------------------------------------------------------------------


def sweep(
    config: ConfigLike,
    workload: Workload | None = None,
    *,
    seq_len: AxisValues | int = None,
    batch_size: AxisValues | int = None,
    embed_dim: AxisValues = None,
    num_heads: AxisValues = None,
    num_layers: AxisValues = None,
    ffn_dim: AxisValues = None,
    **workload_fields: Any,
) -> Sweep:
    """Cost over the cartesian product of the axes given, each a list of ints or a range string as the CLI takes
    (``"64:16384:x2"``, ``"384:12288:+384"``). An int ``seq_len``/``batch_size`` fixes it instead of sweeping.

    Each point is the config with the swept fields set; invalid points are kept with their problems.

    >>> import embedcalc
    >>> s = embedcalc.sweep("bert-base", seq_len=[128, 512], num_heads=[12, 16])
    >>> [(p["num_heads"], p["seq_len"], p["params"]["total"]) for p in s.points]
    [(12, 128, 109482240), (12, 512, 109482240), (16, 128, 109482240), (16, 512, 109482240)]
    >>> embedcalc.sweep("bert-base", seq_len="256:1024:x2").crossover_seq_len
    4608
    """
    from embedcalc.analysis.sweep import SweepBase, sweep_target
    from embedcalc.analysis.sweep_axes import AxisError, parse_axis

    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if isinstance(value, int) and not isinstance(value, bool):
            workload_fields[name] = value
    given = {"seq_len": seq_len, "batch_size": batch_size, "embed_dim": embed_dim, "num_heads": num_heads,
             "num_layers": num_layers, "ffn_dim": ffn_dim}  # fmt: skip
    axes: dict[str, tuple[int, ...]] = {}
    for name, value in given.items():
        if value is None or isinstance(value, int):
            continue
        try:
            axes[name] = (
                parse_axis(value) if isinstance(value, str) else parse_axis(",".join(map(str, value)))
            )
        except AxisError as exc:
            raise _usage(f"{name}: {exc}", name) from None
    loaded = _as_loaded(config)
    base = SweepBase(
        target=loaded.target,
        data=loaded.config.model_dump(exclude_unset=True),
        user_keys=dict(loaded.user_keys),
        origin=loaded.target,
    )
    return Sweep(sweep_target(base, axes, _workload(workload, workload_fields)))


# --- verify / bench (torch) ---------------------------------------------------------------------------------------


def _require_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        raise UnsupportedEnvironmentError(
            "PyTorch is not installed; verify and bench build the model in torch. Install it with "
            "`pip install 'embedcalc[torch]'`.",
            code="no_torch",
        )


def verify(
    config: ConfigLike,
    workload: Workload | None = None,
    attention: Literal["sdpa", "eager"] = "sdpa",
    **workload_fields: Any,
) -> VerifyResult:
    """Reconcile the analytic params and forward FLOPs with the torch model built on the meta device, component by
    component (``embedcalc verify``; needs the ``torch`` extra). ``result.agree`` is True when every row matches.

    >>> import embedcalc
    >>> v = embedcalc.verify("bert-base", seq_len=64)  # doctest: +SKIP
    >>> v.agree, v.params.counted_total  # doctest: +SKIP
    (True, 109482240)
    """
    _require_torch()
    from embedcalc.reconcile.verify import verify_analysis

    return verify_analysis(analyze(config, workload, **workload_fields), attention)


BENCH_DTYPES = ("float32", "bfloat16", "float16")


def bench(
    config: ConfigLike,
    workload: Workload | None = None,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    warmup: int = 3,
    repeat: int = 10,
    compile: bool = False,
    force: bool = False,
    **workload_fields: Any,
) -> BenchResult:
    """Time real forward passes (or training steps) of the torch model on ``device`` and reconcile them with the
    prediction (``embedcalc bench``; needs the ``torch`` extra). Refuses (:class:`UnsupportedEnvironmentError`) a
    run whose predicted peak exceeds free memory unless ``force``; ``result.measurement`` holds the numbers.

    >>> import embedcalc
    >>> b = embedcalc.bench("bert-base", batch_size=1, seq_len=32, repeat=3)  # doctest: +SKIP
    >>> b.measurement.tokens_per_s > 0  # doctest: +SKIP
    True
    """
    _require_torch()
    from embedcalc.modeling.benchmark import BenchSettings, run_benchmark
    from embedcalc.modeling.timing import free_memory_bytes, measure_matmul_peak, resolve_device
    from embedcalc.reconcile.bench import BenchResult, check_fits, measurement
    from embedcalc.render.units import binary_bytes

    run = _workload(workload, workload_fields)
    if run.dtype not in BENCH_DTYPES:
        raise _usage(f"bench runs in {', '.join(BENCH_DTYPES)}, not {run.dtype}", "dtype")
    if warmup < 0 or repeat < 1:
        raise _usage(f"warmup must be >= 0 and repeat >= 1, got {warmup} and {repeat}", "repeat")
    loaded = _as_loaded(config)
    # the benchmarked model has no dropout layers, so the prediction is made for dropout 0 (as the CLI does)
    analysis = analyze_loaded(replace(loaded, config=load(loaded, {"dropout": 0.0}).config), run)
    try:
        dev = resolve_device(device)
    except RuntimeError as exc:
        raise UnsupportedEnvironmentError(f"{exc}; use device='cpu' or 'auto'", "no_cuda") from None
    if not force:
        check_fits(analysis, free_memory_bytes(dev), str(dev), binary_bytes)
    settings = BenchSettings(
        batch_size=run.batch_size, seq_len=run.seq_len, tgt_len=run.tgt_len, dtype=run.dtype, mode=run.mode,
        attention=run.attention, compile=compile, warmup=warmup, repeat=repeat, recompute=run.recompute,
    )  # fmt: skip
    try:
        timed = run_benchmark(analysis.config, settings, dev)
    except (MemoryError, RuntimeError) as exc:
        raise EmbedcalcError(
            f"the benchmark failed on {dev}: {exc}", ExitCode.RUNTIME, code="bench_failed"
        ) from None
    peak = measure_matmul_peak(dev, run.dtype)
    return BenchResult(analysis, measurement(analysis, timed, peak, dev.type == "cuda", run.dtype))
