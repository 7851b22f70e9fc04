"""Advisory checks on a valid config (warnings, exit 0) and checks of a workload against a config."""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol

from embedcalc.config.limits import FLASH_ATTENTION_MAX_HEAD_DIM
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import Problem


class WorkloadShape(Protocol):
    """The parts of a workload (:class:`embedcalc.analysis.workload.Workload`) its checks read; config does not
    import analysis (DESIGN.md §7)."""

    @property
    def seq_len(self) -> int: ...
    @property
    def tgt_len(self) -> int | None: ...
    @property
    def gen_tokens(self) -> int: ...
    @property
    def mode(self) -> str: ...


FFN_RATIO_RANGE = (1.0, 8.0)


def config_warnings(
    config: ResolvedShape, user_keys: dict[str, str] | None = None, published: bool = False
) -> list[Problem]:
    """Things that are valid but probably unintended or slow (DESIGN.md §3).

    ``published``: the config is a shipped preset or a Hugging Face file, whose sizes are the model's own. The
    vocabulary-padding advice is for someone choosing a size, so it is left out there unless ``--set vocab_size``
    chose it."""
    keys = user_keys or {}
    head_key = (
        keys.get("head_dim", "head_dim")
        if config.head_dim is not None
        else keys.get("num_heads", "num_heads")
    )
    hd = config.resolved_head_dim
    out = []
    # an attention-free model (Mamba) has a placeholder head count and no head to size
    attends = any(block.attention is not None for block in config.named_blocks.values())
    if hd % 8 and attends:
        out.append(
            Problem(
                head_key,
                f"head_dim {hd} is not a multiple of 8; tensor-core kernels run best at "
                "multiples of 8 (ideally 64 or 128)",
                "head_dim_unaligned",
            )
        )
    if hd > FLASH_ATTENTION_MAX_HEAD_DIM and attends:
        out.append(
            Problem(
                head_key,
                f"head_dim {hd} is above {FLASH_ATTENTION_MAX_HEAD_DIM}, the largest "
                "FlashAttention supports; attention falls back to slower kernels",
                "head_dim_large",
            )
        )
    vocab_chosen = not published or keys.get("vocab_size", "").startswith("--set ")
    if config.vocab_size % 64 and vocab_chosen:
        padded = -(-config.vocab_size // 64) * 64
        out.append(
            Problem(
                keys.get("vocab_size", "vocab_size"),
                f"vocab_size {config.vocab_size} is not a multiple "
                f"of 64; padding to {padded} speeds up the embedding and LM head matmuls",
                "vocab_unaligned",
            )
        )
    ratio = Fraction(config.resolved_ffn_dim, config.embed_dim)  # exact for any size
    lo, hi = FFN_RATIO_RANGE
    if not lo <= ratio <= hi:
        out.append(
            Problem(
                keys.get("ffn_dim", "ffn_dim"),
                f"FFN ratio ffn_dim / embed_dim = {float(ratio):.3g} is unusual "
                f"(published models use {lo:g} to {hi:g}; 4 is the classic choice, about 2.7 for gated "
                "FFNs)",
                "ffn_ratio_unusual",
            )
        )
    return out


def workload_problems(config: ResolvedShape, workload: WorkloadShape) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) of running ``workload`` on ``config``: sequence lengths against the context."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    lengths = [("--seq-len", workload.seq_len)]
    if workload.tgt_len is not None and config.architecture == "encoder-decoder":
        lengths.append(("--tgt-len", workload.tgt_len))
    if workload.tgt_len is not None and config.architecture != "encoder-decoder":
        warnings.append(
            Problem(
                "--tgt-len",
                f"--tgt-len only applies to encoder-decoder models; {config.label} "
                f"is {config.architecture}, so it is ignored",
                "tgt_len_ignored",
            )
        )
    if workload.gen_tokens:
        if config.architecture == "encoder" or workload.mode == "training":
            why = (
                "an encoder generates nothing"
                if config.architecture == "encoder"
                else "training does not decode"
            )
            warnings.append(Problem("--gen-tokens", f"--gen-tokens is ignored: {why}", "gen_tokens_ignored"))
        else:
            prompt_flag = "--tgt-len" if config.architecture == "encoder-decoder" else "--seq-len"
            prompt = workload.seq_len
            if config.architecture == "encoder-decoder" and workload.tgt_len is not None:
                prompt = workload.tgt_len
            lengths.append((f"{prompt_flag} + --gen-tokens", prompt + workload.gen_tokens))
    for flag, value in lengths:
        if value <= config.max_seq_len:
            continue
        if config.position == "learned":
            errors.append(
                Problem(
                    flag,
                    f"{flag} {value} exceeds max_seq_len {config.max_seq_len} of {config.label}: "
                    "its learned position table has no rows beyond that; "
                    + (
                        f"keep {flag} at most {config.max_seq_len}"
                        if "+" in flag
                        else f"use {flag} {config.max_seq_len}"
                    )
                    + f" or raise max_seq_len (--set max_seq_len={value})",
                    "seq_len_over_context",
                )
            )
        else:
            warnings.append(
                Problem(
                    flag,
                    f"{flag} {value} exceeds max_seq_len {config.max_seq_len} of "
                    f"{config.label}: {config.position} positions extrapolate, quality is not "
                    "guaranteed",
                    "seq_len_extrapolates",
                )
            )
    return errors, warnings
