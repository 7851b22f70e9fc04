"""Three pages of the built documentation site in a real browser (headless Chromium, Debian's ``chromium``
package, which CI installs before it runs this), at a 1280 x 900 window (issue 34):

- a screenshot of each page (``hardware/``, ``commands/plan/``, ``concepts/memory/``) is written to OUT_DIR and must
  not be blank (more than one colour in its content area);
- in the same browser, each page's tables and generated figures are measured after layout: a table whose content
  is wider than its box (cut, to be scrolled) or a figure that did not load (zero natural width) is a failure.

    python scripts/site_screenshots.py SITE_DIR OUT_DIR   # exit 1 and the problems, 0 when all three pass

The measurement runs in a harness page that loads each page in an iframe (file:// pages, so Chromium is started
with --allow-file-access-from-files) and writes what it found into its own DOM, which ``--dump-dom`` prints.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PAGES = ("hardware/index.html", "commands/plan/index.html", "concepts/memory/index.html")
WINDOW = (1280, 900)
HARNESS = """<!doctype html><html><body><iframe id="f" style="width:%(w)dpx;height:%(h)dpx"></iframe>
<pre id="out">pending</pre><script>
const pages = %(pages)s; const found = {}; let i = 0;
const frame = document.getElementById("f");
function next() {
  if (i >= pages.length) { document.getElementById("out").textContent = JSON.stringify(found); return; }
  frame.onload = () => setTimeout(() => {
    const doc = frame.contentDocument; const page = pages[i];
    const tables = [...doc.querySelectorAll("article table")].map(t => {
      const box = t.closest(".md-typeset__scrollwrap") || t.parentElement;
      return {wide: t.scrollWidth, box: box.clientWidth};
    });
    const images = [...doc.querySelectorAll("article img")].map(m => ({src: m.getAttribute("src"),
      width: m.naturalWidth}));
    found[page] = {tables, images}; i += 1; next();
  }, 1500);
  frame.src = pages[i];
}
next();
</script></body></html>"""


def browser() -> str | None:
    """The Chromium executable, if one is installed."""
    return next(
        (p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None
    )


def _chromium(exe: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={WINDOW[0]},{WINDOW[1]}", *args], capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip


def measure(
    exe: str, site: Path, pages: tuple[str, ...] = PAGES
) -> dict[str, dict[str, list[dict[str, object]]]]:
    """Each page's tables (content width against its box) and figures (natural width) as the browser laid them
    out."""
    with tempfile.TemporaryDirectory() as tmp:
        harness = Path(tmp) / "harness.html"
        urls = [(site / page).resolve().as_uri() for page in pages]
        harness.write_text(HARNESS % {"w": WINDOW[0], "h": WINDOW[1], "pages": json.dumps(urls)})
        done = _chromium(exe, "--allow-file-access-from-files", "--virtual-time-budget=30000", "--dump-dom",
                         harness.as_uri())  # fmt: skip
    match = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S)
    if match is None or match.group(1) == "pending":
        raise RuntimeError(f"the browser measured nothing:\n{done.stderr[-2000:]}")
    data = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return {page: data[url] for page, url in zip(pages, urls, strict=True)}


def _blank(png: Path) -> bool:
    from PIL import Image

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    return colours is not None and len(colours) <= 1


def problems(exe: str, site: Path, out: Path, pages: tuple[str, ...] = PAGES) -> list[str]:
    found: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for page in pages:
        png = out / (page.replace("/index.html", "").replace("/", "-").replace(".html", "") + ".png")
        _chromium(exe, f"--screenshot={png}", (site / page).resolve().as_uri())
        if not png.is_file():
            found.append(f"{page}: no screenshot")
        elif _blank(png):
            found.append(f"{page}: the screenshot is blank")
    for page, seen in measure(exe, site, pages).items():
        for n, table in enumerate(seen["tables"], 1):
            if int(str(table["wide"])) > int(str(table["box"])) + 1:
                found.append(f"{page}: table {n} is cut ({table['wide']} px of content in {table['box']} px)")
        for image in seen["images"]:
            if not image["width"]:
                found.append(f"{page}: figure {image['src']} did not load")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    exe = browser()
    if exe is None:
        print("no Chromium: apt-get install chromium", file=sys.stderr)
        return 1
    found = problems(exe, Path(argv[0]), Path(argv[1]))
    for problem in found:
        print(problem, file=sys.stderr)
    print(f"{len(PAGES)} pages in Chromium at {WINDOW[0]}x{WINDOW[1]}: {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
