"""The workload an estimate is for: batch, sequence lengths, dtype, mode, attention implementation.

The dtype names and what each means for memory and time are :mod:`embedcalc.config.dtypes`' (one vocabulary)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields, replace
from numbers import Integral
from typing import Any, Literal, get_args, get_origin, get_type_hints

from embedcalc.config.dtypes import (
    ACTIVATION_DTYPE,
    DEFAULT_DTYPE,
    DTYPE_BYTES,
    INFERENCE_ONLY_DTYPES,
    WEIGHT_ONLY_DTYPES,
    Dtype,
    DtypeError,
    DtypeSource,
    KvDtype,
    canonical_dtype,
)  # fmt: skip
from embedcalc.config.limits import INT_BOUND, MAX_INT_DIGITS, plain_number
from embedcalc.errors import Problem, WorkloadError

__all__ = [
    "DTYPE_BYTES",
    "INFERENCE_ONLY_DTYPES",
    "WEIGHT_ONLY_DTYPES",
    "Dtype",
    "DtypeSource",
    "KvDtype",
    "Workload",
]
Mode = Literal["inference", "training"]
AttentionImpl = Literal["sdpa", "eager"]
Recompute = Literal["none", "selective", "full"]
# adamw_8bit / paged_*: bitsandbytes' 8-bit blockwise AdamW and its paged variants (analysis/memory/training.py)
Optimizer = Literal["adamw", "sgd", "adafactor", "adamw_8bit", "paged_adamw", "paged_adamw_8bit"]
Logits = Literal["last", "all"]


def logit_rows(logits: Logits, batch: Any, positions: Any) -> Any:
    """Rows the LM head computes logits for in an inference forward of ``batch`` sequences of ``positions`` tokens
    (numbers or numpy arrays of them): each sequence's last (``logits="last"``: the one a server or ``generate``
    samples from) or all of them."""
    return batch * positions if logits == "all" else batch


def bounded(default: int | None, minimum: int, maximum: int | None = None) -> Any:
    """A field with its bounds beside its default: checked by :func:`check_bounds` on every construction, and
    read by the CLI for its option's ``min``/``max`` (one place for both)."""
    return field(default=default, metadata={"min": minimum, "max": maximum})


def field_bounds(cls: type, name: str) -> tuple[int, int | None]:
    """``(min, max)`` of a :func:`bounded` field of ``cls``."""
    [f] = [f for f in fields(cls) if f.name == name]
    return f.metadata["min"], f.metadata["max"]


def check_bounds(obj: Any) -> None:
    """Refuse a field outside its bounds (or not an integer, or of more than MAX_INT_DIGITS digits, the bound of
    every integer embedcalc reads), naming the field and the range (exit 3). A numpy integer is stored as the Python
    int it equals first (:func:`embedcalc.config.limits.plain_number`: no int64 reaches the arithmetic)."""
    for f in fields(obj):
        value = plain_number(getattr(obj, f.name))
        if value is not getattr(obj, f.name):
            object.__setattr__(obj, f.name, value)
        if "min" not in f.metadata or (value is None and f.default is None):
            continue
        if _outside(f, value):
            upper = f" and <= {f.metadata['max']}" if f.metadata["max"] is not None else ""
            if isinstance(value, Integral) and abs(int(value)) >= INT_BOUND:
                upper = f" of at most {MAX_INT_DIGITS} digits"
                shown = f"an integer of more than {MAX_INT_DIGITS} digits"
            else:
                shown = f"{value!r:.60}"
            message = f"{f.name} must be an integer >= {f.metadata['min']}{upper} (got {shown})"
            raise WorkloadError(
                message, [Problem(f.name, message, "workload_out_of_range")], "workload_out_of_range"
            )


def _outside(f: Field[Any], value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, Integral):  # numpy's integers are Integral too
        return True
    if abs(int(value)) >= INT_BOUND:
        return True
    return value < f.metadata["min"] or (f.metadata["max"] is not None and value > f.metadata["max"])


