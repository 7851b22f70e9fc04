"""The MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks: [scripts/docs_site.py]``): the pages that
are generated, never hand-written, so they cannot drift from the code.

- **Commands**: one page per top-level command of ``docs/cli.md`` (the reference ``scripts/cli_reference.py``
  generates from typer and CI checks with ``--check``). A hand-written ``docs/commands/NAME.md`` gets the command's
  generated reference appended; a command without one gets a page of its reference alone; a hand-written page for a
  command that no longer exists fails the strict build. The nav's "Commands" section lists them in ``cli.md``'s
  order.
- **Hardware catalogue**: ``<!-- generated: hardware-catalogue -->`` becomes a summary table and every figure of
  every shipped device, read through embedcalc's own catalogue loader (so a field the schema gains shows here as
  soon as ``Device.figures()`` lists it).
- **Python API**: ``<!-- generated: api-reference -->`` becomes one mkdocstrings block per name of
  ``embedcalc.__all__`` (``::: embedcalc.NAME``: the public name, wherever its module lives).
- **Published runs**: ``<!-- generated: published-runs -->`` becomes the output of
  ``benchmarks/bench_published.py`` when that script exists, else a note saying so;
  ``<!-- generated: published-serving -->`` the output of ``benchmarks/bench_serving.py`` (serving under load).

- **The tool's own output** (:mod:`docs_generated`): each command page gets a sample run ("Example") above its
  reference; ``<!-- figure: NAME -->`` becomes a figure made at build (``figures/NAME.svg``: the sweep and roofline
  plots, a memory breakdown, the plan and time tables); ``<!-- generated: published-run-ids -->`` the table of
  the published runs' ids.

``python scripts/docs_site.py PAGE`` prints one generated piece (``hardware-catalogue``, ``api-reference``,
``published-runs``, or a command name) for a look without building the site.
"""

from __future__ import annotations

import ast
import logging
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI_REFERENCE = ROOT / "docs" / "cli.md"
COMMANDS_DIR = "commands"
MARKER = re.compile(r"^<!-- generated: (?P<name>[\w-]+) -->$", re.M)
FIGURE = re.compile(r"^<!-- figure: (?P<name>[\w.-]+) -->$", re.M)

log = logging.getLogger("mkdocs.plugins.embedcalc")

if (
    str(Path(__file__).resolve().parent) not in sys.path
):  # docs_generated.py, a sibling script (not a package)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_generated  # noqa: E402
from docs_generated import (  # noqa: E402
    published_run_ids,
    published_runs,
    published_serving,
)

# --- commands: docs/cli.md split per top-level command ------------------------------------------------------------


def command_sections(text: str | None = None) -> dict[str, str]:
    """Top-level command -> its section of ``docs/cli.md`` (subcommands included), heading line dropped; the key
    ``""`` holds the section of ``embedcalc`` itself (the global options and the command list)."""
    text = CLI_REFERENCE.read_text(encoding="utf-8") if text is None else text
    sections: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        heading = re.fullmatch(r"(#{1,2}) `embedcalc ?(?P<cmd>[\w-]*)`", line)
        if heading:
            if name is not None:
                sections[name] = "\n".join(lines).strip() + "\n"
            name, lines = heading["cmd"], []
        elif name is not None:
            lines.append(line)
    if name is not None:
        sections[name] = "\n".join(lines).strip() + "\n"
    return sections


def command_page(name: str, hand_written: str | None, reference: str, sample: str = "") -> str:
    """The page of one command: the hand-written text (or a title), its sample run, and the generated reference."""
    head = hand_written.rstrip() + "\n" if hand_written else f"# `embedcalc {name}`\n"
    head += f"\n{sample}" if sample else ""
    return f"{head}\n## Reference\n\n<!-- generated from docs/cli.md (scripts/cli_reference.py) -->\n\n{reference}"


# --- the hardware catalogue ---------------------------------------------------------------------------------------


