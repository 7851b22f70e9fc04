"""``embedcalc bench TARGET --nproc N --strategy ddp|fsdp|tp``: the model on N processes under torchrun.

Before anything is launched the analyzer predicts each rank's memory under the strategy's parallel setting; if the
ranks together (CPU: they share this machine) or one rank (CUDA: each has its GPU) would not fit, the command
exits 4, as ``bench`` does. Multi-node runs are the same worker under torchrun's rendezvous flags
(docs/concepts/memory.md).
"""

from __future__ import annotations

from dataclasses import replace

from embedcalc.analysis.communication import communication
from embedcalc.analysis.parallel import stage_params
from embedcalc.analysis.workload import Workload
from embedcalc.cli import output
from embedcalc.cli.common import OutputFormat, analyze_target
from embedcalc.errors import EmbedcalcError, ExitCode, UnsupportedEnvironmentError


def run_distributed(
    target: str, overrides: list[str] | None, workload: Workload, *, nproc: int, strategy: str, device: str,
    warmup: int, repeat: int, threads: int | None, force: bool, baseline: bool, format: OutputFormat,
) -> None:  # fmt: skip
    """Predict, check the fit, launch, reconcile, render."""
    from embedcalc.modeling.distributed import DistributedRunError, DistributedSettings, launch
    from embedcalc.modeling.timing import free_memory_bytes, resolve_device
    from embedcalc.reconcile.distributed import DistributedBench, fsdp_rank_params, strategy_parallelism

    dev = resolve_device(device)
    parallel = strategy_parallelism(strategy, nproc)  # type: ignore[arg-type]
    per_rank = replace(workload, parallel=parallel)
    analysis = analyze_target(target, [*(overrides or []), "dropout=0.0"], per_rank)
    need = analysis.memory.total_bytes - analysis.memory.kv_cache_bytes
    free = free_memory_bytes(dev)
    together = need * (nproc if dev.type == "cpu" else 1)
    if not force and together > free:
        from embedcalc.render.units import binary_bytes

        where = "this machine's RAM, shared by the ranks" if dev.type == "cpu" else "one GPU"
        raise UnsupportedEnvironmentError(
            f"{target}: {nproc} ranks are predicted to need {binary_bytes(together)} ({together:,} bytes) of "
            f"{where}, but {binary_bytes(free)} is free; use fewer --nproc, a smaller --batch-size or "
            "--seq-len, or --force",
            code="does_not_fit",
        )
    settings = DistributedSettings(
        nproc=nproc, strategy=strategy, mode=workload.mode, batch_size=workload.batch_size,  # type: ignore[arg-type]
        seq_len=workload.seq_len, tgt_len=workload.tgt_len, attention=workload.attention, warmup=warmup,
        repeat=repeat, device="cuda" if dev.type == "cuda" else "cpu", threads=threads,
    )  # fmt: skip
    output.stderr.print(f"embedcalc: launching {nproc} ranks ({strategy}, {settings.device}) under torchrun")
    try:
        ranks = launch(analysis.config, settings)
        base = launch(analysis.config, replace(settings, nproc=1))[0] if baseline and nproc > 1 else None
    except DistributedRunError as exc:
        raise EmbedcalcError(f"{target}: {exc}", ExitCode.RUNTIME, code="rank_failed") from None
    flops = analysis.flops.training_step if workload.mode == "training" else analysis.flops.forward
    tokens = workload.batch_size * workload.seq_len
    result = DistributedBench(
        target=analysis.target, strategy=settings.strategy, nproc=nproc, tokens_per_rank_step=tokens,
        ranks=ranks, baseline=base, predicted_memory=analysis.memory,
        predicted_params=[
            fsdp_rank_params(analysis.config, nproc, rank) if strategy == "fsdp"
            else max(stage_params(analysis.config, parallel))
            for rank in range(nproc)
        ],
        predicted_comm=communication(analysis.config, per_rank),
        flops_per_rank_step=flops // (nproc if strategy == "tp" else 1),
    )
    if format is OutputFormat.json:
        output.emit_json("bench", [analysis.as_json() | {"distributed": result.as_json()}], per_rank.as_dict())
        return
    from embedcalc.render.distributed import distributed_table

    output.stdout.print(distributed_table(result))

