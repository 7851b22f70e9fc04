"""modeling/timing.py's device measurements (issue 20 item 5): the per-kernel overhead of a chain of tiny kernels
and the GEMM rows at half rate, their fit exact on data that follows the law, and their structure on this machine.
No speed is asserted: the machine is shared."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from embedcalc.modeling.timing import (  # noqa: E402
    fit_half_rows,
    measure_gemm_rows,
    measure_kernel_overhead,
)

pytestmark = [pytest.mark.torch]


@pytest.mark.parametrize("half", [0.5, 8.0, 123.8])
def test_the_half_rows_fit_recovers_the_law_it_fits(half: float) -> None:
    rows = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    rates = [5e10 * r / (r + half) for r in rows]
    assert fit_half_rows(rows, rates) == pytest.approx(half, rel=1e-9)


def test_no_half_rows_without_a_saturation() -> None:
    assert fit_half_rows((1, 2, 4), (1e10, 1e10, 1e10)) is None  # flat: nothing saturates
    assert fit_half_rows((1, 2, 4), (3e10, 2e10, 1e10)) is None  # falling with the rows: not this law
    assert fit_half_rows((4,), (1e10,)) is None  # one point fits no line


def test_kernel_overhead_structure() -> None:
    m = measure_kernel_overhead(torch.device("cpu"), kernels=51, repeat=3)
    assert m.kernels == 50 and m.repeat == 3  # whole add + matmul pairs
    assert m.seconds_per_kernel > 0 and "50 tiny dependent kernels" in m.method


def test_gemm_rows_structure() -> None:
    m = measure_gemm_rows(torch.device("cpu"), "fp32", size=64, rows=(1, 4, 16), repeat=2)
    assert m.rows == (1, 4, 16) and len(m.flops_per_s) == 3 and all(f > 0 for f in m.flops_per_s)
    assert m.half_rows is None or m.half_rows > 0
    assert "r = 1, 4, 16" in m.method
