"""``embedcalc.plan``: the orchestration of ``embedcalc plan`` — load and check the target, resolve the devices and
their prices, validate the workload and objectives, and run the search of :mod:`embedcalc.analysis.plan.serving`
or :mod:`embedcalc.analysis.plan.training` (the conventions are stated in :mod:`embedcalc.analysis.plan.rows`).

Bad arguments raise :class:`~embedcalc.errors.EmbedcalcError` with exit code 2 (usage) naming the argument and the
fix; an unknown device is the catalogue's own error (exit 2, with a did-you-mean); a workload the config cannot run
is a :class:`~embedcalc.errors.ConfigError` (exit 3). Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from embedcalc.analysis.workload import Optimizer, Workload
from embedcalc.api.load import ConfigLike, as_loaded
from embedcalc.api.workload import usage
from embedcalc.config.dtypes import DEFAULT_DTYPE, DTYPES, KV_DTYPES, DtypeError, canonical_dtype
from embedcalc.config.limits import INT_BOUND, count_problem, plain_number, plan_number_problem, price_problem
from embedcalc.errors import ConfigError, Problem

if TYPE_CHECKING:
    from embedcalc.analysis.plan.rows import PlanResult, Price, ServingRow, TrainingRow
    from embedcalc.config.dtypes import Dtype
    from embedcalc.devices.catalogue import Device

__all__ = ["plan"]

SERVING_SEQ_LEN, SERVING_GEN_TOKENS, TRAINING_SEQ_LEN = 1024, 256, 4096


def _count(name: str, value: Any) -> Any:
    """``value`` as a Python int (the integer contract) when it is a count (1 to 30 digits); None stays None."""
    value = plain_number(value)
    if value is not None and (why := count_problem(value)) is not None:
        raise usage(f"{name} {value!r:.40} is {why}", name)
    return value


def _devices(hardware: str | Sequence[str] | None) -> list[Device]:
    from embedcalc.devices.catalogue import catalogue
    from embedcalc.devices.resolve import load_device

    if hardware is None:
        return catalogue()
    if not isinstance(hardware, str) and (
        not isinstance(hardware, Sequence) or not all(isinstance(n, str) for n in hardware)
    ):
        raise usage(
            "hardware must be a device name or a list of them, e.g. ['h100-sxm', 'a100-80gb']", "hardware"
        )
    names = [hardware] if isinstance(hardware, str) else list(hardware)
    if not names:
        raise usage("hardware: give at least one device, or none for the whole catalogue", "hardware")
    devices = [load_device(n) for n in names]
    loaded = [d.name for d in devices]  # the catalogue's spelling: H100-SXM and h100-sxm are one device
    repeated = sorted({n for n in loaded if loaded.count(n) > 1})
    if repeated:
        raise usage(f"hardware: {repeated[0]!r} is given twice; name each device once", "hardware")
    return devices


def _prices(
    devices: list[Device], overrides: Mapping[str, float] | None
) -> list[tuple[Device, Price | None]]:
    """Each device with its price: ``overrides`` (--price-per-hour DEVICE=PRICE) over the catalogue's default."""
    from embedcalc.analysis.plan.rows import Price
    from embedcalc.devices.resolve import device_name

    names = {d.name for d in devices}
    if overrides is not None and not isinstance(overrides, Mapping):
        raise usage(f"price_per_hour must map device names to prices, e.g. {{'h100-sxm': 2.5}}; got "
                    f"{type(overrides).__name__}", "price_per_hour")  # fmt: skip
    if any(not isinstance(k, str) for k in (overrides or {})):
        raise usage("price_per_hour: every key must be a device name (a string)", "price_per_hour")
    # a price names its device as --hardware does (case aside); a device file keeps the name it was given as
    overrides = {k if k in names else device_name(k): v for k, v in (overrides or {}).items()}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise usage(f"price_per_hour: {unknown[0]!r} is not among the devices planned "
                     f"({', '.join(sorted(names))}); name one of them", "price_per_hour")  # fmt: skip
    out: list[tuple[Device, Price | None]] = []
    for device in devices:
        if device.name in overrides:
            value = plain_number(overrides[device.name])
            if (why := price_problem(value)) is not None:  # analyze's rule: 0 (owned hardware) is a price
                raise usage(f"price_per_hour[{device.name}] {value!r:.40} is {why}", "price_per_hour")
            out.append((device, Price(float(value), "--price-per-hour")))
            continue
        figure = (
            device.price_per_hour
        )  # the catalogue's dated default, where a public list rents it by the hour
        if figure is None:
            out.append((device, None))
            continue
        source = f"{device.citation(figure)} (read {figure.date}; a default, --price-per-hour overrides it)"
        out.append((device, Price(float(figure.value), source)))
    return out


