"""A continuous-batching scheduler as today's engines run it, stepped with the time model's per-step expected
times (:mod:`embedcalc.analysis.plan.steps`): latency under load for ``plan``.

The engine (vLLM's V1 scheduler, ``vllm/v1/core/sched/scheduler.py``; TensorRT-LLM's in-flight batching and
SGLang schedule the same way) runs one step after another. Each step, in this order:

1. **Decodes**: every running sequence advances one token (with speculative decoding, E tokens on average).
   Their KV slots are allocated first; when the KV blocks run out, the most recently admitted request is
   preempted (vLLM's default, recompute: its blocks are freed and it goes back to the front of the queue, to
   prefill its prompt and the tokens it had generated again) until the rest fit.
2. **Chunked prefill**: the token budget left (``max_num_batched_tokens`` less the decodes' tokens) goes to the
   prompts already admitted, oldest first, then to waiting requests in arrival order while fewer than
   ``max_num_seqs`` are admitted and the KV blocks hold the new prompt (admission by KV blocks; a request that
   does not fit waits: the queue for KV slots). A prompt may be split over steps; the step that computes its last
   chunk also samples its first token.
3. A request that arrives while a step runs waits for that step to end (an idle engine starts it at once).

KV is counted in tokens against the blocks' capacity: a request holds its whole prompt from admission and one
more token per generated token, plus half a block of rounding on average ((block − 1) / 2 tokens). That is
``kv_admission="on-demand"`` (vLLM: blocks as the tokens come, preemption when they run out); ``"reserve"`` admits a
request only when its whole prompt and output fit, and never preempts (TensorRT-LLM's default
GUARANTEED_NO_EVICT capacity scheduler; SGLang reserves the same way).

**Loads.** Closed loop (``concurrency`` C, as benchmark clients such as vLLM's ``benchmark_serving``, genai-perf and
AIPerf run it): each finished request is replaced by a new one at once. The clients start together, as those clients
do (AIPerf given only ``--concurrency`` runs CONCURRENCY_BURST, ``aiperf/common/config/user_config.py``, which
issues the first C requests at once, ``aiperf/timing/request_rate_strategy.py``; ``benchmark_serving
--max-concurrency`` sends every request through a semaphore of C), and the first C requests (that burst) are not
measured, the next max(C, 200) are. The burst is not a transient that passes: the benchmarks fix every request's
input and output lengths (``ignore_eos``), so the requests admitted in one step run the same steps, finish in the
same step and are replaced together, and their successors again share their prefill step. The clients stay in such
cohorts (split only where the token budget splits an admission), and a request's first token waits for the prefill
of its whole cohort: at 25 users of 1000 in / 1000 out on Llama-3.1-8B fp8 (H100, NIM), TTFT is 268 ms published for
a 19 ms solo prefill. A closed loop of more than twice what can run at once (max_num_seqs, or the full sequences the
KV blocks hold) is saturated: it is simulated at twice that, and its requests wait in the FIFO queue longer by what
Little's law adds (latency = C / requests per second), each the same. Open loop (``rate``): Poisson arrivals from a
seeded generator (the same numbers on every run); the first tenth is not measured.

**Figures** over the measured requests: TTFT (arrival to first token), TPOT ((last token − first token) /
(G − 1), as vLLM's benchmark defines it), end-to-end latency — each as the mean and p50/p90/p99 (linear
interpolation) — and output tokens/s over the measured window. Cost: one Python step per engine step that
admits or prefills, and one per completion or arrival otherwise (runs of identical decode steps are jumped).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field, replace

from embedcalc.analysis.plan.engine import Engine, Load, Spread
from embedcalc.analysis.plan.steps import StepCost

BURST_MEASURED = 200  # closed loop: at least this many requests measured after the clients' first burst
OPEN_REQUESTS = 400  # open loop: Poisson arrivals simulated (the first tenth not measured)


@dataclass(eq=False, slots=True)
class _Request:
    index: int
    arrival: float
    left: int  # prompt tokens still to compute
    done: float = 0.0  # output tokens produced before it last started decoding
    first: float = -1.0
    admitted: float = -1.0
    start: int = -1  # the decode clock when it last started decoding (-1: not decoding)
    finish: int = -1  # the decode clock at which it has produced every token
    end: float = -1.0


@dataclass
class _State:
    cost: StepCost
    engine: Engine
    prompt: int
    gen: int
    kv_tokens: float  # capacity in tokens (inf: unbounded)
    now: float = 0.0
    clock: int = 0  # decode steps run
    steps: int = 0
    used: float = 0.0  # KV tokens held, with the blocks' rounding
    output: float = 0.0  # output tokens produced
    busy_running: float = 0.0  # Σ decodes × step seconds
    preemptions: int = 0
    waiting: deque[_Request] = field(default_factory=deque)
    admitted: dict[int, _Request] = field(default_factory=dict)  # in admission order
    prefilling: list[_Request] = field(default_factory=list)
    heap: list[tuple[int, int]] = field(default_factory=list)  # (finish clock, index)
    decoding: int = 0
    # constants of the run, read on every step (attributes, not properties: the loop's cost is per step)
    waste: float = field(init=False)  # the blocks' rounding per request
    per: float = field(init=False)  # tokens a sequence advances per step
    reserve: bool = field(init=False)  # kv_admission "reserve"

    def __post_init__(self) -> None:
        self.waste = (self.engine.block_tokens - 1) / 2
        self.per = self.cost.tokens_per_step
        self.reserve = self.engine.kv_admission == "reserve"

    def holding(self, r: _Request) -> float:
        """KV tokens ``r`` holds now (reserve: its whole prompt and output from admission)."""
        return self.prompt + (self.gen if self.reserve else self.produced(r)) + self.waste

    def produced(self, r: _Request) -> float:
        """Output tokens ``r`` has produced by now."""
        return r.done + (self.clock - r.start) * self.per if r.start >= 0 else r.done

    def room(self, tokens: float) -> bool:
        return self.used + tokens <= self.kv_tokens

    def preempt(self) -> None:
        """Free the most recently admitted request; it recomputes its prompt and output on re-admission."""
        index = next(reversed(self.admitted))
        r = self.admitted.pop(index)
        produced = self.produced(r)
        self.used -= self.holding(r)
        if r.start >= 0:
            self.decoding -= 1
        else:
            self.prefilling.remove(r)
        r.done, r.start, r.finish = min(produced, self.gen - 1), -1, -1
        r.left = self.cost.prompt_tokens + round(r.done)
        self.waiting.appendleft(r)
        self.preemptions += 1

    def admit(self, budget: int, chunks: list[tuple[_Request, int]]) -> int:
        """Waiting requests in order while the budget, the sequence limit and the KV blocks allow; returns the
        budget left."""
        waiting, admitted, most = self.waiting, self.admitted, self.engine.max_num_seqs  # locals: per step
        while waiting and budget > 0 and len(admitted) < most:
            r = waiting[0]
            need = self.prompt + (self.gen if self.reserve else r.done) + self.waste
            if not self.room(need) and admitted:
                break  # waits for KV blocks (an empty engine admits it anyway: it cannot wait for anyone)
            waiting.popleft()
            if r.admitted < 0:
                r.admitted = self.now
            self.used += need
            admitted[r.index] = r
            self.prefilling.append(r)
            take = min(r.left, budget)
            chunks.append((r, take))
            budget -= take
        return budget

    def step(self) -> list[_Request]:
        """One engine step (module docstring); returns the requests that finished in it."""
        # the KV blocks' rounding is counted as half a block per request on average, so a lone request may appear to
        # outgrow a capacity of exactly one full sequence: the capacity is what holds it (the memory model sized it),
        # so the last request admitted is never preempted (preempting it would recompute it forever)
        while (
            self.decoding
            and not self.reserve
            and not self.room(self.decoding * self.per)
            and len(self.admitted) > 1
        ):
            self.preempt()
        decodes = self.decoding
        spec = self.cost.speculation
        per_decode = 1 + (spec.draft_tokens if spec else 0)  # a decode and its drafts to verify
        budget = first = self.engine.max_num_batched_tokens - decodes * per_decode
        chunks: list[tuple[_Request, int]] = []
        for r in self.prefilling:
            if budget <= 0:
                break
            take = min(r.left, budget)
            chunks.append((r, take))
            budget -= take
        left = self.admit(budget, chunks)
        dt = self.cost.step(decodes, first - left)  # the chunks' tokens: what they took of the budget
        self.now += dt
        self.steps += 1
        if decodes:
            self._advance(1, dt)
        return self._settle(chunks)

    def _advance(self, k: int, dt: float) -> None:
        self.clock += k
        self.busy_running += self.decoding * k * dt
        self.used += 0 if self.reserve else self.decoding * self.per * k
        self.output += self.decoding * self.per * k

    def run(self, k: int) -> list[_Request]:
        """``k`` decode-only steps at once (each takes the same time)."""
        dt = self.cost.step(self.decoding, 0)
        self.now += k * dt
        self.steps += k
        self._advance(k, dt)
        return self._settle([])

    def _settle(self, chunks: list[tuple[_Request, int]]) -> list[_Request]:
        clock, heap, admitted = self.clock, self.heap, self.admitted  # locals: read per request
        for r, take in chunks:
            r.left -= take
            if r.left > 0:
                continue
            self.prefilling.remove(r)
            if r.first < 0:
                r.first = self.now
                r.done += 1
                self.output += 1
                self.used += 0 if self.reserve else 1
            r.start = clock
            r.finish = clock + max(0, math.ceil((self.gen - r.done) / self.per))
            self.decoding += 1
            heapq.heappush(heap, (r.finish, r.index))
        out = []
        while heap and heap[0][0] <= clock:
            finish, index = heapq.heappop(heap)
            held = admitted.get(index)
            if held is None or held.finish != finish:
                continue  # preempted since
            del admitted[index]
            self.decoding -= 1
            self.used -= self.holding(held)
            held.end, held.finish = self.now, -2
            out.append(held)
        return out

    def decode_run(self, next_arrival: float) -> int:
        """How many identical decode-only steps can run at once: none prefilling or admissible, up to the next
        completion, arrival or KV exhaustion."""
        if self.prefilling or not self.decoding or not self.heap:
            return 1
        if (
            self.waiting
            and len(self.admitted) < self.engine.max_num_seqs
            and self.room(self.prompt + (self.gen if self.reserve else self.waiting[0].done) + self.waste)
        ):
            return 1
        k = self.heap[0][0] - self.clock
        dt = self.cost.step(self.decoding, 0)
        if math.isfinite(next_arrival):
            k = min(k, math.floor((next_arrival - self.now) / dt) + 1)
        if math.isfinite(self.kv_tokens) and not self.reserve:
            k = min(k, math.floor((self.kv_tokens - self.used) / (self.decoding * self.per)))
        return max(1, k)


# Scheduler iterations one simulation may take (issue 33). A healthy replica needs a few per request (decode runs
# are stepped many steps at a time); one whose KV cache cannot hold its batch preempts on every step and took
# ~100,000 iterations (~6 s) per layout: gpt3-175b over the catalogue with --max-devices 2^20 ran for minutes.
MAX_ITERATIONS = 20_000


def simulate(
    cost: StepCost,
    engine: Engine,
    prompt: int,
    gen: int,
    kv_tokens: float,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    seed: int = 0,
) -> Load:
    """Serve ``prompt``-token requests generating ``gen`` tokens each on one replica (module docstring) at
    ``concurrency`` in flight (closed loop) or ``rate`` requests/s (open loop); ``kv_tokens``: the KV cache's
    capacity in tokens."""
    most = _most_running(engine, prompt, gen, kv_tokens)
    if concurrency is not None and concurrency > SATURATED * most:
        return _saturated(simulate(cost, engine, prompt, gen, kv_tokens, concurrency=SATURATED * most, seed=seed),
                          concurrency)  # fmt: skip
    s = _State(cost, engine, prompt, max(gen, 1), kv_tokens)
    arrivals: deque[_Request] = deque()
    if concurrency is not None:
        warm, measured = concurrency, max(concurrency, BURST_MEASURED)
        # the clients' first requests at once (module docstring: the benchmark clients' burst)
        arrivals.extend(_Request(i, 0.0, cost.prompt_tokens) for i in range(concurrency))
    else:
        assert rate is not None and rate > 0
        rng = random.Random(seed)
        t, warm = 0.0, OPEN_REQUESTS // 10
        measured = OPEN_REQUESTS - warm
        for i in range(OPEN_REQUESTS + warm):  # a tail beyond the measured keeps the load on to the end
            t += rng.expovariate(rate)
            arrivals.append(_Request(i, t, cost.prompt_tokens))
    issued, last = len(arrivals), warm + measured
    window: list[float] = []  # the first measured arrival's time and the output tokens by then
    done: list[_Request] = []
    overload = 20 * engine.max_num_seqs + 4 * last
    for _ in range(MAX_ITERATIONS):  # bounded (issue 33): a replica preempting every step is not sustained
        if len(done) >= measured:
            break
        idle = not s.admitted
        if idle and not s.waiting and arrivals:
            s.now = max(s.now, arrivals[0].arrival)
        while arrivals and (arrivals[0].arrival < s.now or (idle and arrivals[0].arrival <= s.now)):
            r = arrivals.popleft()
            s.waiting.append(r)
            if r.index == warm:
                window = [r.arrival, s.output]
        if not s.admitted and not s.waiting:
            if not arrivals:
                break
            continue
        if len(s.waiting) > overload:
            return _result(s, done, window, sustained=False)
        k = s.decode_run(arrivals[0].arrival if arrivals else math.inf)
        for r in s.run(k) if k > 1 else s.step():
            if warm <= r.index < last:
                done.append(r)
            if concurrency is not None and issued < last + concurrency:  # closed loop: replaced at once
                arrivals.append(_Request(issued, s.now, cost.prompt_tokens))
                issued += 1
    else:
        return _result(s, done, window, sustained=False)
    return _result(s, done, window, sustained=True)


SATURATED = (
    2  # a closed loop beyond this many times what can run is simulated at it, its queue by Little's law
)


def _most_running(engine: Engine, prompt: int, gen: int, kv_tokens: float) -> int:
    """The most sequences the engine can run at once: max_num_seqs, and the KV blocks holding full sequences."""
    if not math.isfinite(kv_tokens):
        return engine.max_num_seqs
    return max(1, min(engine.max_num_seqs, int(kv_tokens // (prompt + max(gen, 1) + engine.block_tokens))))


def _saturated(load: Load, concurrency: int) -> Load:
    """A saturated closed loop at ``concurrency``: the same running batch and throughput as the load simulated
    (already saturated), every request waiting longer in the FIFO queue by what Little's law adds (latency =
    concurrency / requests per second)."""
    if load.requests_per_s <= 0:
        return replace(load, sustained=False)
    extra = max(0.0, concurrency / load.requests_per_s - load.e2e.mean)

    def later(x: Spread) -> Spread:
        return Spread(x.mean + extra, x.p50 + extra, x.p90 + extra, x.p99 + extra)

    return replace(
        load, ttft=later(load.ttft), e2e=later(load.e2e), mean_kv_wait_s=load.mean_kv_wait_s + extra
    )


def _result(s: _State, done: list[_Request], window: list[float], sustained: bool) -> Load:
    ttft = [r.first - r.arrival for r in done]
    tpot = [(r.end - r.first) / (s.gen - 1) for r in done] if s.gen > 1 else [0.0]
    e2e = [r.end - r.arrival for r in done]
    wait = [r.admitted - r.arrival for r in done]
    span = s.now - window[0] if window else 0.0
    tokens = (s.output - window[1]) / span if span > 0 else 0.0
    requests = (
        tokens / s.gen
    )  # every request yields G tokens (counting the window's completions would miss the
    # unmeasured ones that finish in it)
    running = s.busy_running / s.now if s.now > 0 else 0.0
    return Load(Spread.of(ttft), Spread.of(tpot), Spread.of(e2e), tokens, requests, running,
                sum(wait) / len(wait) if wait else 0.0, s.preemptions, len(done), sustained, s.steps)  # fmt: skip
