"""``bench --nproc`` on several nodes, as drawn: a node other than node 0 says which ranks it ran and where the
report of every rank is (the report itself is checked, number by number, in tests/cli/test_distributed_bench.py)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from embedcalc.render.distributed import elsewhere_note

pytestmark = [pytest.mark.torch]


def _drawn(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=80, color_system=None, force_terminal=False)
    console.print(renderable)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


@pytest.mark.parametrize(
    ("ranks", "said"), [([0], "node 1: rank 0 took part"), ([2, 3], "node 1: ranks 2, 3 took")]
)
def test_a_node_other_than_0_says_where_the_report_is(ranks: list[int], said: str) -> None:
    from embedcalc.modeling.distributed import ReportElsewhere

    text = " ".join(
        _drawn(elsewhere_note(SimpleNamespace(where=ReportElsewhere("gpu-a", 1, 1, ranks)))).split()
    )
    assert said in text and "the report of every rank is on node 0, host gpu-a (rank 1)" in text
