"""``embedcalc plan TARGET``: which devices, how many, with what layout, how fast and at what cost (parse -> one
call of :func:`embedcalc.plan` -> render -> exit code)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from embedcalc.analysis.plan.rows import MAX_DEVICES
from embedcalc.analysis.plan.steps import KvAdmission
from embedcalc.analysis.workload import Mode, Optimizer
from embedcalc.cli import output
from embedcalc.cli.common import CompareFormat, SetOption, handle_errors
from embedcalc.cli.finetune_options import FinetuneFlags
from embedcalc.cli.hardware_options import KvDtypesOption
from embedcalc.cli.options import bounded_int, dtype_option, flags, length_parser, size_parser
from embedcalc.errors import EmbedcalcError, ExitCode, Problem

if TYPE_CHECKING:
    from embedcalc.analysis.plan.rows import PlanResult
    from embedcalc.api.finetune import FinetuneOptions


def _prices(values: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in values or []:
        name, sep, price = item.partition("=")
        try:
            value = float(price) if sep and name else -1.0
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise typer.BadParameter(f"{item!r}: write DEVICE=PRICE, e.g. h100-sxm=2.99 (US dollars per device-hour)",
                                     param_hint="'--price-per-hour'")  # fmt: skip
        if name in out:
            raise typer.BadParameter(
                f"{name} is priced twice; give each device once", param_hint="'--price-per-hour'"
            )
        out[name] = value
    return out


def _positive(value: float | None) -> float | None:
    if value is not None and not 0 < value < float("inf"):
        raise typer.BadParameter(f"{value:g}: give a positive number")
    return value


def _fraction(value: float | None) -> float | None:
    if value is not None and not 0 < value <= 1:
        raise typer.BadParameter(
            f"{value:g}: give a fraction in (0, 1] of the device's memory, e.g. 0.9 (vLLM's default)"
        )
    return value


def _hardware(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    return names or None


def _deadline(value: str | None) -> float | None:
    if value is None:
        return None
    from embedcalc.analysis.plan.rows import DurationError, parse_duration

    try:
        return parse_duration(value)
    except DurationError as exc:
        raise typer.BadParameter(str(exc)) from None


@handle_errors("plan")
@flags
def plan_command(
    target: Annotated[
        str, typer.Argument(help="Preset name, config file (YAML/JSON) or Hugging Face config.")
    ],
    tune: FinetuneFlags,
    mode: Annotated[
        Mode, typer.Option("--mode", help="inference: serving plans; training: a token budget.")
    ] = "inference",
    seq_len: Annotated[
        int | None,
        typer.Option(
            "--seq-len",
            "-n",
            parser=length_parser(1),
            metavar="TOKENS",
            help="Prompt tokens (serving, default 1024); sequence length (training, default 4096). 8k = 8,000, "
            "8K = 8,192 (as vLLM reads them).",
        ),
    ] = None,
    gen_tokens: Annotated[
        int | None,
        typer.Option(
            "--gen-tokens",
            parser=length_parser(0),
            metavar="TOKENS",
            help="Output tokens per request (default 256); 1k = 1,000, 1K = 1,024.",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            min=1,
            callback=bounded_int,
            help="Requests in flight (closed loop), spread over the replicas. Default: as many as fit on "
            "one replica, at most --max-num-seqs.",
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            callback=_positive,
            metavar="R",
            help="Requests per second (Poisson arrivals), instead of --concurrency.",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        dtype_option(
            "Default: the model's own (bf16 when it records none); fp16 on devices without bf16 (T4, V100)."
        ),
    ] = None,
    kv_dtype: KvDtypesOption = None,
    max_ttft: Annotated[
        float | None,
        typer.Option(
            "--max-ttft",
            callback=_positive,
            metavar="SECONDS",
            help="Objective: time to first token at most this.",
        ),
    ] = None,
    max_tpot: Annotated[
        float | None,
        typer.Option(
            "--max-tpot",
            callback=_positive,
            metavar="SECONDS",
            help="Objective: time per output token (after the first) at most this.",
        ),
    ] = None,
    min_tokens_per_s: Annotated[
        float | None,
        typer.Option(
            "--min-tokens-per-s",
            callback=_positive,
            metavar="N",
            help="Objective: output tokens/s over all requests at least this.",
        ),
    ] = None,
    hardware: Annotated[
        list[str] | None,
        typer.Option(
            "--hardware",
            metavar="NAME[,NAME]",
            help="Devices to plan on (repeatable or comma-separated; default: the whole catalogue).",
        ),
    ] = None,
    max_devices: Annotated[
        int | None,
        typer.Option(
            "--max-devices",
            min=1,
            max=MAX_DEVICES,
            callback=bounded_int,
            help="The device budget: devices at most per plan row, replicas included (default 64 serving, "
            "1024 training; at most 2^20).",
        ),
    ] = None,
    price_per_hour: Annotated[
        list[str] | None,
        typer.Option(
            "--price-per-hour",
            metavar="DEVICE=PRICE",
            help="US dollars per device-hour, over the catalogue's dated default (repeatable).",
        ),
    ] = None,
    memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--memory-utilization",
            callback=_fraction,
            metavar="F",
            help="Fraction of device memory a server uses (vLLM's "
            "gpu_memory_utilization; default 0.9); the rest is the runtime reserve.",
        ),
    ] = None,
    train_tokens: Annotated[
        int | None,
        typer.Option(
            "--train-tokens",
            metavar="N",
            parser=size_parser("count"),
            help="Training: the token budget to plan for (1T, 2e12); needed with --mode training.",
        ),
    ] = None,
    deadline_s: Annotated[  # named after the API's argument it feeds: an error about it names --deadline
        str | None,
        typer.Option(
            "--deadline",
            metavar="DURATION",
            help="Training: finish within this (30d, 36h, 2w); layouts that miss show the shortfall.",
        ),
    ] = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            min=1,
            callback=bounded_int,
            help="Training: sequences per optimizer step over all replicas.",
        ),
    ] = None,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size", "-b", min=1, callback=bounded_int, help="Training: micro-batch per replica."
        ),
    ] = 1,
    optimizer: Annotated[Optimizer, typer.Option("--optimizer", help="Training: optimizer state.")] = "adamw",
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            "--max-num-seqs",
            min=1,
            callback=bounded_int,
            help="Serving engine: sequences per step at most (vLLM's; default 1024 on devices of 70 GiB "
            "or more except the A100, else 256).",
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens",
            min=1,
            callback=bounded_int,
            help="Serving engine: tokens per step at most, chunked prefill and decodes together "
            "(vLLM's; default 8192 where --max-num-seqs defaults to 1024, else 2048).",
        ),
    ] = None,
    spec_tokens: Annotated[
        int | None,
        typer.Option(
            "--spec-tokens",
            min=1,
            callback=bounded_int,
            help="Speculative decoding: draft tokens per step (EAGLE, MTP, a draft model).",
        ),
    ] = None,
    spec_acceptance: Annotated[
        float | None,
        typer.Option(
            "--spec-acceptance",
            metavar="A",
            help="Speculative decoding: probability each draft token is accepted (0-1).",
        ),
    ] = None,
    spec_draft_cost: Annotated[
        float | None,
        typer.Option(
            "--spec-draft-cost",
            metavar="F",
            help="Speculative decoding: one draft token's cost as a fraction of a decode step "
            "(default one layer's share: an MTP module or EAGLE head is one layer).",
        ),
    ] = None,
    prefix_hit: Annotated[
        float | None,
        typer.Option(
            "--prefix-hit",
            metavar="F",
            help="Fraction of each prompt found in the prefix cache (0-1): not prefilled again.",
        ),
    ] = None,
    kv_admission: Annotated[
        KvAdmission,
        typer.Option(
            "--kv-admission",
            help="Serving engine: on-demand (vLLM: KV blocks as tokens come, preemption when they run out) "
            "or reserve (TensorRT-LLM's GUARANTEED_NO_EVICT: a request's whole KV reserved at "
            "admission, no preemption).",
        ),
    ] = "on-demand",
    seed: Annotated[
        int,
        typer.Option(
            "--seed", min=0, help="Seed of the Poisson arrivals of --rate (same seed, same numbers)."
        ),
    ] = 0,
    top: Annotated[int, typer.Option("--top", min=0, help="Table: show the best N layouts (0: all).")] = 20,
    overrides: SetOption = None,
    format: Annotated[
        CompareFormat, typer.Option("--format", "-f", help="Output format.")
    ] = CompareFormat.table,
) -> None:
    """Which devices, how many, with what parallel layout, how fast and at what cost — serving or training.

    Serving (default): every catalogue device (or --hardware) × layout (tensor-parallel degrees; attention
    data-parallel + expert-parallel for MoE models; pipeline stages when one node is not enough) × replicas within
    --max-devices: weights and KV per device, the most sequences that fit (paged KV, --memory-utilization,
    activation workspace), tokens/s, TTFT and TPOT (means; p50/p90/p99 in JSON) at --concurrency or --rate from a
    continuous-batching scheduler, and the cost per hour and per million output tokens. Layouts that fit and meet
    --max-ttft/--max-tpot/--min-tokens-per-s come first, cheapest first; the others say why in the status column.

    Training (--mode training --train-tokens 2T [--deadline 30d]): device × count × (TP, PP, DP, ZeRO, recompute)
    layouts whose memory fits, with wall time, device-hours and cost, fastest first.

    Exit 5 when no layout meets every constraint (the table is still printed, and the message says what to change).
    """
    from embedcalc.api.load import load_target

    finetune = tune.options()
    if finetune is not None:
        _plan_finetune(target, overrides, finetune, mode, seq_len, batch_size, dtype, hardware, max_devices,
                       price_per_hour, train_tokens, optimizer, format, top)  # fmt: skip
        return
    from embedcalc.api.plan import plan

    result = plan(
        load_target(target, overrides), mode=mode, seq_len=seq_len, gen_tokens=gen_tokens,
        concurrency=concurrency, rate=rate, dtype=dtype, kv_dtype=kv_dtype, hardware=_hardware(hardware),
        max_devices=max_devices, price_per_hour=_prices(price_per_hour), memory_utilization=memory_utilization,
        max_ttft=max_ttft, max_tpot=max_tpot, min_tokens_per_s=min_tokens_per_s, train_tokens=train_tokens,
        deadline_s=_deadline(deadline_s), global_batch=global_batch, batch_size=batch_size, optimizer=optimizer,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, spec_tokens=spec_tokens,
        spec_acceptance=spec_acceptance, spec_draft_cost=spec_draft_cost, prefix_hit=prefix_hit, seed=seed,
        kv_admission=kv_admission,
    )  # fmt: skip
    output.warn(list(result.warnings), result.target)
    _render(result, format, top)
    if not result.ok:
        raise EmbedcalcError(result.recommendation, ExitCode.OVER_BUDGET, [_unmet(result)], "plan_unmet",
                             json_emitted=format is CompareFormat.json)  # fmt: skip


def _unmet(result: PlanResult) -> Problem:
    return Problem("plan", result.recommendation, "plan_unmet")


def _render(result: PlanResult, format: CompareFormat, top: int) -> None:
    if format is CompareFormat.json:
        problems = [] if result.ok else [_unmet(result)]
        output.emit_json("plan", [result.to_json()], result.settings.get("workload"), problems,
                         "ok" if result.ok else "error")  # fmt: skip
        return
    from embedcalc.render.plan import plan_csv, plan_markdown, plan_table, recommendation_text

    if format is CompareFormat.csv:
        sys.stdout.write(plan_csv(result))
    elif format is CompareFormat.markdown:
        sys.stdout.write(plan_markdown(result))
    else:
        output.stdout.print(recommendation_text(result))
        output.stdout.print(plan_table(result, top))


def _plan_finetune(target: str, overrides: list[str] | None, finetune: FinetuneOptions, mode: str,
                   seq_len: int | None, batch_size: int, dtype: str | None, hardware: list[str] | None,
                   max_devices: int | None, price_per_hour: list[str] | None, train_tokens: int | None,
                   optimizer: Optimizer, format: CompareFormat, top: int) -> None:  # fmt: skip
    """``plan --mode training --peft ...`` (or --freeze / --offload): methods × devices (api/finetune_plan.py)."""
    from embedcalc.api.finetune_plan import plan_finetune
    from embedcalc.api.load import load_target
    from embedcalc.api.workload import usage

    if mode != "training":
        raise usage(
            "--peft, --freeze and --offload plan a fine-tune: add --mode training --train-tokens N", "--peft"
        )
    result = plan_finetune(load_target(target, overrides), finetune, train_tokens=train_tokens, seq_len=seq_len,
                           batch_size=batch_size, dtype=dtype, hardware=_hardware(hardware), max_devices=max_devices,
                           price_per_hour=_prices(price_per_hour), optimizer=optimizer)  # fmt: skip
    problems = [] if result.ok else [Problem("plan", result.recommendation, "plan_unmet")]
    if format is CompareFormat.json:
        output.emit_json("plan", [result.to_json()], result.settings["workload"], problems,
                         "ok" if result.ok else "error")  # fmt: skip
    else:
        from embedcalc.render.finetune_plan import finetune_plan_table

        output.stdout.print(result.recommendation, markup=False)
        output.stdout.print(finetune_plan_table(result, top))
    if not result.ok:
        raise EmbedcalcError(result.recommendation, ExitCode.OVER_BUDGET, problems, "plan_unmet",
                             json_emitted=format is CompareFormat.json)  # fmt: skip
