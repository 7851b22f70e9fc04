"""Checks of the built documentation site (issue 34), run by CI after ``mkdocs build``: what a reader would see
wrong in a browser, tested on the HTML (no browser can be installed offline here: Playwright and pyppeteer fetch
theirs from the network at first use).

- every image a page shows is a file of the site, and at least :data:`MIN_FIGURES` different generated figures
  are shown;
- the figure pages show theirs (:data:`FIGURE_PAGES`), and every command page has its sample run;
- no page cites a file outside the repository (``DESIGN.md``);
- the stylesheet that wraps shell commands (the install line, one long command) is linked;
- no table of the hardware catalogue is wider than the content column at 1280 px: the width of each column's
  longest unbreakable piece (a code span, a number) at the theme's table font, plus the cell padding, summed.

    python scripts/check_site.py SITE_DIR      # exit 1 and the problems, or 0
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

MIN_FIGURES = 4
FIGURE_PAGES = {
    "commands/plan/index.html": ["figures/plan.svg"],
    "commands/sweep/index.html": ["figures/sweep.svg", "figures/sweep.roofline.svg"],
    "concepts/time/index.html": ["figures/time.svg", "figures/sweep.roofline.svg"],
    "concepts/memory/index.html": ["figures/memory.svg", "figures/dtypes.svg"],
}
COMMANDS = ("analyze", "bench", "check", "compare", "diff", "explain", "hardware", "heads", "plan", "presets",
            "schema", "sweep", "verify")  # fmt: skip

# Material for MkDocs at a 1280 px window: the grid is 61rem wide at 20 px/rem, less the navigation and table of
# contents sidebars (12.1rem each) and the content's padding (1.2rem each side); tables are set at 0.64rem with
# 0.9375em of padding each side of a cell. A character of the table font is taken as 0.6em wide (monospace code
# is 0.6em; proportional digits are narrower).
REM = 20.0
CONTENT_PX = (61 - 2 * 12.1 - 2 * 1.2) * REM
TABLE_FONT_PX = 0.64 * REM
CHAR_PX = 0.6 * TABLE_FONT_PX
CELL_PAD_PX = 2 * 0.9375 * TABLE_FONT_PX

_IMG = re.compile(r'<img[^>]*\bsrc="([^"]+)"')
_TABLE = re.compile(r"<table>(.*?)</table>", re.S)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL = re.compile(r"<t[hd][^>]*>(.*?)</t[hd]>", re.S)
_CODE = re.compile(r"<code>(.*?)</code>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _unbreakable(cell: str) -> int:
    """The widest piece of a cell that a browser will not wrap: a code span whole, else the longest word."""
    pieces = [html.unescape(_TAG.sub("", c)) for c in _CODE.findall(cell)]
    text = html.unescape(_TAG.sub(" ", _CODE.sub(" ", cell)))
    pieces += text.split()
    return max((len(p) for p in pieces), default=0)


def table_width_px(table: str) -> float:
    """The least width a browser can give ``table`` (its columns at their widest unbreakable piece)."""
    widths: list[int] = []
    for row in _ROW.findall(table):
        for i, cell in enumerate(_CELL.findall(row)):
            if i == len(widths):
                widths.append(0)
            widths[i] = max(widths[i], _unbreakable(cell))
    return sum(w * CHAR_PX + CELL_PAD_PX for w in widths)


def problems(site: Path) -> list[str]:
    out: list[str] = []
    shown: set[str] = set()
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(site).as_posix()
        for src in _IMG.findall(text):
            if src.startswith(("http:", "https:", "data:")):
                continue
            target = (page.parent / src.split("#")[0]).resolve()
            if not target.is_file():
                out.append(f"{rel}: image {src} is not in the site")
            elif "/figures/" in target.as_posix():
                shown.add(target.name)
        if "DESIGN.md" in _TAG.sub("", text):
            out.append(f"{rel}: cites DESIGN.md, which is not in the repository")
    if len(shown) < MIN_FIGURES:
        out.append(f"{len(shown)} generated figures shown, fewer than {MIN_FIGURES}: {sorted(shown)}")
    for rel, figures in FIGURE_PAGES.items():
        text = (site / rel).read_text(encoding="utf-8") if (site / rel).is_file() else ""
        out += [f"{rel}: does not show {f}" for f in figures if Path(f).name not in text]
    for name in COMMANDS:
        page = site / "commands" / name / "index.html"
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        if 'id="example"' not in text:
            out.append(f"commands/{name}: no sample run (Example)")
    start = site / "getting-started" / "index.html"
    if start.is_file() and "stylesheets/extra.css" not in start.read_text(encoding="utf-8"):
        out.append("getting-started: the stylesheet that wraps the install line is not linked")
    hardware = site / "hardware" / "index.html"
    for n, table in enumerate(_TABLE.findall(hardware.read_text(encoding="utf-8"))[:2]):
        width = table_width_px(table)
        if width > CONTENT_PX:
            out.append(
                f"hardware: table {n + 1} needs {width:.0f} px, the content column has {CONTENT_PX:.0f}"
            )
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(Path(argv[0]))
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
