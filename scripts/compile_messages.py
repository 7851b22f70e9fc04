"""Compile the ``.po`` message catalogues under ``embedcalc/locale`` into the ``.mo`` files gettext reads.

A small msgfmt (the GNU ``.mo`` format, as CPython's ``Tools/i18n/msgfmt.py`` writes it): plain ``msgid`` /
``msgstr`` entries with ``#`` comments, no plurals or contexts. Deterministic, so a test can check that the
shipped ``.mo`` files are the compiled ``.po`` files. ``--check`` exits 1 if any ``.mo`` is stale.
"""

from __future__ import annotations

import ast
import struct
import sys
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent.parent / "embedcalc" / "locale"


def parse_po(text: str) -> dict[str, str]:
    """msgid -> msgstr of a ``.po`` file (the header under the empty msgid); untranslated entries dropped."""
    entries: dict[str, str] = {}
    current: dict[str, list[str]] = {}
    field: str | None = None

    def flush() -> None:
        if "msgid" in current and "msgstr" in current:
            msgid, msgstr = "".join(current["msgid"]), "".join(current["msgstr"])
            if msgstr:
                entries[msgid] = msgstr
        current.clear()

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("msgid ", "msgstr ")):
            keyword, _, rest = line.partition(" ")
            if keyword == "msgid":
                flush()
            field, line = keyword, rest.strip()
            current[field] = []
        if field is None or not line.startswith('"'):
            raise ValueError(f"line {number}: expected a quoted string: {raw!r}")
        current[field].append(ast.literal_eval(line))
    flush()
    return entries


def mo_bytes(entries: dict[str, str]) -> bytes:
    """The GNU ``.mo`` encoding of ``entries`` (UTF-8, keys sorted, no hash table)."""
    keys = sorted(entries)
    ids = [k.encode() for k in keys]
    strs = [entries[k].encode() for k in keys]
    header_size = 7 * 4
    table_size = 8 * len(keys)
    id_start = header_size + 2 * table_size
    offsets_ids, offsets_strs = [], []
    blob = b""
    for data in ids:
        offsets_ids.append((len(data), id_start + len(blob)))
        blob += data + b"\0"
    str_start = id_start + len(blob)
    strs_blob = b""
    for data in strs:
        offsets_strs.append((len(data), str_start + len(strs_blob)))
        strs_blob += data + b"\0"
    out = struct.pack("<7I", 0x950412DE, 0, len(keys), header_size, header_size + table_size, 0, 0)
    out += b"".join(struct.pack("<2I", *o) for o in offsets_ids)
    out += b"".join(struct.pack("<2I", *o) for o in offsets_strs)
    return out + blob + strs_blob


def catalogues() -> list[Path]:
    return sorted(LOCALE_DIR.glob("*/LC_MESSAGES/*.po"))


def main(argv: list[str]) -> int:
    stale = []
    for po in catalogues():
        data = mo_bytes(parse_po(po.read_text(encoding="utf-8")))
        mo = po.with_suffix(".mo")
        if "--check" in argv:
            if not mo.is_file() or mo.read_bytes() != data:
                stale.append(mo)
        else:
            mo.write_bytes(data)
            print(f"wrote {mo.relative_to(LOCALE_DIR.parent.parent)}")
    for mo in stale:
        print(f"stale: {mo}; run python scripts/compile_messages.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