def _refuse(name: str, message: str, code: str) -> WorkloadError:
    return WorkloadError(f"{name}: {message}", [Problem(name, message, code)], code)


_CHOICES: dict[str, dict[str, tuple[Any, ...]]] = {}


def _choices(cls: type[object]) -> dict[str, tuple[Any, ...]]:
    """The fields of ``cls`` whose type is a Literal (dtype, mode, ...): name -> the allowed values (read once)."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    if key not in _CHOICES:
        hints = get_type_hints(cls)
        _CHOICES[key] = {name: get_args(hint) for name, hint in hints.items() if get_origin(hint) is Literal}
    return _CHOICES[key]


def check_choices(obj: Any) -> None:
    """Refuse a Literal field (dtype, mode, attention, ...) holding a value not among its choices (exit 3)."""
    for name, allowed in _choices(type(obj)).items():
        value = getattr(obj, name)
        if not isinstance(value, str) or value not in allowed:
            shown = f"{value!r:.60}" if isinstance(value, str) else type(value).__name__
            raise _refuse(
                name, f"{shown} is not one of {', '.join(map(str, allowed))}", "workload_bad_choice"
            )


def parallelism_from(value: object) -> Parallelism:
    """A :class:`Parallelism` from itself or from a mapping of its fields (``{"tp": 2, "dp": 4}``); a WorkloadError
    naming the field for anything else (an unknown key with the nearest known one, a value of the wrong type)."""
    if isinstance(value, Parallelism):
        return value
    if not isinstance(value, Mapping):
        raise _refuse("parallel", f"must be a Parallelism or a mapping such as {{'tp': 2}}, got {type(value).__name__}",
                      "workload_bad_parallel")  # fmt: skip
    known = [f.name for f in fields(Parallelism)]
    for key in value:
        if key not in known:
            from embedcalc.config.problems import did_you_mean

            shown = key[:40] if isinstance(key, str) else f"{key!r:.40}"
            hint = did_you_mean(key, known) if isinstance(key, str) else ""
            raise _refuse(f"parallel.{shown}", f"unknown field{hint}; fields: {', '.join(known)}",
                          "workload_bad_parallel")  # fmt: skip
    return Parallelism(**value)


@dataclass(frozen=True)
class Parallelism:
    """How one model replica is spread over devices (Megatron-LM / ZeRO conventions).

    ``tp``: tensor-parallel degree (Shoeybi et al. 2019); ``pp``: pipeline stages (Narayanan et al. 2021, 1F1B
    schedule); ``dp``: data-parallel replicas; ``zero``: ZeRO stage over the dp group (Rajbhandari et al. 2020):
    1 shards optimizer state, 2 also gradients, 3 also weights; ``ep``: expert parallelism (Lepikhin et al. 2021,
    GShard; Megatron-core): the routed experts of every MoE layer are spread over ``ep`` ranks taken from the
    data-parallel group (so ``ep`` divides ``dp``), each rank holding num_experts / ep of them; ZeRO shards the
    experts' state over the dp / ep ranks that hold the same experts. ``pp_virtual``: model chunks per pipeline
    rank, Megatron-LM's interleaved 1F1B schedule (Narayanan et al. 2021, §2.2.2; ``--num-layers-per-virtual-
    pipeline-stage``): the bubble shrinks v-fold and each micro-batch crosses v times as many stage boundaries
    (training only: :mod:`embedcalc.analysis.time.schedule`). ``cp``: context parallelism (Megatron-core's
    ``--context-parallel-size``, TransformerEngine's ring attention with KV exchanged point to point): each
    sequence is split over ``cp`` ranks, each holding seq_len / cp tokens (in 2·cp chunks, ranks i and 2·cp − 1 − i
    together, so causal attention work is balanced) and every weight; the gradients are reduced, and ZeRO shards,
    over dp × cp ranks; devices = tp × cp × pp × dp (Megatron's rank order: tp, cp, dp, then pp). Training only
    (:func:`context_local` says what one rank computes).
    """

    tp: int = bounded(1, 1)
    pp: int = bounded(1, 1)
    dp: int = bounded(1, 1)
    zero: int = bounded(0, 0, 3)
    ep: int = bounded(1, 1)
    pp_virtual: int = bounded(1, 1)
    cp: int = bounded(1, 1)

    def __post_init__(self) -> None:
        check_bounds(self)

    @property
    def devices(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def gradient_ranks(self) -> int:
        """Ranks holding the same weights, over which gradients are reduced and ZeRO shards: dp × cp."""
        return self.dp * self.cp

    @property
    def splits_model(self) -> bool:
        """Whether one model is split over devices (what verify reconciles shard by shard): tp, pp, or ZeRO-3."""
        return self.tp > 1 or self.pp > 1 or (self.dp > 1 and self.zero == 3)


@dataclass(frozen=True)
class Workload:
    """One forward (inference) or training step: ``batch_size`` sequences of ``seq_len`` tokens.

    For an encoder-decoder, ``seq_len`` is the source (encoder) length and ``tgt_len`` the target (decoder) length,
    default ``seq_len``. ``batch_size`` is per data-parallel replica (the micro-batch with pipelining).
    ``gen_tokens`` (inference) adds generated tokens to the KV cache of decoders.
    ``attention`` only changes memory: eager keeps the batch x heads x n x n score matrix,
    sdpa (flash / memory-efficient kernels) does not.

    ``dtype`` takes the short names or their aliases (``bfloat16`` is ``bf16``). ``dtype_source`` says who chose
    it: a workload left at the ``default`` (fp32, nobody chose) takes the model's own dtype when analysed
    (:func:`embedcalc.analysis.checked.analyze_loaded`); any other dtype given here counts as chosen (``flag``).
    ``quant_group_size``: input values per fp16 scale and zero of the weight-only int8/int4 formats.
    ``logits`` (inference memory): the LM-head logits held for the ``last`` position of each sequence, the one a
    server or ``generate`` samples from (vLLM's ``LogitsProcessor`` and transformers' ``generate`` compute logits
    for those positions only), or for ``all`` positions, as scoring a text (perplexity, reward models) does.
    Training always holds every position's logits (its loss reads them).
    """

    batch_size: int = bounded(1, 1)
    seq_len: int = bounded(128, 1)
    tgt_len: int | None = bounded(None, 1)
    dtype: Dtype = DEFAULT_DTYPE
    dtype_source: DtypeSource = "default"
    quant_group_size: int = bounded(128, 1)
    mode: Mode = "inference"
    attention: AttentionImpl = "sdpa"
    recompute: Recompute = "none"
    optimizer: Optimizer = "adamw"
    gen_tokens: int = bounded(0, 0)
    logits: Logits = "last"
    parallel: Parallelism = field(default_factory=Parallelism)

    def __post_init__(self) -> None:
        check_bounds(self)
        try:
            dtype = canonical_dtype(self.dtype)
        except DtypeError as exc:
            message = f"dtype: {exc}"
            raise WorkloadError(
                message, [Problem("--dtype", message, "unknown_dtype")], "unknown_dtype"
            ) from None
        object.__setattr__(self, "dtype", dtype)
        if self.dtype_source == "default" and dtype != DEFAULT_DTYPE:
            object.__setattr__(self, "dtype_source", "flag")  # someone chose it
        check_choices(self)
        # a mapping becomes a Parallelism
        object.__setattr__(self, "parallel", parallelism_from(self.parallel))
        if self.mode != "training" and self.parallel.pp_virtual > 1:
            message = (
                f"--pp-virtual {self.parallel.pp_virtual} interleaves a training pipeline's micro-batches (Megatron-"
                "LM's virtual stages); an inference request has no micro-batches to interleave: drop it or add "
                "--mode training"
            )
            raise WorkloadError(message, [Problem("--pp-virtual", message, "pp_virtual_inference")],
                                "pp_virtual_inference")  # fmt: skip
        if self.mode == "training" and self.dtype in INFERENCE_ONLY_DTYPES:
            kind = "a weight-only" if self.dtype in WEIGHT_ONLY_DTYPES else "an FP4"
            message = (
                f"--dtype {self.dtype} is {kind} inference format and cannot be trained; with --mode "
                "training use --dtype fp32, bf16, fp16 or fp8 (or --mode inference)"
            )
            raise WorkloadError(
                message, [Problem("--dtype", message, "dtype_not_trainable")], "dtype_not_trainable"
            )

    @property
    def decoder_len(self) -> int:
        """Tokens per sequence of a decoder stack: tgt_len for an encoder-decoder's decoder, default seq_len."""
        return self.tgt_len if self.tgt_len is not None else self.seq_len

    @property
    def weight_bytes_per_param(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def activation_dtype(self) -> Dtype:
        """The dtype of activations and (by default) the KV cache: bf16 under fp8, fp16 under int8/int4."""
        return ACTIVATION_DTYPE[self.dtype]

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (:attr:`activation_dtype`)."""
        return int(DTYPE_BYTES[self.activation_dtype])

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def with_model_dtype(workload: Workload, model_dtype: str | None, source: DtypeSource) -> Workload:
    """``workload`` in the model's own dtype (from ``source``: a preset, a config file) when nobody chose one:
    its ``dtype_source`` is still ``default``. A chosen dtype (``--dtype``, ``dtype=``) is kept. Training a model
    whose own dtype is inference-only (FP4, weight-only int) runs in that format's activation dtype (bf16, fp16)."""
    if workload.dtype_source != "default" or model_dtype is None:
        return workload
    if workload.mode == "training" and model_dtype in INFERENCE_ONLY_DTYPES:
        # weights published in an inference-only format (gpt-oss's MXFP4 experts) are trained dequantized, in the
        # activation dtype: OpenAI's gpt-oss fine-tuning recipe loads them with Mxfp4Config(dequantize=True)
        model_dtype = ACTIVATION_DTYPE[model_dtype]
    return replace(workload, dtype=model_dtype, dtype_source=source)  # type: ignore[arg-type]


def context_local(w: Workload) -> Workload:
    """What one context-parallel rank computes (Parallelism's ``cp``): ``w`` with seq_len / cp tokens per sequence,
    the layout unchanged. Every per-token count (linear layers, activations saved, element-wise traffic, TP and PP
    volumes) is this workload's; only the attention cores see every key (a rank's queries against the whole causal
    sequence: 1 / cp of the full sequence's core work, balanced by the chunk layout). The sequence is whole 2·cp
    chunks wherever a count is given (:func:`context_problems`); a shorter one (a probe) keeps at least one token."""
    cp = w.parallel.cp
    return w if cp == 1 else replace(w, seq_len=max(1, w.seq_len // cp))


def context_problems(w: Workload) -> list[Problem]:
    """What context parallelism (Parallelism's ``cp``) needs of the workload: training, a sequence of whole
    2·cp chunks, fused attention (the config's side is :func:`embedcalc.analysis.parallel.parallel_problems`)."""
    cp = w.parallel.cp
    why = None
    if cp == 1:
        return []
    if w.mode != "training":
        why = (
            "splits a training sequence over ranks (Megatron-core's context parallelism); an inference request's "
            "context parallelism is not modelled: drop it or add --mode training",
            "cp_inference",
        )
    elif w.seq_len % (2 * cp):
        lo = max(2 * cp, w.seq_len - w.seq_len % (2 * cp))
        why = (
            f"splits each sequence into 2 × {cp} equal chunks (TransformerEngine's load-balanced causal layout), "
            f"so --seq-len {w.seq_len} must be a multiple of {2 * cp}; use --seq-len {lo}",
            "cp_seq_len",
        )
    elif w.attention == "eager":
        why = (
            "runs fused (flash) attention chunk by chunk round the ring; the eager score matrix is not split: use "
            "--attention sdpa",
            "cp_eager",
        )
    if why is None:
        return []
    return [Problem("--cp", f"--cp {cp} {why[0]}", why[1])]
