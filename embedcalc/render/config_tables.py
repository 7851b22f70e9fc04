"""Rich tables about a config itself rather than an analysis of it: ``check``'s derived fields, what became of
every key of a Hugging Face config.json, the nearest valid configs to an invalid one, the valid ``num_heads`` of an
``embed_dim`` (``heads``) and the preset list (``presets``). The analysis, compare, verify and measurement tables
are in :mod:`embedcalc.render.tables`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.heads import HeadChoice
from embedcalc.render import units
from embedcalc.render.fit import FitTable

if TYPE_CHECKING:  # `heads` and `presets` render here without loading the Hugging Face readers (pydantic)
    from embedcalc.sources.hf import HFReport


def check_table(target: str, derived: dict[str, object], params: int) -> Table:
    table = FitTable(title=f"{escape(target)}: valid", title_justify="left", show_header=False)
    table.add_column("field", whole=True)
    table.add_column("value", justify="right", whole=True)
    for key, value in derived.items():
        if value is not None:
            table.add_row(key, str(value))
    table.add_row("params", f"{units.count(params)} ({units.si(params)})")
    return table


def heads_table(embed_dim: int, choices: Sequence[HeadChoice]) -> Table:
    table = FitTable(
        title=f"Valid num_heads for embed_dim {embed_dim}",
        title_justify="left",
        caption="✓ usual: head_dim 64 or 128 · ×8/×16/×64: tensor-core alignment · "
        "flash: head_dim ≤ 256 (FlashAttention-2)",
    )
    for name in ("num_heads", "head_dim"):
        table.add_column(name, justify="right", whole=True)
    for name in ("×8", "×16", "×64", "flash", "usual"):
        table.add_column(name, justify="center")
    mark = {True: "✓", False: ""}
    for c in choices:
        table.add_row(
            str(c.num_heads),
            str(c.head_dim),
            mark[c.multiple_of_8],
            mark[c.multiple_of_16],
            mark[c.multiple_of_64],
            mark[c.flash_ok],
            mark[c.usual],
            style="bold" if c.usual else None,
        )
    return table


def presets_table(rows: Sequence[dict[str, Any]]) -> Table:
    table = FitTable(
        title="Presets",
        title_justify="left",
        caption="`embedcalc presets show NAME` prints one.",
        # ≈ repeats the exact count; most names say the architecture; then the shape, least telling first
        drop=("≈", "architecture", "num_heads", "layers", "embed_dim"),
    )
    for col in ("name", "architecture", "params", "≈", "embed_dim", "num_heads", "layers"):
        table.add_column(col, justify="left" if col in ("name", "architecture") else "right", whole=True)
    for r in rows:
        table.add_row(
            r["name"],
            r["architecture"],
            units.count(r["params"]),
            units.si(r["params"]),
            str(r["embed_dim"]),
            str(r["num_heads"]),
            str(r["num_layers"]),
        )
    return table


def suggestions_table(target: str, rows: Sequence[dict[str, Any]]) -> Table:
    """Ranked valid alternatives to an invalid config, each a ready --set line."""
    table = FitTable(
        title=f"Nearest valid configs for {escape(target)}",
        title_justify="left",
        caption="Ranked by how little they change the parameter count of the config as written.",
    )
    table.add_column("#", justify="right", whole=True)
    table.add_column("overrides")
    table.add_column("params", justify="right", whole=True)
    table.add_column("change", justify="right", whole=True)
    for i, r in enumerate(rows, 1):
        delta = r["delta_params"]
        table.add_row(
            str(i), escape(r["command_line"]), units.count(r["params"]), f"{delta:+,.0f}" if delta else "0"
        )
    return table


VALUE_WIDTH = 40  # a Hugging Face value longer than this is described (its kind and size), never cut


def _value_text(value: object) -> str:
    """A config value as the file holds it; a long one (an ``id2label`` map, a token list) as what it is."""
    text = repr(value) if not isinstance(value, str) else value
    if len(text) <= VALUE_WIDTH:
        return text
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} keys"
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} items"
    return f"{type(value).__name__} of {len(text):,} characters"


_ORIGIN = {
    "file": "file",
    "default": "transformers default (key absent)",
    "family": "implied by model_type",
}


def hf_mapping_table(target: str, report: HFReport) -> Table:
    """What ``check`` did with every key of a Hugging Face config.json: mapped onto a field (from the file, from
    transformers' default for a key the file leaves out, or implied by the family) or ignored, with the reason.

    Four columns where they fit; at a narrower terminal two (key; what became of it), so no key is cut."""
    title = f"{escape(target)}: Hugging Face {escape(report.family)} config, counted as {escape(report.counted_as)}"
    caption = (
        "Counting rule: encoders as AutoModel (default pooler), decoders as AutoModelForCausalLM, "
        "encoder-decoders as AutoModelForSeq2SeqLM; the LM head tied as tie_word_embeddings says."
    )
    narrow = FitTable(title=title, caption=caption, title_justify="left")
    narrow.add_column("key", prefer_whole=True)  # "a, b" (a field read from two keys) may wrap after a comma
    narrow.add_column("field = value (from / why)")
    table = FitTable(title=title, caption=caption, title_justify="left", narrow=narrow)
    table.add_column("key", prefer_whole=True)
    table.add_column("field", prefer_whole=True)
    table.add_column("value")
    table.add_column("from / why")
    for m in report.mapped:
        how = _ORIGIN[m.origin] + (f": {m.note}" if m.note else "")
        key, value = escape(m.key), escape(_value_text(m.value))
        table.add_row(key, m.field, value, escape(how))
        narrow.add_row(key, f"{m.field} = {value} ({escape(how)})")
    table.add_section()
    narrow.add_section()
    for i in report.ignored:
        key, value = escape(i.key), escape(_value_text(i.value))
        table.add_row(key, "[dim]ignored[/]", value, escape(i.reason))
        narrow.add_row(key, f"[dim]ignored[/] {value}: {escape(i.reason)}")
    return table
