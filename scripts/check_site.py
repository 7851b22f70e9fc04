"""Checks of the built documentation site (issue 34), run by CI after ``mkdocs build``, on its HTML:

- every image a page shows is a file of the site, and at least :data:`MIN_FIGURES` different generated figures
  are shown;
- the figure pages show theirs (:data:`FIGURE_PAGES`), and every command page has its sample run;
- no page cites a file outside the repository (``DESIGN.md``);
- the stylesheet that wraps shell commands (the install line, one long command) is linked.

How the pages look in a browser (tables cut, figures that do not load) is checked by scripts/site_screenshots.py,
in headless Chromium.

    python scripts/check_site.py SITE_DIR      # exit 1 and the problems, or 0
"""

from __future__ import annotations

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

_IMG = re.compile(r'<img[^>]*\bsrc="([^"]+)"')
_TAG = re.compile(r"<[^>]+>")


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