def _figure_value(label: str, value: float) -> str:
    """A figure in the unit its label names (``peak_flops_per_s.*``, ``*_bytes_per_s``, ``*_bytes``), else as is."""
    if label.startswith("peak_flops_per_s."):
        unit = "TOP/s" if label.endswith("int8") or label.endswith("int4") else "TFLOP/s"
        return f"{value / 1e12:,.1f} {unit}"
    if label.endswith("_bytes_per_s"):
        return f"{value / 1e9:,.1f} GB/s"
    if label.endswith("_bytes"):
        return f"{value / 2**30:,.2f} GiB ({int(value):,} B)"
    if label.startswith("price"):
        return f"${value:,.2f} / h"
    if label.endswith("_s"):  # a time: latencies are microseconds
        for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if value >= scale:
                return f"{value / scale:,.3g} {unit}"
        return f"{value * 1e9:,.3g} ns"
    return f"{value:,g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_URL = re.compile(r"https?://([^/\s,;)]+)[^\s,;)]*")


def _source(text: str) -> str:
    """A citation for a table cell: each URL as a link named by its host (a whole URL is one unbreakable word that
    widened the figure tables past a laptop's screen)."""
    return _URL.sub(lambda m: f"[{m[1]}]({m[0]})", _cell(text))


def _note(figure: Any) -> str:
    """A figure's note, with the day it was read for a dated figure (a price)."""
    parts = [f"read {figure.date}" if getattr(figure, "date", None) else "", figure.note or ""]
    return _cell("; ".join(p for p in parts if p))


def _links(device: Any) -> str:
    """The device's links by kind, with the plain (unsourced) fields a link has beside its figures."""
    from embedcalc.devices.figures import Figure

    shown = []
    for label in ("interconnect", "network", "host_link"):
        link = getattr(device, label, None)
        if link is None:
            continue
        extra = [f"{k.replace('_', ' ')} {v}" for k, v in link if k != "kind" and v is not None
                 and not isinstance(v, Figure)]  # fmt: skip
        shown.append(f"{label.replace('_', ' ')}: {link.kind}" + (f" ({', '.join(extra)})" if extra else ""))
    return "Links: " + "; ".join(shown) + ". " if shown else ""


