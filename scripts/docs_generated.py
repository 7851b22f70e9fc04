"""What the documentation site shows of the tool's own output, made at each build (scripts/docs_site.py, the
MkDocs hooks, call it): a sample run of every command under its page, the figures (``<!-- figure: NAME -->`` in a
page: the sweep and roofline plots ``sweep --plot`` writes, a memory breakdown drawn from ``analyze``'s JSON, the
plan, time and every-dtype tables as ``embedcalc`` prints them at 100 columns, saved as SVG by rich), and the
table of the published runs' ids.

Every piece comes from running ``python -m embedcalc`` (or the benchmark's own data), never from a copy in the
docs, so the site cannot show an output the code no longer gives.

    python scripts/docs_generated.py sample plan       # one command's sample, as the page shows it
    python scripts/docs_generated.py figure roofline  # one figure, written to roofline.svg here
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100  # the terminal the samples and the table figures are drawn for
MAX_LINES = 70  # a longer sample is cut here, with a line saying how many more there are

# One command line per command page: what a newcomer would run first.
SAMPLES: dict[str, list[str]] = {
    "check": ["check", "llama-3.1-8b"],
    "analyze": [
        "analyze",
        "llama-3.1-8b",
        "--hardware",
        "h100-sxm",
        "--seq-len",
        "1024",
        "--gen-tokens",
        "256",
    ],
    "compare": ["compare", "gpt2", "gpt2-medium", "llama-3.1-8b"],
    "presets": ["presets"],
    "heads": ["heads", "4096"],
    "schema": ["schema"],
    "verify": ["verify", "bert-base"],
    "bench": ["bench", "gpt2", "--set", "num_layers=2", "--seq-len", "64"],
    "sweep": ["sweep", "llama-3.1-8b", "--seq-len", "512,2048,8192", "--hardware", "h100-sxm"],
    "hardware": ["hardware"],
    "explain": ["explain", "llama-3.1-8b", "fine-tune"],
    "diff": ["diff", "gpt2", "gpt2-medium"],
    "plan": ["plan", "llama-3.1-70b", "--concurrency", "32"],
}


def _env(extra: dict[str, str] | None = None, width: int | None = WIDTH) -> dict[str, str]:
    """The environment of a run: this checkout first on the path, ``width`` columns (None: the caller's)."""
    env = dict(os.environ) | (extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if width is not None:
        env["COLUMNS"] = str(width)
    env.pop("NO_COLOR", None)
    return env


def run(args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    """``embedcalc ARGS``'s stdout at :data:`WIDTH` columns; a failure is the build's error."""
    done = subprocess.run([sys.executable, "-m", "embedcalc", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, check=False, env=_env(env))  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"embedcalc {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def _console_block(args: list[str], output: str) -> str:
    lines = output.rstrip().splitlines()
    more = len(lines) - MAX_LINES
    if more > 0:
        lines = [*lines[:MAX_LINES], f"... ({more:,} more lines)"]
    return "```console\n$ embedcalc " + " ".join(args) + "\n" + "\n".join(lines) + "\n```\n"


def sample(command: str) -> str:
    """The sample section of one command's page: the command line and what it printed, at 100 columns."""
    args = SAMPLES[command]
    return (f"## Example\n\nRun when this site was built (a {WIDTH}-column terminal; `--format json` gives the "
            f"same numbers as JSON):\n\n{_console_block(args, run(args))}")  # fmt: skip


def all_samples() -> dict[str, str]:
    """Every command's sample, run two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(SAMPLES, pool.map(sample, SAMPLES), strict=True))


# --- figures ------------------------------------------------------------------------------------------------------


def _svg_of_text(text: str, title: str) -> bytes:
    """Terminal output as an SVG picture (rich's export: the text stays text, selectable and searchable)."""
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=WIDTH, file=open(os.devnull, "w"), color_system="truecolor")  # noqa: SIM115
    console.print(Text(text.rstrip()))
    return console.export_svg(title=title).encode()


def _sweep_plots() -> dict[str, bytes]:
    """``sweep --plot`` of llama-3.1-8b on an H100 over seq_len 512 to 32K: the seq-len plot and its roofline."""
    with tempfile.TemporaryDirectory() as tmp:
        rc = (
            Path(tmp) / "matplotlibrc"
        )  # text as text in the SVG (searchable, smaller), the same ids each build
        rc.write_text("svg.fonttype: none\nsvg.hashsalt: embedcalc\n")
        run(["sweep", "llama-3.1-8b", "--seq-len", "512,2048,8192,32768", "--hardware", "h100-sxm", "--plot",
             str(Path(tmp) / "sweep.svg")], cwd=Path(tmp), env={"MATPLOTLIBRC": str(rc)})  # fmt: skip
        return {name: (Path(tmp) / f"{name}.svg").read_bytes() for name in ("sweep", "sweep.roofline")}


MEMORY_CONTEXTS = (1024, 8192, 32768, 131072)
MEMORY_KINDS = ("weights_bytes", "kv_cache_bytes", "activations_bytes", "gradients_bytes", "optimizer_bytes")


def memory_breakdown() -> bytes:
    """A stacked bar per workload of llama-3.1-8b (inference at four context lengths, one training step): weights,
    KV cache, activations, gradients and optimizer state, each bar from ``analyze --format json``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    bars: list[tuple[str, dict[str, int]]] = []
    for n in MEMORY_CONTEXTS:
        data = json.loads(run(["analyze", "llama-3.1-8b", "--seq-len", str(n), "--format", "json"]))
        bars.append((f"inference\n{n:,} tokens", data["results"][0]["memory"]))
    data = json.loads(run(["analyze", "llama-3.1-8b", "--mode", "training", "--seq-len", "4096", "--recompute",
                           "selective", "--format", "json"]))  # fmt: skip
    bars.append(("training step\n4,096 tokens", data["results"][0]["memory"]))
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "embedcalc"}):
        figure = Figure(figsize=(9, 5), layout="constrained")
        ax = figure.subplots()
        bottoms = [0.0] * len(bars)
        for i, kind in enumerate(MEMORY_KINDS):
            heights = [memory.get(kind, 0) / 2**30 for _, memory in bars]
            if any(heights):
                ax.bar([label for label, _ in bars], heights, bottom=bottoms, color=f"C{i}",
                       label=kind.removesuffix("_bytes").replace("_", " "))  # fmt: skip
                bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        for x, total in enumerate(bottoms):
            ax.annotate(f"{total:,.1f} GiB", (x, total), ha="center", va="bottom", fontsize="small")
        ax.set_ylabel("GiB per device")
        ax.set_title("llama-3.1-8b, bf16, batch 1: memory by kind (embedcalc analyze)")
        ax.legend(fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
        out = io.BytesIO()
        figure.savefig(out, format="svg", metadata={"Date": None})
        return out.getvalue()


def plan_table() -> bytes:
    args = ["plan", "llama-3.1-70b", "--concurrency", "32", "--hardware", "h100-sxm,h200,a100-80gb,l40s,l4"]
    return _svg_of_text(run(args), "embedcalc " + " ".join(args))


def time_table() -> bytes:
    args = ["analyze", "llama-3.1-8b", "--hardware", "h100-sxm", "--seq-len", "1024", "--gen-tokens", "256"]
    out = run(args)
    start = out.index("Time —")
    end = out.index("Roofline,", start)
    return _svg_of_text(out[start:end], "embedcalc " + " ".join(args) + "  (the time table)")


def dtype_table() -> bytes:
    args = ["analyze", "llama-3.1-8b", "--dtype", "all"]
    return _svg_of_text(run(args), "embedcalc " + " ".join(args))


# name -> (what makes it, its alt text)
FIGURES: dict[str, tuple[Callable[[], bytes] | None, str]] = {
    "sweep": (
        None,
        "embedcalc sweep --plot: forward FLOPs (attention scores vs the rest) and memory against "
        "seq_len, the crossover marked",
    ),
    "sweep.roofline": (
        None,
        "the roofline file sweep --plot writes with --hardware: every component of every "
        "phase on the H100's roof, labelled",
    ),
    "memory": (
        memory_breakdown,
        "memory breakdown by kind: weights, KV cache, activations, gradients, optimizer",
    ),
    "plan": (plan_table, "embedcalc plan's table as it prints it"),
    "time": (time_table, "embedcalc analyze --hardware: the expected time table"),
    "dtypes": (
        dtype_table,
        "embedcalc analyze --dtype all: weights, largest layer, inference and training memory in every dtype",
    ),
}


def all_figures() -> dict[str, bytes]:
    """Every figure as SVG bytes."""
    out = _sweep_plots()
    for name, (make, _) in FIGURES.items():
        if make is not None:
            out[name] = make()
    return out


def figure_markdown(name: str, prefix: str) -> str:
    """The Markdown of ``<!-- figure: NAME -->`` on a page ``prefix`` away from the site root."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    alt = FIGURES[name][1]
    return f"![{alt}]({prefix}figures/{name}.svg)\n\n*Generated at build: {alt}.*\n"


# --- published runs: the benchmarks' own output ------------------------------------------------------------------

PUBLISHED_SCRIPT = ROOT / "benchmarks" / "bench_published.py"
SERVING_SCRIPT = ROOT / "benchmarks" / "bench_serving.py"


def _bench(script: Path) -> str:
    """A benchmark script's output as a console block."""
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env=_env(width=None))  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"benchmarks/{script.name} exited {done.returncode}:\n{done.stderr}")
    return f"```console\n$ python benchmarks/{script.name}\n{done.stdout.rstrip()}\n```\n"


def published_serving() -> str:
    """The output of ``benchmarks/bench_serving.py`` (published serving runs vs plan's scheduler), if it exists."""
    if not SERVING_SCRIPT.exists():
        return '!!! note "Not generated yet"\n    `benchmarks/bench_serving.py` is not in this checkout.\n'
    return _bench(SERVING_SCRIPT)


def published_runs() -> str:
    """The output of ``benchmarks/bench_published.py`` (published vs predicted for every run), if it exists."""
    if not PUBLISHED_SCRIPT.exists():
        return (
            '!!! note "Not generated yet"\n'
            "    `benchmarks/bench_published.py` is not in this checkout; when it is, this page shows its output "
            "(every published run beside embedcalc's prediction and the median error), regenerated at each "
            "build.\n"
        )
    return _bench(PUBLISHED_SCRIPT)


# --- the published runs' ids --------------------------------------------------------------------------------------


def published_run_ids() -> str:
    """One line per published run: its id, whether the calibration was fitted on it, what was measured where (the
    source), and the embedcalc command that predicts it, read from benchmarks/bench_published.py's own list."""
    spec = importlib.util.spec_from_file_location(
        "bench_published", ROOT / "benchmarks" / "bench_published.py"
    )
    if spec is None or spec.loader is None or not (ROOT / "benchmarks" / "bench_published.py").exists():
        return ""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_published", module)
    spec.loader.exec_module(module)
    rows = ["| run | role | measured (source) | embedcalc command |", "| --- | --- | --- | --- |"]
    for r in module.RUNS:
        args = " ".join(Path(a).name if a.endswith(".yaml") else a for a in r.args)
        rows.append(f"| `{r.id}` | {r.role} | {_cell(r.source)} | `embedcalc {_cell(args)}` |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "sample" and argv[1] in SAMPLES:
        print(sample(argv[1]), end="")
        return 0
    if len(argv) == 2 and argv[0] == "figure" and argv[1] in FIGURES:
        data = all_figures()[argv[1]]
        Path(f"{argv[1]}.svg").write_bytes(data)
        print(f"wrote {argv[1]}.svg ({len(data):,} bytes)")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
