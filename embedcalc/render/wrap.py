"""Wrapping a cell's text without cutting a number or a name: at spaces first, then inside a long name after its
separators (``decoder.layers.0-11.`` / ``attention.qkv.weight``, ``encoder/`` / ``attention``) or after any CJK
character, never inside a number.

rich wraps only at whitespace and folds (or cuts with ``…``) a word longer than its column; a tensor name or a slash
key is one long word. :func:`wrap` breaks such a word after ``.``, ``/`` or ``_`` (but not between two digits, so
``989.5`` and ``1/2`` stay whole, nor inside a word that starts with a number: ``989.40TFLOP/s``; a number keeps
its unit: ``7.45 ms``) and indents the continuation lines two spaces past the cell's own indent, so that
the rows of a grouped table still read as a tree. :func:`least_width` is the narrowest column that :func:`wrap` can
fill without folding a piece: what :class:`embedcalc.render.fit.FitTable` takes as a text column's least width.
"""

from __future__ import annotations

import re
from itertools import pairwise

from rich.cells import cell_len
from rich.text import Text

_SPACES = re.compile(r" +")
_WORD = re.compile(r"[^ ]+")
_NUMBER = re.compile(r"[(\[$+-]?\d")  # a word that is a number with its unit: never broken
_FULL_NUMBER = re.compile(r"[(\[$+-]?\d[\d,.]*(e[+-]?\d+)?[A-Za-zµ%/]*[)\],.;:]*( \S+)?")
_UNIT = re.compile(  # a unit after a number stays on its line
    r"(?:(?:[KMGTP]i?)?B|[kMGTP]?B/s|[kMGTPE]?FLOPS?(?:/s)?|[kMGTP]?OP/s|[mµn]?s|min|h|d|tokens(?:/s)?)[),.;:]*"
)
_SEPARATORS = "./_-"
CONTINUATION = 2  # continuation lines are indented this much past the cell's own indent


def _breaks(plain: str) -> list[int]:
    """Where a line may start: after a run of spaces, or inside a word (:func:`_inner_breaks`)."""
    return sorted(set(_space_breaks(plain)) | set(_inner_breaks(plain)))


def _space_breaks(plain: str) -> list[int]:
    """Where a line may start between words: after a run of spaces, except between a number and its unit."""
    words = list(_WORD.finditer(plain))
    at = {m.end() for m in _SPACES.finditer(plain)}
    for word, after in pairwise(words):  # "7.45 ms", "80.00 GiB": a number keeps its unit
        if _NUMBER.match(word.group()) and _UNIT.fullmatch(after.group()):
            at.discard(after.start())
    lead = len(plain) - len(plain.lstrip(" "))  # the cell's indent is no break
    return sorted(b for b in at if lead < b < len(plain))


def _inner_breaks(plain: str) -> list[int]:
    """Where a line may start inside a word: after a separator not between two digits, or after a CJK
    character; never inside a word that starts with a number."""
    at = {i + 1 for i, char in enumerate(plain) if cell_len(char) == 2}  # CJK: a line may break after any
    for word in _WORD.finditer(plain):
        if _NUMBER.match(word.group()):
            continue
        for i in range(word.start(), word.end() - 1):
            between = plain[i - 1].isalnum() and plain[i + 1].isalnum()
            digits = plain[i - 1].isdigit() and plain[i + 1].isdigit()
            if plain[i] in _SEPARATORS and between and not digits and not _minus(plain, i):
                at.add(i + 1)
    return sorted(b for b in at if 0 < b < len(plain))


def _minus(plain: str, i: int) -> bool:
    """Whether the ``-`` at ``i`` is a sign or a range (``1e-3``, ``0-5``) rather than a hyphen in a name."""
    return plain[i] == "-" and plain[i + 1].isdigit()


def _indent(plain: str, width: int, hang: bool) -> int:
    """The continuation lines' indent: the cell's own, and with ``hang`` up to two more where the widest piece
    leaves room for them."""
    lead = len(plain) - len(plain.lstrip(" "))
    widest = max((_piece_width(p.lstrip(" ")) for p in _pieces(plain)[1:]), default=0)
    return min(lead + max(0, min(CONTINUATION * hang, width - lead - widest)), max(width // 2, 0))


def _pieces(plain: str) -> list[str]:
    bounds = [0, *_breaks(plain), len(plain)]
    return [plain[a:b].rstrip(" ") for a, b in pairwise(bounds)]


FOLD_AT = (
    16  # a piece longer than this that is not a number (a commit hash, a long URL segment) may be folded
)


def _piece_width(piece: str) -> int:
    width = cell_len(piece)
    return width if width <= FOLD_AT or _FULL_NUMBER.fullmatch(piece.strip(" ")) else FOLD_AT


def least_width(text: Text | str) -> int:
    """The narrowest width at which :func:`wrap` breaks ``text`` only at its break points (no number folded; a
    long piece that is not a number only at :data:`FOLD_AT`)."""
    plain = text if isinstance(text, str) else text.plain
    pieces = _pieces(plain) or [""]
    lead = len(plain) - len(plain.lstrip(" "))
    rest = [_piece_width(p.lstrip(" ")) + lead for p in pieces[1:]]
    return min(cell_len(plain), max([_piece_width(pieces[0].lstrip(" ")) + lead, *rest]))


def word_width(text: Text | str) -> int:
    """The widest word of ``text`` (a number with its unit counts as one): the narrowest width at which
    :func:`wrap` breaks it at spaces only."""
    plain = text if isinstance(text, str) else text.plain
    bounds = [0, *_space_breaks(plain), len(plain)]
    return max((cell_len(plain[a:b].strip(" ")) for a, b in pairwise(bounds)), default=0)


def wrap(text: Text, width: int, hang: bool = True) -> Text:
    """``text`` as lines of at most ``width`` cells, broken at spaces and name separators (a piece wider than the
    line is folded, the last resort); continuation lines keep the cell's indent, and with ``hang`` two spaces
    more; styles are kept. Text that fits is returned as it is."""
    plain = text.plain
    if "\n" in plain or cell_len(plain) <= width or width < 1:
        return text
    indent = _indent(plain, width, hang)
    between = [*_space_breaks(plain), len(plain)]
    anywhere = [*_breaks(plain), len(plain)]
    lines: list[Text] = []
    start = 0
    while start < len(plain):
        room = width - (indent if lines else 0)
        end = _furthest(plain, between, start, room)  # whole words while they fit,
        if end is None:  # else a word wider than the line broken after a separator,
            end = _furthest(plain, anywhere, start, room)
        if end is None:  # else one piece wider than the line: fold it
            end = start + 1
            while end < len(plain) and cell_len(plain[start : end + 1]) <= room:
                end += 1
        line = text[start:end]
        line.rstrip()
        lines.append(line if not lines else Text(" " * indent) + line)
        start = end
        while start < len(plain) and plain[start] == " ":
            start += 1
    return Text("\n").join(lines)


def _furthest(plain: str, ends: list[int], start: int, room: int) -> int | None:
    """The furthest of ``ends`` after ``start`` whose line (trailing spaces dropped) fits ``room``."""
    end = None
    for b in ends:
        if b <= start:
            continue
        if cell_len(plain[start:b].rstrip(" ")) > room:
            break
        end = b
    return end