def hardware_catalogue() -> str:
    """Markdown: the catalogue at a glance, then every figure of every shipped device with its note and source."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from embedcalc.devices.catalogue import PEAK_DTYPES, catalogue

    devices = catalogue()
    dtypes = [t for t in PEAK_DTYPES if any(t in d.peak_flops_per_s for d in devices)]
    prices = any(getattr(d, "price_per_hour", None) is not None for d in devices)
    out = [
        f"{len(devices)} devices in two tables, each narrow enough for a laptop's screen: memory, bandwidth, the "
        "device's link"
        + (" and price" if prices else "")
        + ", then the dense peaks (no 2:4 sparsity) per dtype. "
        "Memory in GiB, memory bandwidth and links per direction in GB/s (10⁹ B/s)"
        + (
            "; the price is a dated default in USD per device-hour (`--price-per-hour` overrides it)"
            if prices
            else ""
        )
        + "; peaks in TFLOP/s (integer formats: TOP/s); — : the device has no such figure.",
        "",
        "| name | device | memory | bandwidth | link |" + (" price |" if prices else ""),
        "| --- | --- | ---: | ---: | --- |" + (" ---: |" if prices else ""),
    ]
    for d in devices:
        link = d.interconnect or d.host_link
        shown_link = "—" if link is None else f"{link.kind} {link.per_direction_bytes_per_s.value / 1e9:,.1f}"
        price = getattr(d, "price_per_hour", None)
        out.append(
            f"| [`{d.name}`](#{d.name}) | {_cell(d.title)} | {d.memory / 2**30:,.2f} | {d.bandwidth / 1e9:,.0f} | "
            f"{shown_link} |" + ((" — |" if price is None else f" {price.value:,.2f} |") if prices else "")
        )
    out += [
        "",
        "| name | " + " | ".join(dtypes) + " |",
        "| --- | " + " | ".join("---:" for _ in dtypes) + " |",
    ]
    for d in devices:
        peaks = [d.peak_flops_per_s.get(t) for t in dtypes]  # type: ignore[call-overload]
        out.append(f"| [`{d.name}`](#{d.name}) | "
                   + " | ".join("—" if p is None else f"{p.value / 1e12:,.1f}" for p in peaks) + " |")  # fmt: skip
    for d in devices:
        out += ["", f"## {d.name}", "", f"{_cell(d.title)} ({d.vendor}, {d.kind}). {_links(d)}"
                f"`--hardware {d.name}`; `embedcalc hardware show {d.name}` prints the same figures.", "",
                "| figure | value | note | source |", "| --- | ---: | --- | --- |"]  # fmt: skip
        for label, figure in d.figures():
            out.append(f"| `{label}` | {_figure_value(label, figure.value)} | {_note(figure)} | "
                       f"{_source(d.citation(figure))} |")  # fmt: skip
    return "\n".join(out) + "\n"


# --- the Python API -----------------------------------------------------------------------------------------------


def public_names() -> list[str]:
    """``embedcalc.__all__`` read from the source (no import), less ``__version__``."""
    tree = ast.parse((ROOT / "embedcalc" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = ast.literal_eval(node.value)
            return [n for n in names if not n.startswith("__")]
    raise RuntimeError("embedcalc/__init__.py defines no __all__")


def api_reference() -> str:
    """One mkdocstrings block per public name: functions first, then the types, each alphabetically."""
    names = public_names()
    functions = sorted(n for n in names if n[0].islower())
    types = sorted(n for n in names if not n[0].islower())
    out = ["## Functions", ""]
    out += [f"::: embedcalc.{n}\n" for n in functions]
    out += ["## Types", ""]
    out += [f"::: embedcalc.{n}\n" for n in types]
    return "\n".join(out)


GENERATORS = {
    "hardware-catalogue": hardware_catalogue,
    "published-run-ids": published_run_ids,
    "api-reference": api_reference,
    "published-runs": published_runs,
    "published-serving": published_serving,
}


def expand_markers(markdown: str, where: str) -> str:
    """Replace every ``<!-- generated: NAME -->`` line by its generator's output; an unknown NAME is an error."""

    def generate(match: re.Match[str]) -> str:
        generator = GENERATORS.get(match["name"])
        if generator is None:
            raise ValueError(
                f"{where}: unknown generated block {match['name']!r}; known: {', '.join(GENERATORS)}"
            )
        return generator()

    return MARKER.sub(generate, markdown)


# --- the MkDocs hooks ---------------------------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    """Fill the nav's "Commands" section with one page per command, in docs/cli.md's order."""
    pages = [f"{COMMANDS_DIR}/{name}.md" for name in command_sections() if name]
    for item in config["nav"] or []:
        if isinstance(item, dict) and "Commands" in item:
            item["Commands"] = [entry for entry in item["Commands"] if entry not in pages] + pages
            break
    else:
        raise ValueError("mkdocs.yml: the nav has no 'Commands' section for the command pages")
    return config


_BUILT: dict[str, Any] = {}  # this build's samples and figures, made once in on_files


