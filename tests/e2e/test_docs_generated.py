"""The site's pieces made from the tool's own output at each build (scripts/docs_generated.py), and the checks of
the built HTML (scripts/check_site.py) and of three pages in headless Chromium (scripts/site_screenshots.py), both
run by CI after ``mkdocs build``. Issue 34, item 6."""

from __future__ import annotations

import re

import pytest
from paths import DOCS, load_script

site = load_script("docs_site")
generated = load_script("docs_generated")
check = load_script("check_site")
shots = load_script("site_screenshots")

FIGURE_MARK = re.compile(r"^<!-- figure: ([\w.-]+) -->$", re.M)


def _placed() -> dict[str, list[str]]:
    placed: dict[str, list[str]] = {}
    for page in DOCS.rglob("*.md"):
        for name in FIGURE_MARK.findall(page.read_text(encoding="utf-8")):
            placed.setdefault(name, []).append(page.relative_to(DOCS).as_posix())
    return placed


def test_every_figure_is_placed_and_every_placed_figure_exists() -> None:
    placed = _placed()
    assert set(placed) == set(generated.FIGURES), placed
    assert len(placed) >= 4
    assert "commands/plan.md" in placed["plan"] and "concepts/memory.md" in placed["memory"]


def test_figure_markdown_links_from_the_page_to_the_site_root() -> None:
    assert generated.figure_markdown("memory", "../").startswith("![memory breakdown")
    assert "](../figures/memory.svg)" in generated.figure_markdown("memory", "../")
    assert "](figures/plan.svg)" in generated.figure_markdown("plan", "")
    with pytest.raises(ValueError, match="unknown figure 'nope'"):
        generated.figure_markdown("nope", "")


def test_every_command_has_a_sample_and_its_page_shows_it_above_the_reference() -> None:
    commands = {name for name in site.command_sections() if name}
    assert set(generated.SAMPLES) == commands
    page = site.command_page("heads", "# `embedcalc heads`\n\nHeads.\n", site.command_sections()["heads"],
                             "## Example\n\n```console\n$ embedcalc heads 4096\n```\n")  # fmt: skip
    assert page.index("Heads.") < page.index("## Example") < page.index("## Reference")


def test_a_sample_is_the_commands_real_output() -> None:
    text = generated.sample("heads")
    assert text.startswith("## Example\n") and "$ embedcalc heads 4096\n" in text
    assert "128" in text  # head_dim 128 at 32 heads, as heads 4096 prints it


def test_docstrings_on_the_site_name_topics_not_the_design_notes() -> None:
    text = site.markdown_docstring("The ``results[]`` entry (DESIGN.md §5); exits (DESIGN.md §6).")
    assert "DESIGN" not in text and "the JSON output contract" in text and "the exit codes" in text


def test_no_page_cites_a_file_outside_the_repository() -> None:
    cited = [
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if "DESIGN" in p.read_text(encoding="utf-8")
    ]
    assert not cited


def test_published_run_ids_are_explained_from_the_benchmarks_own_list() -> None:
    table = generated.published_run_ids()
    assert table.startswith("| run | role | measured (source) | embedcalc command |")
    assert "| `T1` | fit | Narayanan et al. 2021" in table and "`embedcalc analyze gpt3-175b" in table


def test_catalogue_sources_link_by_host() -> None:
    page = site.hardware_catalogue()
    assert "[resources.nvidia.com](https://resources.nvidia.com/" in page  # a URL no longer widens the table
    assert "| https://" not in page and " https://" not in page.replace("](https://", "")


def test_site_check_finds_what_a_reader_would_see_wrong(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "index.html").write_text('<p>see DESIGN.md</p><img src="figures/gone.svg">')
    found = "\n".join(check.problems(tmp_path))
    assert "index.html: cites DESIGN.md" in found and "image figures/gone.svg is not in the site" in found
    assert "commands/plan: no sample run" in found and "generated figures shown, fewer than 4" in found


@pytest.mark.slow
def test_every_figure_is_drawn_from_the_tools_output() -> None:
    figures = generated.all_figures()
    assert set(figures) == set(generated.FIGURES)
    text = {name: data.decode() for name, data in figures.items()}
    assert all(t.lstrip().startswith(("<?xml", "<svg")) for t in text.values())
    assert "ffn/in" in text["sweep.roofline"] and "attention/scores" in text["sweep.roofline"]  # labelled
    assert "n* =" in text["sweep"]
    assert "kv cache" in text["memory"] and "optimizer" in text["memory"]
    assert "TTFT" in text["plan"] and "h100-sxm" in text["plan"]
    assert "prefill" in text["time"]
    assert "largest" in text["dtypes"] and "nvfp4" in text["dtypes"]  # rich writes spaces as &#160;


@pytest.mark.skipif(shots.browser() is None, reason="no Chromium (CI installs Debian's chromium)")
def test_the_browser_check_sees_a_cut_table_a_missing_figure_and_a_blank_page(tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "page" / "index.html"
    page.parent.mkdir()
    wide = "<table><tr>" + "<td><code>" + "x" * 300 + "</code></td>" * 2 + "</tr></table>"
    page.write_text(f'<article><div style="width:600px">{wide}</div><img src="gone.svg"></article>')
    blank = tmp_path / "blank" / "index.html"
    blank.parent.mkdir()
    blank.write_text("<html><body></body></html>")
    found = "\n".join(shots.problems(shots.browser(), tmp_path, tmp_path / "shots",
                                      ("page/index.html", "blank/index.html")))  # fmt: skip
    assert "page/index.html: table 1 is cut" in found, found
    assert "page/index.html: figure gone.svg did not load" in found
    assert "blank/index.html: the screenshot is blank" in found