def _dtype(name: str, value: str | None, choices: tuple[str, ...]) -> str | None:
    """A dtype by its short name or an alias, as the short name; a usage error otherwise."""
    if value is None:
        return None
    try:
        return canonical_dtype(value, choices)
    except DtypeError as exc:
        raise usage(f"{name}: {exc}", name) from None


def _kv_dtypes(value: str | Sequence[str] | None) -> list[str | None]:
    """The KV dtypes asked for, canonical and once each, in order ([None]: the activations')."""
    if value is None:
        return [None]
    if isinstance(value, str):
        names: list[Any] = value.split(",")
    elif isinstance(value, Sequence) and value:
        names = list(value)
    else:
        raise usage(f"kv_dtype must be a dtype or a non-empty list of them, got {value!r:.60}", "kv_dtype")
    out: list[str | None] = []
    for name in names:
        kv = _dtype("kv_dtype", name, KV_DTYPES)
        if kv not in out:
            out.append(kv)
    return out


def _check_choice(name: str, value: Any, allowed: Any) -> None:
    choices = get_args(allowed)
    if value is not None and value not in choices:
        raise usage(f"{name} {value!r} is not one of {', '.join(choices)}", name)


def plan(
    config: ConfigLike,
    *,
    mode: Literal["inference", "training"] = "inference",
    seq_len: int | None = None,
    gen_tokens: int | None = None,
    concurrency: int | None = None,
    rate: float | None = None,
    dtype: str | None = None,
    kv_dtype: str | Sequence[str] | None = None,
    hardware: str | Sequence[str] | None = None,
    max_devices: int | None = None,
    price_per_hour: Mapping[str, float] | None = None,
    memory_utilization: float | None = None,
    max_ttft: float | None = None,
    max_tpot: float | None = None,
    min_tokens_per_s: float | None = None,
    train_tokens: int | None = None,
    deadline_s: float | None = None,
    global_batch: int | None = None,
    batch_size: int = 1,
    optimizer: Optimizer = "adamw",
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    spec_tokens: int | None = None,
    spec_acceptance: float | None = None,
    spec_draft_cost: float | None = None,
    prefix_hit: float | None = None,
    seed: int = 0,
    kv_admission: Literal["on-demand", "reserve"] = "on-demand",
) -> PlanResult:
    """Which devices, how many, with what layout, how fast and at what cost (``embedcalc plan``).

    Inference (default): every catalogue device (or ``hardware``) × TP degree (× PP stages when one node is not
    enough) for prompts of ``seq_len`` tokens (default 1024, or what the context leaves) and ``gen_tokens``
    outputs (default 256) at ``concurrency`` requests in flight or ``rate`` requests/s; rows that fit and meet
    ``max_ttft``/``max_tpot`` (seconds) and ``min_tokens_per_s`` come first, cheapest per million output tokens
    first. Training: device × count × (TP, PP, DP, ZeRO, recompute) for ``train_tokens`` tokens in sequences of
    ``seq_len`` (default 4096, at most the context), fastest first, those within ``deadline_s`` before the rest.
    ``dtype`` default: the model's own (bf16 when it records none), fp16 on a device without bf16.

    Serving engine (the scheduler of :mod:`embedcalc.analysis.plan.scheduler`): ``max_num_seqs`` and
    ``max_num_batched_tokens`` (default vLLM's on each device); speculative decoding with ``spec_tokens`` draft
    tokens per step accepted at ``spec_acceptance`` each, the draft costing ``spec_draft_cost`` × a decode step per
    token (default one layer's share); ``prefix_hit``: the fraction of each prompt a prefix cache holds; ``seed``:
    the open loop's Poisson arrivals; ``kv_admission``: ``on-demand`` (vLLM: KV blocks as tokens come, preemption)
    or ``reserve`` (TensorRT-LLM's GUARANTEED_NO_EVICT: a request's whole KV reserved at admission). ``kv_dtype``:
    the KV cache's dtype (default the activations'), or several (``["bf16", "fp8", "nvfp4"]``): each layout is then
    planned once per KV dtype and every row says its own (nvfp4 only on devices with FP4 tensor cores).

    >>> import embedcalc
    >>> p = embedcalc.plan("llama-3.1-8b", hardware=["h100-sxm"], concurrency=8)
    >>> best = p.rows[0]
    >>> best.ok, best.layout.device, best.memory.fits
    (True, 'h100-sxm', True)
    >>> p.to_json()["mode"]
    'inference'
    """
    from embedcalc.analysis.checked import analyze_loaded
    from embedcalc.analysis.memory.serving import DEFAULT_UTILIZATION
    from embedcalc.analysis.plan.advice import recommend
    from embedcalc.analysis.plan.rows import (
        DEFAULT_MAX_DEVICES,
        DEFAULT_MAX_TRAINING_DEVICES,
        MAX_DEVICES,
        Objectives,
        PlanResult,
    )

    # the integer contract (issue 33): numpy numbers become Python ones before any check or arithmetic
    seq_len, gen_tokens, concurrency, rate, max_devices, memory_utilization = map(
        plain_number, (seq_len, gen_tokens, concurrency, rate, max_devices, memory_utilization)
    )
    max_ttft, max_tpot, min_tokens_per_s, deadline_s = map(
        plain_number, (max_ttft, max_tpot, min_tokens_per_s, deadline_s)
    )
    train_tokens, global_batch, batch_size = map(plain_number, (train_tokens, global_batch, batch_size))
    max_num_seqs, max_num_batched_tokens, spec_tokens, seed = map(
        plain_number, (max_num_seqs, max_num_batched_tokens, spec_tokens, seed)
    )
    spec_acceptance, spec_draft_cost, prefix_hit = map(
        plain_number, (spec_acceptance, spec_draft_cost, prefix_hit)
    )
    _check_choice("mode", mode, Literal["inference", "training"])
    dtype = cast("Dtype | None", _dtype("dtype", dtype, DTYPES))
    kv_dtypes = _kv_dtypes(kv_dtype)
    kv_dtype = kv_dtypes[0]
    _check_choice("optimizer", optimizer, Optimizer)
    for name, value in (
        ("seq_len", seq_len),
        ("concurrency", concurrency),
        ("max_devices", max_devices),
        ("train_tokens", train_tokens),
        ("global_batch", global_batch),
        ("batch_size", batch_size),
    ):
        _count(name, value)
    for name, number in (
        ("rate", rate),
        ("max_ttft", max_ttft),
        ("max_tpot", max_tpot),
        ("min_tokens_per_s", min_tokens_per_s),
        ("deadline_s", deadline_s),
    ):
        if number is not None and (why := plan_number_problem(name, number)) is not None:
            raise usage(f"{name} {number!r:.40} {why}", name)
    if max_devices is not None and max_devices > MAX_DEVICES:
        raise usage(
            f"max_devices {max_devices:,} is beyond any cluster; give at most {MAX_DEVICES:,}", "max_devices"
        )
    if gen_tokens is not None and (
        isinstance(gen_tokens, bool) or not isinstance(gen_tokens, int) or not 0 <= gen_tokens < INT_BOUND
    ):
        raise usage(f"gen_tokens must be an integer >= 0, got {gen_tokens!r}", "gen_tokens")
    if memory_utilization is not None and not (
        isinstance(memory_utilization, int | float)
        and not isinstance(memory_utilization, bool)
        and 0 < memory_utilization <= 1
    ):
        raise usage(f"memory_utilization must be a fraction in (0, 1] (vLLM's gpu_memory_utilization, default "
                     f"0.9), got {memory_utilization!r}; e.g. 0.9", "memory_utilization")  # fmt: skip
    if concurrency is not None and rate is not None:
        raise usage("give concurrency (requests in flight) or rate (requests/s), not both", "concurrency")
    loaded = as_loaded(config)
    devices = _prices(_devices(hardware), price_per_hour)
    fallback = dtype is None
    rows: tuple[ServingRow, ...] | tuple[TrainingRow, ...]
    settings: dict[str, Any]
    if mode == "training":
        _training_only(concurrency=concurrency, rate=rate, max_ttft=max_ttft, max_tpot=max_tpot,
                       min_tokens_per_s=min_tokens_per_s, memory_utilization=memory_utilization,
                       kv_dtype=kv_dtype, gen_tokens=gen_tokens, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=max_num_batched_tokens, spec_tokens=spec_tokens,
                       spec_acceptance=spec_acceptance, prefix_hit=prefix_hit)  # fmt: skip
        if train_tokens is None:
            raise usage("mode training needs train_tokens (--train-tokens 2T): the token budget to plan for",
                         "train_tokens")  # fmt: skip
        default_len = min(TRAINING_SEQ_LEN, loaded.config.max_seq_len)
        w = Workload(batch_size=batch_size, seq_len=seq_len or default_len, mode="training", optimizer=optimizer,
                     dtype=dtype or DEFAULT_DTYPE, dtype_source="flag" if dtype else "default")  # fmt: skip
        analysis = analyze_loaded(loaded, w)  # the workload checks analyze makes (exit 3), and the warnings
        w = _serving_dtype(analysis.workload)
        from embedcalc.analysis.plan.training import TrainingRequest, plan_training

        train = TrainingRequest(w, train_tokens, deadline_s, global_batch, max_devices or DEFAULT_MAX_TRAINING_DEVICES,
                                dtype_fallback=fallback)  # fmt: skip
        rows = tuple(plan_training(loaded.config, devices, train))
        settings = {"workload": w.as_dict(), "train_tokens": train_tokens, "deadline_s": deadline_s,
                    "global_batch": global_batch, "max_devices": train.max_devices}  # fmt: skip
    else:
        for name, training_value in (("train_tokens", train_tokens), ("deadline_s", deadline_s),
                                     ("global_batch", global_batch)):  # fmt: skip
            if training_value is not None:
                raise usage(f"{name} applies to mode training (--mode training)", name)
        if loaded.config.architecture == "encoder":
            message = (f"{loaded.target} is an encoder: it generates no tokens, so there is nothing to serve; "
                       "use `analyze --hardware NAME` for its forward time, or plan --mode training")  # fmt: skip
            raise ConfigError(message, [Problem("mode", message, "plan_encoder")], "plan_encoder")
        gen = SERVING_GEN_TOKENS if gen_tokens is None else gen_tokens
        prompt = seq_len or max(1, min(SERVING_SEQ_LEN, loaded.config.max_seq_len - gen))
        w = Workload(seq_len=prompt, gen_tokens=gen, dtype=dtype or DEFAULT_DTYPE,
                     dtype_source="flag" if dtype else "default")  # fmt: skip
        analysis = analyze_loaded(loaded, w)
        w = _serving_dtype(analysis.workload)
        from embedcalc.analysis.plan.search import plan_serving_kv
        from embedcalc.analysis.plan.serving import ServingRequest
        from embedcalc.analysis.time.capability import kv_refusal

        _check_choice("kv_admission", kv_admission, Literal["on-demand", "reserve"])
        engine = _engine_options(loaded.config, max_num_seqs, max_num_batched_tokens, spec_tokens,
                                 spec_acceptance, spec_draft_cost, prefix_hit, seed)  # fmt: skip
        engine["kv_admission"] = kv_admission
        serve = ServingRequest(
            w, concurrency, rate, kv_dtype, memory_utilization or DEFAULT_UTILIZATION,
            Objectives(max_ttft, max_tpot, min_tokens_per_s), max_devices or DEFAULT_MAX_DEVICES,
            dtype_fallback=fallback, **engine,
        )  # fmt: skip
        for kv in kv_dtypes:
            if (refused := kv_refusal(loaded.config, None, kv)) is not None:
                raise refused
        rows = tuple(plan_serving_kv(loaded.config, devices, serve, kv_dtypes))
        shown: str | list[str | None] | None = kv_dtype if len(kv_dtypes) == 1 else kv_dtypes
        settings = {"workload": w.as_dict(), "concurrency": concurrency, "rate": rate, "kv_dtype": shown,
                    "memory_utilization": serve.utilization, "objectives": serve.objectives.to_json(),
                    "max_devices": serve.max_devices, "max_devices_given": max_devices is not None,
                    "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                    "speculation": None if serve.speculation is None else serve.speculation.to_json(),
                    "prefix_hit": serve.prefix_hit, "seed": seed, "kv_admission": kv_admission}  # fmt: skip
    settings["dtype_source"] = (
        "given"
        if not fallback
        else f"default: {w.dtype} (the model's own, bf16 when it records none), fp16 on devices without bf16"
    )
    return PlanResult(
        loaded.target,
        mode,
        rows,
        recommend(mode, rows, settings),
        settings,
        warnings=tuple(analysis.warnings),
    )


