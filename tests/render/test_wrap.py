"""render/wrap.py: a cell's text broken at spaces and name separators, never inside a number (issue 24 item 6)."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from rich.text import Text

from embedcalc.render.wrap import least_width, wrap


def lines(text: str, width: int, hang: bool = True) -> list[str]:
    return wrap(Text(text), width, hang).plain.split("\n")


def test_a_tensor_name_breaks_after_its_separators_and_hangs() -> None:
    name = "  decoder.layers.0-11.attention.qkv.weight"
    out = lines(name, 24)
    assert out == ["  decoder.layers.0-11.", "    attention.qkv.weight"]
    assert "".join(line.strip() for line in out) == name.strip()


def test_spaces_first_then_separators() -> None:
    """A word that fits on the next line moves there whole; only a word wider than the line breaks inside."""
    assert lines("linear_num_value_heads, linear_value_head_dim", 30, hang=False) == [
        "linear_num_value_heads,",
        "linear_value_head_dim",
    ]
    assert lines("linear_num_value_heads", 12, hang=False) == ["linear_num_", "value_heads"]


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        ("h100-sxm (bf16: 989.40TFLOP/s, 3.35TB/s)", "989.40TFLOP/s,"),
        ("7.45 ms (bound 4.69 ms)", "4.69 ms)"),
        ("params 124,439,808 of 109,482,240", "124,439,808"),
        ("the ranges 0-5 and 1e-3 stay", "1e-3"),
    ],
)
def test_numbers_and_their_units_stay_on_one_line(text: str, whole: str) -> None:
    for width in range(least_width(text), len(text)):
        out = lines(text, width)
        assert all(cell_len(line) <= width for line in out), (width, out)
        assert any(whole in line for line in out), (width, out)


def test_least_width_is_the_widest_piece() -> None:
    assert least_width("decoder/attention/qkv") == len("attention/")
    assert least_width("1,234,567,890 B") == len("1,234,567,890 B")  # a number and its unit are one piece
    assert least_width("f" * 40) == 16  # a long piece that is not a number (a hash) may be folded


def test_cjk_breaks_between_characters_by_cell_width() -> None:
    out = lines("整个堆叠末尾的归一化", 8, hang=False)
    assert all(cell_len(line) <= 8 for line in out) and "".join(out) == "整个堆叠末尾的归一化"


def test_styles_survive_the_wrap() -> None:
    text = Text("encoder/attention/qkv", style="bold")
    wrapped = wrap(text, 16)
    assert wrapped.plain.count("\n") == 1 and all(span.style == "bold" for span in wrapped.spans)