def on_files(files: Any, config: Any) -> Any:
    """A generated page for every command without a hand-written one (a hand-written page of no command is an
    error); the figures as files of the site, and the samples, made here once per build."""
    from concurrent.futures import ThreadPoolExecutor

    from mkdocs.structure.files import File

    generated = docs_generated
    with ThreadPoolExecutor(max_workers=2) as pool:
        figures = pool.submit(generated.all_figures)
        _BUILT["samples"] = generated.all_samples()
        _BUILT["figures"] = figures.result()
    for name, data in _BUILT["figures"].items():
        files.append(File.generated(config, f"figures/{name}.svg", content=data))

    commands = {name for name in command_sections() if name}
    written = {
        f.src_uri.removeprefix(f"{COMMANDS_DIR}/").removesuffix(".md")
        for f in files
        if f.src_uri.startswith(f"{COMMANDS_DIR}/") and f.src_uri.endswith(".md")
    }
    stale = sorted(written - commands - {"index"})
    if stale:
        log.warning("docs/commands/ has pages for commands that do not exist: %s", ", ".join(stale))
    for name in sorted(commands - written):
        files.append(File.generated(config, f"{COMMANDS_DIR}/{name}.md", content=f"# `embedcalc {name}`\n"))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Append each command page's reference; expand the generated blocks."""
    src = page.file.src_uri
    if src.startswith(f"{COMMANDS_DIR}/") and src != f"{COMMANDS_DIR}/index.md":
        name = src.removeprefix(f"{COMMANDS_DIR}/").removesuffix(".md")
        sections = command_sections()
        if name in sections:
            markdown = command_page(name, markdown, sections[name], _BUILT.get("samples", {}).get(name, ""))
    elif src == f"{COMMANDS_DIR}/index.md":
        markdown = markdown.rstrip() + "\n\n## Global options\n\n" + command_sections()[""]
    prefix = "../" * src.count("/")
    markdown = FIGURE.sub(lambda m: docs_generated.figure_markdown(m["name"], prefix), markdown)
    return expand_markers(markdown, src)


# --- docstrings: embedcalc writes reST-style inline markup and doctests; the site renders Markdown ----------------

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):`~?(?:[\w.]+\.)?([^`]+)`")
# The design notes a docstring cites are not part of the repository: the site names the topic instead.
_DESIGN = re.compile(r"DESIGN(?:\.md)? §(\d+)")
_DESIGN_TOPICS = {"4": "the counting conventions", "5": "the JSON output contract", "6": "the exit codes",
                  "7": "the package layout", "13": "the Python API", "14": "the time model",
                  "19": "the general reader"}  # fmt: skip


def markdown_docstring(text: str) -> str:
    """A docstring as Markdown: doctest runs (``>>>`` to the next blank line) fenced as ``pycon``, ``:role:`x```
    and double backticks as inline code. Text inside fences is left alone."""
    out: list[str] = []
    in_fence = in_doctest = False
    for line in text.splitlines():
        if in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        fence_line = line.lstrip().startswith("```") and not in_doctest
        if fence_line:
            in_fence = not in_fence
        elif not in_fence and not in_doctest and line.lstrip().startswith(">>> "):
            out += ["", "```pycon"] if out and out[-1].strip() else ["```pycon"]
            in_doctest = True
        if not (fence_line or in_fence or in_doctest):
            line = _ROLE.sub(r"`\1`", line).replace("``", "`")
            line = _DESIGN.sub(lambda m: _DESIGN_TOPICS.get(m[1], "the design notes"), line)
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


try:  # the griffe extension exists only where the docs extra is installed (mkdocstrings loads it)
    import griffe

    class MarkdownDocstrings(griffe.Extension):
        """mkdocs.yml: ``extensions: [scripts/docs_site.py:MarkdownDocstrings]`` of the python handler."""

        def on_instance(self, *, node: Any, obj: Any, agent: Any, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = markdown_docstring(obj.docstring.value)

except ImportError:  # pragma: no cover - the site is built with the docs extra
    pass


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    (what,) = argv
    if what in GENERATORS:
        print(GENERATORS[what](), end="")
        return 0
    sections = command_sections()
    if what not in sections:
        print(
            f"unknown page {what!r}; one of: {', '.join([*GENERATORS, *filter(None, sections)])}",
            file=sys.stderr,
        )
        return 2
    print(command_page(what, None, sections[what]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
