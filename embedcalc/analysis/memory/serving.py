"""Serving memory as inference servers hold it (vLLM, SGLang, TensorRT-LLM): per device, the weights, an activation
workspace, a KV cache in fixed-size blocks for every sequence in flight, and a runtime reserve left to the rest of
the process. Used by ``analyze --mode inference`` (``--memory-utilization``, ``--concurrency``) and by ``plan``.

Conventions, stated once (vLLM's engine arguments, https://docs.vllm.ai/en/latest/models/engine_args.html):

- **Runtime reserve**: a server uses ``memory_utilization`` of the device (vLLM's ``gpu_memory_utilization``,
  default 0.9); the rest (CUDA context, NCCL buffers, CUDA graphs, fragmentation) is reserved. Usable bytes =
  floor(utilization × device memory).
- **Paged KV cache**: each sequence's cache is allocated in blocks of ``block_tokens`` tokens (vLLM's
  ``--block-size``, default 16), so a sequence of P prompt + G generated tokens holds ceil((P + G) / 16) × 16
  tokens of cache; the rounding is a row of its own. KV bytes per token are :func:`estimate_memory`'s (windowed
  layers capped at their window, MLA's latent, the KV dtype); an encoder-decoder's cross-attention cache of the
  source is not rounded.
- **Activation workspace**: the peak activations of the largest forward the scheduler runs: one prompt of P tokens
  (prefills are admitted one at a time), or one decode step of the C running sequences (C tokens); with SDPA the
  activations depend only on the tokens in the forward, so it is :func:`estimate_memory`'s activations of one
  sequence of max(P, C) tokens (decoders; an encoder-decoder's of one prompt). Logits: the prompt samples its last
  position (the workload's ``logits``), a decode step every one of its C positions.
- **Recurrent state** (Mamba-2 and the other recurrent mixers): each sequence in flight holds its state, constant
  in the context and not paged (:func:`estimate_memory`'s ``recurrent_state_bytes`` of one sequence).
- With pipeline parallelism every term is per stage and the heaviest stage decides (as in ``analyze``); the most
  sequences that fit is the smallest over the stages.

Everything is computed by :func:`~embedcalc.analysis.memory.estimate_memory` (and the KV dtype of
:func:`~embedcalc.analysis.memory.capacity_search.with_kv_dtype`): no second formula.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from embedcalc.analysis.memo import Memo, kept
from embedcalc.analysis.memory.capacity_search import largest, with_kv_dtype
from embedcalc.analysis.memory.estimate import MemoryEstimate, estimate_memory
from embedcalc.analysis.workload import Workload
from embedcalc.config.resolved import ResolvedShape

BLOCK_TOKENS = 16  # vLLM's default --block-size
DEFAULT_UTILIZATION = 0.9  # vLLM's default --gpu-memory-utilization


@dataclass(frozen=True)
class ServingStage:
    """One pipeline stage's device: weights, workspace, and KV bytes of one sequence (exact and in blocks)."""

    index: int
    weights_bytes: int
    workspace_bytes: int
    kv_per_sequence_bytes: int
    paged_kv_per_sequence_bytes: int
    state_per_sequence_bytes: int = 0  # a recurrent mixer's state (Mamba-2): constant in the context

    @property
    def per_sequence_bytes(self) -> int:
        """What one more sequence in flight holds: its KV blocks and its recurrent state."""
        return self.paged_kv_per_sequence_bytes + self.state_per_sequence_bytes

    def total_bytes(self, concurrency: int) -> int:
        return self.weights_bytes + self.workspace_bytes + concurrency * self.per_sequence_bytes

    def to_json(self, concurrency: int) -> dict[str, int]:
        return {"stage": self.index, "weights_bytes": self.weights_bytes, "workspace_bytes": self.workspace_bytes,
                "kv_per_sequence_bytes": self.kv_per_sequence_bytes,
                "paged_kv_per_sequence_bytes": self.paged_kv_per_sequence_bytes,
                "state_per_sequence_bytes": self.state_per_sequence_bytes,
                "total_bytes": self.total_bytes(concurrency)}  # fmt: skip


