"""The roofline plot of ``sweep --plot`` with ``--hardware``: arithmetic intensity against attainable FLOP/s, the
device's roof drawn, each component of each phase a point (matplotlib, the optional ``plot`` extra).

Drawn as :mod:`embedcalc.render.plot` draws (object-oriented API, no pyplot, written atomically); a point's
height is its achieved FLOP/s under the model, FLOPs / time: on or under the roof at the achieved fractions of
peak (the line drawn), under it where the component's kernel overhead or its other roof also costs time. Each spot
is labelled with its components (``prefill: ffn/in, ffn/out``); the sweep points are hollow markers of growing size,
so that those that coincide (a decode step's projections move the same weights whatever the context) stay
visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.render.plot import plot_format, require_matplotlib, write_atomically

_MARKERS = {"prefill": "o", "decode": "D", "forward": "s", "training_step": "^"}  # fillable: drawn hollow


def roofline_plot_path(path: Path) -> Path:
    """``sweep.png`` -> ``sweep.roofline.png``, beside the seq-len plot."""
    return path.with_name(f"{path.stem}.roofline{path.suffix}")


def _component(key: str) -> str:
    """A component's label on the plot: its key without the stack (``decoder/ffn/in`` -> ``ffn/in``)."""
    parts = key.split("/")
    return "/".join(parts[1:]) if len(parts) > 1 else key


def _groups(estimate: RooflineEstimate) -> dict[tuple[str, float, float], list[str]]:
    """(phase, log10 intensity, log10 FLOP/s) -> the components of ``estimate`` at that spot: components that land
    on the same spot (to about 2% on each log axis) share one label, as decode's projections near 1 FLOP/B do."""
    spots: dict[tuple[str, float, float], list[str]] = {}
    for phase in estimate.phases.values():
        for c in phase.components:
            if c.intensity and c.traffic.flops and c.time_s > 0:
                key = (
                    phase.name,
                    round(math.log10(c.intensity), 2),
                    round(math.log10(c.traffic.flops / c.time_s), 2),
                )
                spots.setdefault(key, []).append(_component(c.key))
    return spots


def plot_roofline(
    points: Sequence[tuple[str, RooflineEstimate]], path: Path, title: str | None = None
) -> None:
    """One roofline for the device of ``points`` ((label, estimate) per sweep point, one colour each): every
    component a hollow marker (one shape per phase, larger for each later point, so points that coincide stay
    visible as rings); the last point's spots labelled with their components."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fmt = plot_format(path)
    figure = Figure(figsize=(10, 6.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    intensities: list[float] = []
    roof = points[0][1] if points else None
    for i, (label, estimate) in enumerate(points):
        color = f"C{i % 10}"
        for phase in estimate.phases.values():
            xs, ys = [], []
            for c in phase.components:
                if c.intensity and c.traffic.flops and c.time_s > 0:
                    xs.append(c.intensity)
                    ys.append(c.traffic.flops / c.time_s)
            intensities += xs
            ax.scatter(xs, ys, facecolors="none", edgecolors=color, marker=_MARKERS.get(phase.name, "o"),
                       s=22 + 26 * i, linewidths=1.1, label=f"{label}: {phase.name}")  # fmt: skip
    if points:  # the components of the last point (the largest markers), each spot once
        for n, ((_, x, y), names) in enumerate(
            sorted(_groups(points[-1][1]).items(), key=lambda i: i[0][1:])
        ):
            shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
            ax.annotate(shown, xy=(10**x, 10**y), xytext=(10, -14 - 11 * (n % 3)), textcoords="offset points",
                        fontsize="x-small", color="0.2", arrowprops={"arrowstyle": "-", "color": "0.6",
                                                                     "linewidth": 0.6})  # fmt: skip
    if roof is not None and roof.peak_flops_per_s and roof.bandwidth_bytes_per_s:
        peak = roof.peak_flops_per_s * roof.efficiency.compute
        bandwidth = roof.bandwidth_bytes_per_s * roof.efficiency.memory
        lo = min([*intensities, peak / bandwidth / 100]) / 2
        hi = max([*intensities, peak / bandwidth * 100]) * 2
        ridge = peak / bandwidth
        ax.plot([lo, ridge, hi], [lo * bandwidth, peak, peak], color="black", linewidth=1.2,
                label=f"{roof.hardware} roof ({roof.dtype}), ridge {ridge:,.0f} FLOP/B")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small", loc="lower right")
    if title:
        figure.suptitle(title)
    write_atomically(path, lambda handle: figure.savefig(handle, format=fmt))
