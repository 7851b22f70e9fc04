"""Kernels as the eager model launches them (issue 35, item 7): the count made on the meta device equals what
torch's profiler lists without a parent on a real CPU run of the same steps, and ``--hardware local`` charges the
per-kernel overhead on that count. No speed is asserted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from embedcalc.analysis.time.estimate import TimeRequest, estimate_time  # noqa: E402
from embedcalc.analysis.time.model import Launches, kernels_per_forward  # noqa: E402
from embedcalc.analysis.workload import Parallelism, Workload  # noqa: E402
from embedcalc.api.timing import local_launches  # noqa: E402
from embedcalc.devices.figures import LatencyFigure  # noqa: E402
from embedcalc.devices.resolve import load_device  # noqa: E402
from embedcalc.modeling.benchmark import miniature  # noqa: E402
from embedcalc.modeling.fusion import fuse_projections  # noqa: E402
from embedcalc.modeling.generate import allocate_cache  # noqa: E402
from embedcalc.modeling.launches import eager_launches  # noqa: E402
from embedcalc.modeling.model import build_model  # noqa: E402
from embedcalc.modeling.steps import make_inputs  # noqa: E402
from embedcalc.sources.loading import load_target  # noqa: E402

pytestmark = [pytest.mark.torch]


def _profiled(step: Callable[[], Any]) -> tuple[int, Any]:
    """Operations torch's profiler records without a parent while ``step`` runs, and its result."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = step()
    return sum(event.cpu_parent is None for event in prof.events()), out


@pytest.mark.parametrize("name", ["gpt2", "llama-3.1-8b", "bert-base"])
def test_the_meta_count_is_the_profilers_on_a_real_run(name: str) -> None:
    config = miniature(load_target(name).config)
    batch, prompt = 2, 8
    counted = eager_launches(config, batch, prompt, "sdpa")
    assert counted is not None
    cpu = torch.device("cpu")
    model = build_model(config, "sdpa", cpu)
    fuse_projections(model)  # as bench builds it: QKV and gate/up fused
    ids, _ = make_inputs(config, batch, prompt, None, cpu)
    with torch.inference_mode():
        if config.architecture == "encoder":
            assert counted == (_profiled(lambda: model(ids))[0], 0)
            return
        cache = allocate_cache(model, batch, prompt + 1)
        prefill, logits = _profiled(
            lambda: model.decode_step(ids, cache, None, 1)[:, -1].argmax(dim=-1, keepdim=True)
        )
        decode, _ = _profiled(
            lambda: model.decode_step(logits, cache, None)[:, -1].argmax(dim=-1, keepdim=True)
        )
    assert counted == (prefill, decode)
    w = Workload(batch_size=batch, seq_len=prompt, gen_tokens=1)
    assert decode > kernels_per_forward(config, w, True)  # views, copies and unfused steps are launches too


def test_local_charges_the_overhead_on_the_eager_count() -> None:
    config = load_target("gpt2").config
    w = Workload(batch_size=1, seq_len=16, gen_tokens=4)
    device = load_device("a100-80gb")
    assert local_launches(config, w, device) is None  # a catalogue device: the fused stack's count
    local = device.model_copy(
        update={"name": "local", "kernel_overhead_s": LatencyFigure(value=5e-6, source="t")}
    )
    launches = local_launches(config, w, local)
    assert launches == Launches(*eager_launches(config, 1, 16, "sdpa"))  # type: ignore[misc]
    assert local_launches(config, Workload(seq_len=16, parallel=Parallelism(tp=2)), local) is None
    terms = estimate_time(config, w, TimeRequest(device=local, launches=launches)).terms()
    assert dict(terms["decode"])["kernel overhead"] == pytest.approx(launches.decode * 5e-6)
    assert dict(terms["prefill"])["kernel overhead"] == pytest.approx(launches.prefill * 5e-6)
