"""The roofline plot of ``sweep --plot`` with ``--hardware``: arithmetic intensity against attainable FLOP/s, the
device's roof drawn, each component of each phase a point (matplotlib, the optional ``plot`` extra).

Drawn as :mod:`embedcalc.render.plot` draws (object-oriented API, no pyplot, written atomically); a point's
height is its achieved FLOP/s under the model, FLOPs / time, which lies on the roof by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from embedcalc.analysis.roofline import RooflineEstimate
from embedcalc.render.plot import plot_format, require_matplotlib, write_atomically

_MARKERS = {"prefill": "o", "decode": "x", "forward": "s", "training_step": "^"}


def roofline_plot_path(path: Path) -> Path:
    """``sweep.png`` -> ``sweep.roofline.png``, beside the seq-len plot."""
    return path.with_name(f"{path.stem}.roofline{path.suffix}")


def plot_roofline(
    points: Sequence[tuple[str, RooflineEstimate]], path: Path, title: str | None = None
) -> None:
    """One roofline for the device of ``points`` ((label, estimate) per sweep point, one colour each)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fmt = plot_format(path)
    figure = Figure(figsize=(9, 6), dpi=110, layout="constrained")
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
            ax.scatter(xs, ys, color=color, marker=_MARKERS.get(phase.name, "o"), s=18,
                       label=f"{label}: {phase.name}")  # fmt: skip
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