@dataclass(frozen=True)
class ServingMemory:
    """Per-device serving memory for ``concurrency`` sequences in flight (the heaviest stage's device), judged
    against ``utilization`` × ``device_bytes`` when a device (or a memory limit) is known."""

    concurrency: int
    block_tokens: int
    tokens_per_sequence: int
    paged_tokens_per_sequence: int
    weights_bytes: int
    workspace_bytes: int
    kv_cache_bytes: int  # concurrency × exact KV of one sequence
    kv_paging_bytes: int  # the blocks' rounding on top of it
    recurrent_state_bytes: int  # concurrency × a recurrent mixer's state of one sequence (Mamba-2; else 0)
    device_bytes: int | None
    utilization: float | None
    max_concurrency: int | None  # None: no limit known, or nothing cached per sequence
    stages: tuple[ServingStage, ...]

    @property
    def paged_kv_per_sequence_bytes(self) -> int:
        """One sequence's KV cache in whole blocks, on the heaviest stage's device."""
        return max((s.paged_kv_per_sequence_bytes for s in self.stages), default=0)

    @property
    def used_bytes(self) -> int:
        """What the server holds: weights + workspace + the paged KV cache + the recurrent states."""
        return (self.weights_bytes + self.workspace_bytes + self.kv_cache_bytes + self.kv_paging_bytes
                + self.recurrent_state_bytes)  # fmt: skip

    @property
    def usable_bytes(self) -> int | None:
        """floor(utilization × device memory): what the server may use."""
        if self.device_bytes is None:
            return None
        return int(self.device_bytes * (self.utilization if self.utilization is not None else 1.0))

    @property
    def reserve_bytes(self) -> int:
        """The runtime reserve: device memory the server leaves to the rest of the process."""
        usable = self.usable_bytes
        return 0 if usable is None or self.device_bytes is None else self.device_bytes - usable

    @property
    def total_bytes(self) -> int:
        """used + reserve: what the device must have."""
        return self.used_bytes + self.reserve_bytes

    @property
    def fits(self) -> bool | None:
        usable = self.usable_bytes
        return None if usable is None else self.used_bytes <= usable

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency, "block_tokens": self.block_tokens,
            "tokens_per_sequence": self.tokens_per_sequence,
            "paged_tokens_per_sequence": self.paged_tokens_per_sequence,
            "weights_bytes": self.weights_bytes, "workspace_bytes": self.workspace_bytes,
            "kv_cache_bytes": self.kv_cache_bytes, "kv_paging_bytes": self.kv_paging_bytes,
            "paged_kv_per_sequence_bytes": self.paged_kv_per_sequence_bytes,
            "recurrent_state_bytes": self.recurrent_state_bytes,
            "reserve_bytes": self.reserve_bytes, "used_bytes": self.used_bytes, "total_bytes": self.total_bytes,
            "device_bytes": self.device_bytes, "utilization": self.utilization, "usable_bytes": self.usable_bytes,
            "fits": self.fits, "max_concurrency": self.max_concurrency,
            **({"stages": [s.to_json(self.concurrency) for s in self.stages]} if len(self.stages) > 1 else {}),
        }  # fmt: skip


def _cached_tokens(config: ResolvedShape, w: Workload) -> int:
    """Tokens of one sequence's self-attention cache: the decoder's prompt plus the generated tokens."""
    return (w.seq_len if config.architecture == "decoder" else w.decoder_len) + w.gen_tokens


