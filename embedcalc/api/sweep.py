"""``sweep``: cost over the cartesian product of shape and workload axes (the numpy grid of
:mod:`embedcalc.analysis.sweep`), the roofline time of each valid point, and seq-len curves of several targets.

:func:`sweep` is the public verb; :func:`sweep_report` is ``embedcalc sweep`` (TARGET and ``--set``, the axes, the
time options, and ``--measure``'s timed attention split), :func:`compare_curves` the curves ``compare --plot``
draws. The base of a sweep is read without validating (:func:`sweep_base`): a swept axis may repair or break it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

from embedcalc.analysis.workload import Workload
from embedcalc.api.load import ConfigLike, as_loaded
from embedcalc.api.results import Sweep
from embedcalc.api.timing import TimeOptions, apply_time
from embedcalc.api.workload import usage, workload_of
from embedcalc.config.limits import plain_numbers
from embedcalc.errors import ConfigError

if TYPE_CHECKING:  # numpy and the grid load only when a sweep runs
    from embedcalc.analysis.roofline import RooflineEstimate
    from embedcalc.analysis.sweep import SeqLenCurve, SweepBase, SweepResult
    from embedcalc.api.bench import MeasureRequest
    from embedcalc.reconcile.attention_split import AttentionSplit

AxisValues: TypeAlias = Sequence[int] | str | None
MAX_TIMED_POINTS = 2_000  # --hardware times each valid point by the per-config path (pydantic + analyze)

__all__ = [
    "MAX_TIMED_POINTS",
    "AxisValues",
    "SweepReport",
    "compare_curves",
    "sweep",
    "sweep_base",
    "sweep_report",
]


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
    from embedcalc.analysis.sweep import AxisError, SweepBase, axis_values, sweep_target

    # the integer contract (issue 33): numpy integers (alone or in a list) are Python ints before anything else
    seq_len, batch_size, embed_dim, num_heads, num_layers, ffn_dim = (
        plain_numbers(v) for v in (seq_len, batch_size, embed_dim, num_heads, num_layers, ffn_dim)
    )
    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if isinstance(value, int) and not isinstance(value, bool):
            workload_fields[name] = value
    given = {"seq_len": seq_len, "batch_size": batch_size, "embed_dim": embed_dim, "num_heads": num_heads,
             "num_layers": num_layers, "ffn_dim": ffn_dim}  # fmt: skip
    axes: dict[str, tuple[int, ...]] = {}
    for name, value in given.items():
        if value is None or (isinstance(value, int) and name in ("seq_len", "batch_size")):
            continue  # (an int seq_len/batch_size fixes the workload; an int embed_dim is a one-value axis)
        try:
            axes[name] = axis_values([value] if isinstance(value, int) else value)
        except AxisError as exc:
            raise usage(f"{name}: {exc}", name) from None
    loaded = as_loaded(config)
    base = SweepBase(
        target=loaded.target,
        data=loaded.config.model_dump(exclude_unset=True),
        user_keys=dict(loaded.user_keys),
        origin=loaded.target,
        dtype_source="preset" if loaded.source == "preset" else "config",
    )
    return Sweep(sweep_target(base, axes, workload_of(workload, workload_fields)))


def sweep_base(target: str, overrides: Sequence[str] = ()) -> SweepBase:
    """Resolve TARGET (preset, file, hub id) and apply ``--set`` without validating; problems no axis can repair
    are raised here."""
    from embedcalc.analysis.sweep import SweepBase
    from embedcalc.sources.loading import apply_overrides, canonical_mapping, resolve_target

    raw, source, path = resolve_target(target)
    origin = target if source == "preset" else str(path)
    try:
        data, user_keys, problems, _ = canonical_mapping(raw, origin, path)
    except ConfigError as exc:  # a family without a native mapping: its derived layer model (DESIGN §19)
        from embedcalc.api.derived import derived_load
        from embedcalc.api.general import GENERAL_CODES

        if exc.code not in GENERAL_CODES:
            raise

        loaded = derived_load(exc, target, origin, raw, list(overrides))  # --set: the config.json's own keys
        data = loaded.config.model_dump(mode="json", exclude_unset=True)
        return SweepBase(target=target, data=data, user_keys={}, origin=origin, dtype_source="config")
    problems += apply_overrides(data, user_keys, list(overrides))
    if problems:
        lines = "\n".join(f"  {p.path}: {p.message}" for p in problems)
        raise ConfigError(f"{origin}: {len(problems)} problem{'s' * (len(problems) > 1)}\n{lines}", problems)
    if source == "preset" and "name" not in data:
        data["name"] = target
    return SweepBase(target=target, data=data, user_keys=user_keys, origin=origin,
                     dtype_source="preset" if source == "preset" else "config")  # fmt: skip


@dataclass(frozen=True)
class SweepReport:
    """``embedcalc sweep``: the grid, the roofline estimate of each point with ``--hardware`` (None for invalid
    points; no list without), and the measured attention split with ``--measure``."""

    result: SweepResult
    times: list[RooflineEstimate | None] | None = None
    measured: AttentionSplit | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``results[]`` entry of ``embedcalc sweep --format json``: a ``time`` object on each point (null
        for invalid ones) with ``--hardware``, the ``measured`` split with ``--measure``."""
        from embedcalc.analysis.sweep import result_json

        entry = result_json(self.result)
        if self.times is not None:
            for point, estimate in zip(entry["points"], self.times, strict=True):
                point["time"] = None if estimate is None else estimate.to_json()
        return entry | ({"measured": self.measured.to_json()} if self.measured else {})