def _engine_options(config: Any, max_num_seqs: int | None, max_num_batched_tokens: int | None,
                    spec_tokens: int | None, spec_acceptance: float | None, spec_draft_cost: float | None,
                    prefix_hit: float | None, seed: int) -> dict[str, Any]:  # fmt: skip
    """The scheduler's settings, checked (usage errors name the argument and the fix)."""
    from embedcalc.analysis.plan.steps import Speculation
    from embedcalc.analysis.structure import stacks

    max_num_seqs = _count("max_num_seqs", max_num_seqs)
    max_num_batched_tokens = _count("max_num_batched_tokens", max_num_batched_tokens)
    spec_tokens = _count("spec_tokens", spec_tokens)
    spec_acceptance, spec_draft_cost, prefix_hit, seed = map(
        plain_number, (spec_acceptance, spec_draft_cost, prefix_hit, seed)
    )
    for name, value, top in (("spec_acceptance", spec_acceptance, 1.0), ("prefix_hit", prefix_hit, 0.999)):
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= top
        ):
            raise usage(f"{name} must be a fraction in [0, {top:g}], got {value!r}; e.g. 0.7", name)
    if spec_draft_cost is not None and not (
        isinstance(spec_draft_cost, int | float) and 0 <= spec_draft_cost <= 1
    ):
        raise usage(f"spec_draft_cost must be a fraction in [0, 1] of a decode step, got {spec_draft_cost!r}",
                    "spec_draft_cost")  # fmt: skip
    if (spec_acceptance is not None or spec_draft_cost is not None) and spec_tokens is None:
        raise usage("spec_acceptance / spec_draft_cost describe speculative decoding: give spec_tokens (the draft "
                    "tokens per step) too", "spec_tokens")  # fmt: skip
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise usage(f"seed must be an integer >= 0, got {seed!r}", "seed")
    speculation = None
    if spec_tokens is not None:
        if spec_acceptance is None:
            raise usage("spec_tokens needs spec_acceptance (the probability each draft token is accepted, e.g. 0.7 "
                        "for EAGLE or DeepSeek-V3's MTP)", "spec_acceptance")  # fmt: skip
        layers = sum(s.num_layers for s in stacks(config))
        draft = spec_draft_cost if spec_draft_cost is not None else 1 / max(layers, 1)
        speculation = Speculation(spec_tokens, float(spec_acceptance), float(draft))
    return {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "speculation": speculation, "prefix_hit": float(prefix_hit or 0.0), "seed": seed}  # fmt: skip


def _serving_dtype(w: Workload) -> Workload:
    """The workload analyze resolved (the model's own dtype when none was given), in bf16 when nobody chose one:
    no server or trainer of these models runs them in fp32."""
    return replace(w, dtype="bf16") if w.dtype_source == "default" else w


def _training_only(**given: Any) -> None:
    for name, value in given.items():
        if value is not None:
            raise usage(f"{name} applies to serving (mode inference), not to training plans", name)
