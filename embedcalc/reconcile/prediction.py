"""The one way a measured run (``bench``'s forward or training step, ``bench --mode generate``, ``bench --nproc``)
is put beside its prediction: ``predicted`` holds, under each measured quantity's own key, the default prediction
for the ``local`` device (the expected time of the shipped calibration on local's measured peak, bandwidth,
kernel overhead and link: :func:`embedcalc.analysis.time.estimate.estimate_time`; memory from the analyzer), and
``error_pct`` the error of each, ``100 × (measured − predicted) / predicted``: positive when the run was slower or
bigger than predicted, None where there is no prediction (:func:`error_pct`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedcalc.analysis.roofline import RooflineEstimate

Values = Mapping[str, float | int | None]


def error_pct(measured: float | None, predicted: float | None) -> float | None:
    """(measured − predicted) / predicted in percent, or None without a prediction."""
    if measured is None or not predicted:
        return None
    return 100.0 * (measured - predicted) / predicted


def errors_pct(measured: Values, predicted: Values) -> dict[str, float | None]:
    """The error of every predicted key against the measurement of the same key."""
    return {key: error_pct(measured.get(key), value) for key, value in predicted.items()}


def beside(measured: Values, predicted: Values) -> dict[str, Any]:
    """The ``predicted`` and ``error_pct`` objects every measurement's JSON carries (module docstring)."""
    return {"predicted": dict(predicted), "error_pct": errors_pct(measured, predicted)}


def step_s(estimate: RooflineEstimate | None) -> float | None:
    """The predicted time of the step a run times: the training step, else the forward (a decoder's prefill)."""
    if estimate is None:
        return None
    return estimate.step_s if estimate.step_s is not None else estimate.forward_s


def per_s(count: float, seconds: float | None) -> float | None:
    """A rate from a predicted time (None without one)."""
    return count / seconds if seconds else None