def sweep_report(
    target: str, overrides: Sequence[str] | None, axes: Mapping[str, Sequence[int]], run: Workload,
    time: TimeOptions, measure: MeasureRequest | None = None,
) -> SweepReport:  # fmt: skip
    """``embedcalc sweep``: the grid of TARGET with ``--set``, timed with ``--hardware``, measured with
    ``--measure`` (:func:`embedcalc.api.bench.measure_split`)."""
    from embedcalc.analysis.sweep import sweep_target

    result = sweep_target(sweep_base(target, overrides or []), axes, run)
    measured = None
    if measure is not None:
        from embedcalc.api.bench import measure_split

        measured = measure_split(target, overrides, axes, run, measure)
    times = sweep_times(result, overrides, time) if time.hardware is not None else None
    return SweepReport(result, times, measured)


def sweep_times(
    result: SweepResult, overrides: Sequence[str] | None, options: TimeOptions
) -> list[RooflineEstimate | None]:
    """Per point, its estimate (None for invalid points); a usage error past MAX_TIMED_POINTS valid points."""
    from embedcalc.analysis.report import analyze
    from embedcalc.analysis.sweep import SweepError

    valid = int(result.valid.sum())
    if valid > MAX_TIMED_POINTS:
        raise SweepError(f"--hardware times each point: {valid:,} valid points is more than {MAX_TIMED_POINTS:,}; "
                         "narrow the axes", "too_many_timed_points")  # fmt: skip
    base = sweep_base(result.target, overrides or [])
    columns = {a: result.axis_column(a).tolist() for a in result.axes}
    out: list[RooflineEstimate | None] = []
    w = result.workload
    for i in range(result.size):
        if not result.valid[i]:
            out.append(None)
            continue
        point = {a: int(values[i]) for a, values in columns.items()}
        config = base.config_at(point, tuple(point))
        at = replace(
            w, batch_size=point.get("batch_size", w.batch_size), seq_len=point.get("seq_len", w.seq_len)
        )
        _, estimate = apply_time(analyze(result.target, config, at), options)
        out.append(estimate)
    return out


def compare_curves(
    targets: Sequence[str], overrides: Sequence[str] | None, run: Workload, seq_lens: Sequence[int]
) -> list[SeqLenCurve]:
    """One seq_len sweep per target, for ``compare --plot`` (points past a learned position table are invalid and
    left out of the curves)."""
    from embedcalc.analysis.sweep import seq_len_curves, sweep_target

    curves = []
    for target in targets:
        curves += seq_len_curves(
            sweep_target(sweep_base(target, overrides or []), {"seq_len": seq_lens}, run)
        )
    return curves
