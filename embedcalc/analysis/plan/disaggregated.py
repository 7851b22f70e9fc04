"""Disaggregated prefill and decode (xPyD: DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024; NVIDIA
Dynamo, vLLM's and SGLang's P/D disaggregation): x replicas of a layout only prefill, y replicas only decode, the
prompt's KV cache moving from one to the other over the catalogue's links. Compared with aggregated serving of the
same layout under the same objectives; the row's layout says which it is (``xPyD × (TP t)``).

Conventions, stated once:

- **Decode pool**: each of the y workers runs the scheduler of :mod:`.scheduler` with decode steps only (a request
  arrives with its prompt's KV, joins the running batch at the next step and holds its whole prompt's KV from
  then on); the closed loop's C in flight are spread over the y workers (nearly all of a request's life is its
  decode), a rate over them evenly. Its first step yields the second token.
- **Prefill pool**: each of the x workers runs the scheduler with prompts only (chunked to the token budget, no
  decodes), fed the decode pool's request rate as Poisson arrivals (the completions of many independent clients);
  its TTFT is the request's TTFT (the prefill worker returns the first token, as vLLM's and Dynamo's P/D do).
- **KV transfer**: the prompt's KV cache per TP rank (``analyze``'s KV of one sequence at the prompt length), each
  rank sending its own shard at once, over the link a group of (x + y) replicas spans (NVLink/xGMI within a
  node's domain, the network beyond it: :func:`~embedcalc.analysis.time.comm.link_path`), one α–β transfer. It
  delays the second token: TPOT = (transfer + the decode pool's time from joining to the last token) / (G − 1).
- **Sizing**: the fewest decode workers whose TPOT meets ``--max-tpot`` and whose KV holds their share, then the
  fewest prefill workers that keep up with that rate (each busy at most ``PREFILL_BUSY`` = 90% of the time: an
  M/D/1 queue's wait grows as ρ / (1 − ρ)) and meet ``--max-ttft``, within the device budget. Only layouts of one
  TP × 1 PP group per worker; searched when a latency objective and a load are asked for.
"""

from __future__ import annotations

import math
from dataclasses import replace

from embedcalc.analysis.memory.serving import serving_memory
from embedcalc.analysis.plan.engine import Load
from embedcalc.analysis.plan.rows import Objectives, Price, ServingRow, ServingTimes
from embedcalc.analysis.plan.scheduler import simulate
from embedcalc.analysis.plan.serving import ServingRequest, Unit
from embedcalc.analysis.time.comm import link_path
from embedcalc.analysis.time.expected import device_constants
from embedcalc.devices.calibration import load_calibration

MAX_WORKERS = 16  # replicas searched per pool split (x + y)
PREFILL_BUSY = 0.9  # a prefill worker busy at most this fraction of the time (its queue grows as ρ / (1 − ρ))


def kv_transfer_s(u: Unit, replicas: int, kv_dtype: str | None) -> float:
    """Seconds to move one prompt's KV cache from a prefill to a decode replica (module docstring)."""
    memory = serving_memory(u.config, replace(u.w, gen_tokens=0), 1, kv_dtype=kv_dtype)
    per_rank = memory.kv_cache_bytes
    span = replicas * u.layout.replica_devices
    constants = device_constants(load_calibration().constants, u.device)
    path = link_path(u.device, span, constants)
    if path is None or per_rank == 0:
        return 0.0
    wire = per_rank / (path.bandwidth_bytes_per_s * constants.link_fraction)
    return constants.collective_base_s + path.hop_latency_s + wire


def _decode_load(u: Unit, request: ServingRequest, workers: int) -> Load | None:
    """One decode worker's load at its share (None: its KV does not hold the share)."""
    g = max(u.w.gen_tokens, 1)
    # the same decode steps (and their cache); no prefill on a decode worker
    cost = replace(u.cost, prefill_s=0.0, prompt_tokens=1, batched=None)
    if request.concurrency is not None:
        c = -(-request.concurrency // workers)
        if u.most is not None and c > u.most:
            return None
        return simulate(
            cost, u.engine, u.w.seq_len, max(g - 1, 1), u.kv_tokens, concurrency=c, seed=request.seed
        )
    assert request.rate is not None
    load = simulate(cost, u.engine, u.w.seq_len, max(g - 1, 1), u.kv_tokens, rate=request.rate / workers,
                    seed=request.seed)  # fmt: skip
    return load if load.sustained and load.requests_per_s >= 0.9 * request.rate / workers else None


def _prefill_load(u: Unit, request: ServingRequest, workers: int, rate: float) -> Load | None:
    """One prefill worker's load at ``rate`` / ``workers`` arrivals per second (None: it would be busy more than
    ``PREFILL_BUSY`` of the time, or cannot keep up)."""
    if rate / workers * u.cost.prefill_s > PREFILL_BUSY:
        return None
    load = simulate(u.cost, u.engine, u.w.seq_len, 1, u.kv_tokens, rate=rate / workers, seed=request.seed)
    return load if load.sustained and load.requests_per_s >= 0.9 * rate / workers else None


def _tpot_met(o: Objectives, load: Load | None, transfer: float, g: int) -> bool:
    if load is None:
        return False
    return o.max_tpot_s is None or _tpot(load, transfer, g) <= o.max_tpot_s


def _tpot(load: Load, transfer: float, g: int) -> float:
    if g <= 1:
        return 0.0
    return (transfer + load.e2e.mean) / (g - 1)


def disaggregated(u: Unit, request: ServingRequest, price: Price | None) -> ServingRow | None:
    """The cheapest xPyD split of ``u``'s layout that meets the objectives within the budget (module docstring);
    None when the budget holds fewer than two replicas or no split serves the load."""
    most = min(MAX_WORKERS, request.max_devices // u.layout.replica_devices)
    if most < 2 or u.ranks > 1 or u.layout.pp > 1:
        return None
    g = max(u.w.gen_tokens, 1)
    o = request.objectives
    transfer = kv_transfer_s(u, most, request.kv_dtype)
    y, decode = None, None
    for workers in range(1, most):  # the fewest decode workers that meet TPOT
        decode = _decode_load(u, request, workers)
        if _tpot_met(o, decode, transfer, g):
            y = workers
            break
    if y is None or decode is None:
        return None
    rate = decode.requests_per_s * y
    x, prefill = None, None
    for workers in range(1, most - y + 1):
        prefill = _prefill_load(u, request, workers, rate)
        if prefill is not None and (o.max_ttft_s is None or prefill.ttft.mean <= o.max_ttft_s):
            x = workers
            break
    if x is None or prefill is None:
        return None
    layout = replace(u.layout, disaggregated=(x, y))
    transfer = kv_transfer_s(u, x + y, request.kv_dtype)
    c = (
        -(-request.concurrency // y)
        if request.concurrency is not None
        else max(1, math.ceil(decode.mean_running))
    )
    tpot = _tpot(decode, transfer, g)
    total = (
        float(request.concurrency)
        if request.concurrency is not None
        else rate * (prefill.ttft.mean + tpot * g)
    )
    latency = prefill.ttft.mean + transfer + decode.e2e.mean
    times = ServingTimes(total, c, y, u.cost.prefill_s, u.decode(c), prefill.ttft.mean, tpot, rate * g, rate, latency,
                         decode, u.engine, transfer)  # fmt: skip
    memory = serving_memory(
        u.config, u.w, c, u.device.memory, request.utilization, request.kv_dtype, most=u.most
    )
    return ServingRow(layout, price, u.w.dtype, memory, u.most, times, tuple(o.misses(times)))