def paged_tokens(tokens: int, block_tokens: int = BLOCK_TOKENS) -> int:
    """``tokens`` rounded up to whole blocks (vLLM's PagedAttention, Kwon et al. 2023, §4.1)."""
    return -(-tokens // block_tokens) * block_tokens


def _memory(config: ResolvedShape, w: Workload, kv_dtype: str | None, memo: Memo | None) -> MemoryEstimate:
    """The memory estimate of ``w`` with its KV cache in ``kv_dtype`` (``memo``'s, where it has it already)."""
    return kept(
        memo, config, ("memory", w, kv_dtype), lambda: with_kv_dtype(estimate_memory(config, w), w, kv_dtype)
    )


def _workspace(
    config: ResolvedShape, w: Workload, concurrency: int, kv_dtype: str | None, memo: Memo | None = None
) -> list[int]:
    """Per stage: the activations of the largest forward (module docstring)."""
    if config.architecture == "decoder" and concurrency > w.seq_len:
        # one decode step of every sequence in flight: each samples its one new position
        w = replace(w, seq_len=concurrency, logits="all")
    one = replace(w, batch_size=1, gen_tokens=0)
    return [s.activations_bytes for s in _memory(config, one, kv_dtype, memo).stages]


def serving_stages(
    config: ResolvedShape,
    w: Workload,
    concurrency: int,
    kv_dtype: str | None,
    block_tokens: int = BLOCK_TOKENS,
    memo: Memo | None = None,
) -> tuple[ServingStage, ...]:
    """Every pipeline stage's serving terms for one sequence of ``w`` (its batch size is ignored); ``memo``: the
    memory estimates kept by a caller that asks for the same workloads again (:mod:`embedcalc.analysis.memo`)."""
    one = replace(w, batch_size=1)
    exact = _memory(config, one, kv_dtype, memo).stages
    extra = paged_tokens(_cached_tokens(config, w), block_tokens) - _cached_tokens(config, w)
    if config.architecture != "encoder" and extra:
        paged = _memory(config, replace(one, gen_tokens=w.gen_tokens + extra), kv_dtype, memo).stages
    else:
        paged = exact
    workspace = _workspace(config, w, concurrency, kv_dtype, memo)
    return tuple(
        ServingStage(
            e.index, e.weights_bytes, ws, e.kv_cache_bytes, p.kv_cache_bytes, e.recurrent_state_bytes
        )
        for e, p, ws in zip(exact, paged, workspace, strict=True)
    )


def max_concurrency(
    config: ResolvedShape,
    w: Workload,
    usable_bytes: int,
    kv_dtype: str | None,
    block_tokens: int = BLOCK_TOKENS,
    base: tuple[ServingStage, ...] | None = None,
    memo: Memo | None = None,
) -> int | None:
    """The most sequences of ``w`` in flight whose serving memory fits ``usable_bytes`` on every stage's device:
    0 when not even the weights and one prompt's workspace fit; None when nothing is cached per sequence.
    ``base``: :func:`serving_stages` of one sequence, when already computed."""
    base = base or serving_stages(config, w, 1, kv_dtype, block_tokens, memo)
    if any(s.total_bytes(0) > usable_bytes for s in base):
        return 0
    per = [s for s in base if s.per_sequence_bytes]
    if not per:
        return None
    # an upper bound: the workspace only grows with the concurrency
    hi = min((usable_bytes - s.weights_bytes - s.workspace_bytes) // s.per_sequence_bytes for s in per)
    if hi < 1 or config.architecture != "decoder" or hi <= w.seq_len:
        return max(hi, 0)

    def fits(c: int) -> bool:  # only the workspace changes with c
        workspace = _workspace(config, w, c, kv_dtype, memo)
        return all(s.weights_bytes + ws + c * s.per_sequence_bytes <= usable_bytes
                   for s, ws in zip(base, workspace, strict=True))  # fmt: skip

    # fits(seq_len) holds (the check above); with SDPA the workspace grows in proportion to the tokens of the
    # forward: start the search where that puts it
    guess = min(
        (usable_bytes - s.weights_bytes) * w.seq_len // (s.workspace_bytes + w.seq_len * s.per_sequence_bytes)
        for s in per
    )
    guess = min(max(guess, w.seq_len), hi)
    if fits(guess) and (guess == hi or not fits(guess + 1)):
        return guess
    return largest(fits, w.seq_len, hi)


def serving_memory(
    config: ResolvedShape,
    w: Workload,
    concurrency: int,
    device_bytes: int | None = None,
    utilization: float | None = None,
    kv_dtype: str | None = None,
    block_tokens: int = BLOCK_TOKENS,
    most: int | None = -1,
    memo: Memo | None = None,
) -> ServingMemory:
    """Serving memory of ``concurrency`` sequences of ``w`` per device (module docstring), against
    ``utilization`` × ``device_bytes`` when ``device_bytes`` is given; ``most``: the :func:`max_concurrency`
    already computed for that limit (-1: compute it)."""
    base = serving_stages(config, w, 1, kv_dtype, block_tokens, memo)
    same = config.architecture != "decoder" or concurrency <= w.seq_len  # the workspace is one prompt's
    stages = base if same else serving_stages(config, w, concurrency, kv_dtype, block_tokens, memo)
    heaviest = max(stages, key=lambda s: s.total_bytes(concurrency))
    usable = None if device_bytes is None else int(device_bytes * (utilization or 1.0))
    if most == -1:
        most = (
            None if usable is None else max_concurrency(config, w, usable, kv_dtype, block_tokens, base, memo)
        )
    tokens = _cached_tokens(config, w) if config.architecture != "encoder" else 0
    return ServingMemory(
        concurrency=concurrency, block_tokens=block_tokens, tokens_per_sequence=tokens,
        paged_tokens_per_sequence=paged_tokens(tokens, block_tokens) if tokens else 0,
        weights_bytes=heaviest.weights_bytes, workspace_bytes=heaviest.workspace_bytes,
        kv_cache_bytes=concurrency * heaviest.kv_per_sequence_bytes,
        kv_paging_bytes=concurrency * (heaviest.paged_kv_per_sequence_bytes - heaviest.kv_per_sequence_bytes),
        recurrent_state_bytes=concurrency * heaviest.state_per_sequence_bytes,
        device_bytes=device_bytes, utilization=utilization,
        max_concurrency=most,
        stages=stages,
    )  # fmt: skip
