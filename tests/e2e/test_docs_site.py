"""The documentation site's generated pages (scripts/docs_site.py, the MkDocs hooks): one page per command, the
hardware catalogue with every figure of every shipped device, one API entry per public name, docstrings as
Markdown. ``mkdocs build --strict`` itself runs in .ci/run."""

from __future__ import annotations

import re

import pytest
import typer
from paths import ROOT, load_script

import embedcalc
from embedcalc.cli.app import build_app
from embedcalc.devices.catalogue import catalogue, hardware_names

site = load_script("docs_site")


def _top_level_commands() -> set[str]:
    command = typer.main.get_command(build_app())
    return set(command.commands)  # type: ignore[attr-defined]


def test_cli_reference_has_a_section_per_command() -> None:
    sections = site.command_sections()
    assert set(sections) - {""} == _top_level_commands()
    assert all("**Usage**" in body for name, body in sections.items() if name)
    assert "### `embedcalc presets show`" in sections["presets"]  # subcommands stay on their parent's page


def test_every_command_page_is_a_command() -> None:
    pages = {p.stem for p in (ROOT / "docs" / "commands").glob("*.md")} - {"index"}
    assert pages <= _top_level_commands()


def test_command_page_puts_the_reference_under_the_hand_written_text() -> None:
    sections = site.command_sections()
    page = site.command_page("check", "# `embedcalc check`\n\nValidate.\n", sections["check"])
    assert page.index("Validate.") < page.index("## Reference") < page.index("**Options**")
    assert site.command_page("check", None, sections["check"]).startswith("# `embedcalc check`\n")


def test_hardware_page_has_every_figure_of_every_device() -> None:
    page = site.hardware_catalogue()
    devices = catalogue()
    assert [d.name for d in devices] == hardware_names()
    for device in devices:
        assert f"\n## {device.name}\n" in page
        section = page.split(f"\n## {device.name}\n", 1)[1].split("\n## ", 1)[0]
        for kind in ("interconnect", "network", "host_link"):
            link = getattr(device, kind, None)
            if link is not None:
                assert f"{kind.replace('_', ' ')}: {link.kind}" in section, (device.name, kind)
        for label, figure in device.figures():
            assert f"| `{label}` |" in section, (device.name, label)
            if figure.note:
                assert site._cell(figure.note) in section, (device.name, label)
    h100 = page.split("\n## h100-sxm\n", 1)[1].split("\n## ", 1)[0]
    assert "| `peak_flops_per_s.bf16` | 989.4 TFLOP/s |" in h100
    assert "| `memory_bytes` | 80.00 GiB (85,899,345,920 B) |" in h100


def test_api_reference_documents_every_public_name() -> None:
    reference = site.api_reference()
    documented = re.findall(r"^::: embedcalc\.(\w+)$", reference, re.M)
    assert sorted(documented) == sorted(n for n in embedcalc.__all__ if n != "__version__")


def test_markers_expand_and_unknown_ones_are_errors() -> None:
    assert "::: embedcalc.load" in site.expand_markers("x\n<!-- generated: api-reference -->\n", "api.md")
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        site.expand_markers("<!-- generated: nope -->\n", "page.md")


def test_published_runs_page_says_what_it_shows() -> None:
    text = site.published_runs()
    if site.docs_generated.PUBLISHED_SCRIPT.exists():
        assert text.startswith("```console\n$ python benchmarks/bench_published.py\n")
    else:
        assert "bench_published.py` is not in this checkout" in text


def test_docstrings_become_markdown() -> None:
    text = "Load a :class:`~embedcalc.ConfigError` via :func:`load` and ``x``.\n\n>>> 1 + 1\n2\n\nAfter."
    assert site.markdown_docstring(text) == (
        "Load a `ConfigError` via `load` and `x`.\n\n```pycon\n>>> 1 + 1\n2\n```\n\nAfter."
    )
    fenced = "```python\nx = ``y``\n```"
    assert site.markdown_docstring(fenced) == fenced
    assert site.markdown_docstring("Text:\n>>> f()\n3").endswith("```pycon\n>>> f()\n3\n```")


def test_nav_lists_every_page() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    pages -= {"cli.md"} | {p for p in pages if p.startswith("commands/") and p != "commands/index.md"}
    missing = sorted(p for p in pages if f" {p}" not in nav)
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize(
    ("label", "value", "shown"),
    [
        ("peak_flops_per_s.bf16", 989.4e12, "989.4 TFLOP/s"),
        ("peak_flops_per_s.int8", 1978.9e12, "1,978.9 TOP/s"),
        ("memory_bandwidth_bytes_per_s", 3.35e12, "3,350.0 GB/s"),
        ("memory_bytes", 85899345920, "80.00 GiB (85,899,345,920 B)"),
        ("price_per_hour", 3.99, "$3.99 / h"),
        ("interconnect.latency_s", 0.47e-6, "470 ns"),
        ("network.latency_s", 2.7e-6, "2.7 µs"),
        ("domain_size", 8, "8"),
    ],
)
def test_figures_are_shown_in_the_unit_their_label_names(label: str, value: float, shown: str) -> None:
    assert site._figure_value(label, value) == shown


def test_getting_started_installs_as_the_readme_does() -> None:
    def first_bash_block(text: str) -> list[str]:
        block = re.search(r"```bash\n(.*?)```", text, re.S)
        assert block is not None
        return [line for line in block.group(1).splitlines() if line.strip()]

    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("## Quick start", 1)[1]
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert first_bash_block(page) == first_bash_block(readme)
