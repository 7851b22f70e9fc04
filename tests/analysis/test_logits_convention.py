"""Inference memory holds the logits a server computes (issue 34): the last position of each sequence by default,
every position with ``logits="all"`` (scoring a text); training always every position."""

from __future__ import annotations

import embedcalc
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.workload import Workload


def _activations(target: str, **workload: object) -> int:
    return int(embedcalc.analyze(target, **workload).memory.activations_bytes)  # type: ignore[arg-type]


def test_scoring_holds_every_positions_logits_and_serving_one_per_sequence() -> None:
    """llama-3.1-70b (d 8,192, vocab 128,256, bf16) at 131,072 tokens: the LM head's input and logits of every
    position are 131,072 x (8,192 + 128,256) x 2 bytes = 35.8 GB; a server samples one position per sequence."""
    n, d, vocab = 131_072, 8_192, 128_256
    config = embedcalc.load("llama-3.1-70b").config
    every = estimate_memory(config, Workload(seq_len=n, dtype="bf16", logits="all"))
    last = estimate_memory(config, Workload(seq_len=n, dtype="bf16"))
    assert every.activations_bytes == n * (d + vocab) * 2 == 35_769_024_512
    assert last.activations_bytes < every.activations_bytes  # the FFN's intermediates are now the peak
    assert last.activations_bytes == _activations("llama-3.1-70b", seq_len=n)
    assert last.kv_cache_bytes == every.kv_cache_bytes and last.weights_bytes == every.weights_bytes


def test_one_sequence_of_a_short_prompt_peaks_elsewhere_than_the_logits() -> None:
    """gpt2 at 128 tokens (fp32): all positions' logits, 128 x (768 + 50,257) x 4 bytes, were the peak."""
    assert _activations("gpt2", logits="all") == 128 * (768 + 50_257) * 4
    assert _activations("gpt2") < 128 * (768 + 50_257) * 4


def test_training_always_holds_every_positions_logits() -> None:
    train = {"mode": "training", "seq_len": 512}
    assert _activations("gpt2", **train) == _activations("gpt2", **train, logits="all")


def test_a_decode_step_of_many_sequences_samples_each() -> None:
    """The serving workspace of C decodes in flight holds C positions' logits, whatever --logits says."""
    from embedcalc.analysis.memory.serving import serving_stages

    config = embedcalc.load("gpt2").config
    w = Workload(seq_len=128, gen_tokens=64)
    (few,) = serving_stages(config, w, 1, None)
    (many,) = serving_stages(config, w, 512, None)
    assert many.workspace_bytes >= 512 * (768 + 50_257) * 4 > few.workspace_bytes
