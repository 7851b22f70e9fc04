"""What one engine step costs: the per-step expected times the serving scheduler (:mod:`.scheduler`) is stepped
with, all from the time model (:func:`~embedcalc.analysis.time.estimate.estimate_time`, ``analyze``'s call).

Conventions, stated once:

- **Decode step of n sequences**: T_d(n) = ``analyze``'s ``decode_s_per_token_mean`` at batch n (the mean over
  the KV lengths P+1 … P+G: in steady state the running sequences are spread over their generation). It is
  evaluated exactly at batch 1 and at the powers of two up to the most sequences a replica runs (only those a
  simulation reaches, each once), and interpolated linearly between (each component's time is the max of two
  affine functions of n, and the routed experts a batch reaches grow concavely: the interpolation is within a few
  per cent, tested; a grid of powers of four errs 11% on Mixtral). This grid is much of ``plan``'s cost (its
  traffic, the same on every device, is computed once per search: :mod:`embedcalc.analysis.memo`).
- **Prefill**: T_p(b) = ``analyze``'s ``prefill_s`` of b prompts in one batch, of the prompt tokens a prefix
  cache does not hold (``prefix_hit`` of them are held: ceil((1 − hit) · P) tokens are computed; vLLM's automatic
  prefix caching, SGLang's radix cache). A chunk of c of those tokens spans k = c / P_c prompts: within one prompt
  (k ≤ 1) it costs its share k · T_p(1); across several it costs T_p(k), the prompts batched in one pass that reads
  the weights once, evaluated exactly at the powers of two a simulation reaches and interpolated between, as the
  decode step is. (Charging k · T_p(1) instead counted one pass over the weights per prompt: a step prefilling 16
  prompts of 128 tokens on an H100 cost 16 weight reads, and TensorRT-LLM's maximum throughput at 128 in / 128
  out came out half the published figure.)
- **A mixed step** (Sarathi-Serve, Agrawal et al. 2024, §4: chunked prefills ride along with the decodes) of n
  decodes and c prompt tokens reads the weights once: T(n, c) = T_d(n) + max(0, share(c) − T_d(1)), i.e. the
  decode step plus the chunk's prefill less the one pass over the weights and the launch overheads the chunk
  would have paid alone (T_d(1)); T(0, c) = max(share(c), T_d(1)).
- **Speculative decoding** (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
  §3.1; DeepSeek-V3's multi-token prediction, EAGLE): k draft tokens per step, each accepted with probability α,
  give E = (1 − α^(k+1)) / (1 − α) tokens per sequence per step; the step verifies n · k extra tokens (costed as
  prompt tokens that ride with the decodes, as above: they attend to the cache like a chunk does) and runs the
  draft k times at ``draft_cost`` × T_d(n) each (default one layer of the target's: an MTP module or an EAGLE
  head is one decoder layer).
- **The engine's host work per step** (``host_s``, added to every step): between two forwards the engine's CPU
  gathers the sampled tokens, turns them into the requests' outputs (detokenization, the streamed responses) and
  schedules the next step, while the GPU waits. The time model's T_d is a bare generation loop's (calibrated on
  gpt-fast, which has no scheduler and no output processing); a serving engine adds this. Default
  :data:`HOST_STEP_S` = 0.2 ms, vLLM's measurement of that output processing at batch 1 (Llama-3-70B fp8, 4 × H100:
  ``_process_model_outputs`` 0.2 ms per step; github.com/vllm-project/vllm issue #6913, the RFC of the asynchronous
  output processor). Its per-sequence growth (3.4 ms at batch 32 in the same table) is not charged: engines now
  overlap it with the next forward (vLLM's asynchronous output processor since v0.6, TensorRT-LLM's executor), and
  charging it, even overlapped, made NIM's 8B throughput at 100–250 users 1.3–1.5× too low.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

# how an engine admits a request against its KV blocks (plan's --kv-admission; the scheduler reads it): a leaf
# here, so that the CLI's options need not import the scheduler (and numpy) to build --help
KvAdmission = Literal["on-demand", "reserve"]
HOST_STEP_S = 2e-4  # the engine's host work per step (module docstring; vLLM issue #6913, batch 1)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding's inputs: draft tokens per step, per-token acceptance, the draft's cost per token as a
    fraction of the target's decode step (module docstring)."""

    draft_tokens: int
    acceptance: float
    draft_cost: float

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence advances per step: (1 − α^(k+1)) / (1 − α) (Leviathan et al. 2023, eq. 1)."""
        a, k = self.acceptance, self.draft_tokens
        return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)

    def to_json(self) -> dict[str, Any]:
        return {"draft_tokens": self.draft_tokens, "acceptance": self.acceptance, "draft_cost": self.draft_cost,
                "tokens_per_step": self.tokens_per_step}  # fmt: skip


def batch_grid(most: int) -> list[int]:
    """1, 2, 4, … and ``most``: where T_d is evaluated exactly."""
    out, n = [], 1
    while n < most:
        out.append(n)
        n *= 2
    return [*out, max(most, 1)]


@dataclass(frozen=True)
class StepCost:
    """One replica's step times (module docstring): T_d evaluated exactly at the grid's batches as they are first
    needed (and kept), interpolated between; T_p of the computed prompt."""

    source: Callable[[int], float]  # T_d(n): the time model's decode step
    most: int  # the grid's last batch: the most sequences the engine runs
    prefill_s: float  # T_p(1) of the computed prompt tokens (after the prefix cache)
    prompt_tokens: int  # P_c: the prompt tokens computed
    speculation: Speculation | None = None
    host_s: float = 0.0  # the engine's host work per step (module docstring)
    batched: Callable[[int], float] | None = None  # T_p(b): b prompts in one pass; None: b · T_p(1)
    cache: dict[int, float] = field(default_factory=dict, compare=False, repr=False)
    prefills: dict[int, float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls, decode: Callable[[int], float], prefill_s: float, prompt_tokens: int, most: int,
        speculation: Speculation | None = None, host_s: float = 0.0, batched: Callable[[int], float] | None = None,
    ) -> StepCost:  # fmt: skip
        return cls(decode, max(most, 1), prefill_s, max(prompt_tokens, 1), speculation, host_s, batched)

    def exact(self, n: int) -> float:
        """T_d(n) from the time model (computed once)."""
        if n not in self.cache:
            self.cache[n] = self.source(n)
        return self.cache[n]

    def decode(self, n: int) -> float:
        """T_d(n), interpolated between the grid's batches (beyond ``most``: along the last segment)."""
        if n <= 1 or self.most == 1:
            return self.exact(1) if n <= 1 else self.exact(1) * n
        lo = 1 << ((min(n, self.most) - 1).bit_length() - 1)  # the largest power of two below min(n, most)
        hi = min(2 * lo, self.most)
        return self.exact(n) if n in (lo, hi) else _between(self.exact, n, lo, hi)

    def _prefill(self, b: int) -> float:
        """T_p(b) from the time model (computed once; b = 1 is ``prefill_s``)."""
        if b == 1 or self.batched is None:
            return self.prefill_s * b
        if b not in self.prefills:
            self.prefills[b] = self.batched(b)
        return self.prefills[b]

    def share(self, tokens: int) -> float:
        """A chunk of ``tokens`` prompt tokens (module docstring): k · T_p(1) within one prompt, T_p(k) across
        k prompts, interpolated between the powers of two."""
        k = tokens / self.prompt_tokens
        if k <= 1 or self.batched is None:
            return self.prefill_s * k
        lo = 1 << (int(k).bit_length() - 1)  # the largest power of two at most k
        return self._prefill(lo) if k == lo else _between(self._prefill, k, lo, 2 * lo)

    def step(self, decodes: int, prompt_tokens: int) -> float:
        """Seconds of one engine step running ``decodes`` sequences and ``prompt_tokens`` tokens of prefill, the
        engine's host work included."""
        spec = self.speculation
        extra = 0.0
        if spec is not None and decodes:  # verify n·k drafts beside the decodes; the draft runs k times
            prompt_tokens += decodes * spec.draft_tokens
            extra = spec.draft_tokens * spec.draft_cost * self.decode(decodes)
        one = self.exact(1)
        if decodes == 0:
            return max(self.share(prompt_tokens), one) + self.host_s
        return self.decode(decodes) + max(0.0, self.share(prompt_tokens) - one) + extra + self.host_s

    @property
    def tokens_per_step(self) -> float:
        return 1.0 if self.speculation is None else self.speculation.tokens_per_step


def _between(at: Callable[[int], float], x: float, lo: int, hi: int) -> float:
    """``at`` at ``x``, linear between its exact values at the grid points ``lo`` and ``hi``."""
    a = at(lo)
    return a + (at(hi) - a) * (x - lo) / (hi - lo)


def computed_prompt(prompt: int, prefix_hit: float) -> int:
    """Prompt tokens a prefill computes when ``prefix_hit`` of them are in the prefix cache (at least one: the
    last token's logits are always computed)."""
    return max(1, math.ceil(prompt * (1 - prefix_hit)))
