"""The fine-tuning search of ``plan --mode training --peft ...``: device × method (full, full with the optimizer
offloaded, LoRA, QLoRA, and the method asked for) × data-parallel replicas, each row's memory per device by
:func:`embedcalc.analysis.finetune.memory.finetune_memory` (the first recompute level that fits), its step time and
the run's wall time, device-hours and cost for the token budget.

Time of a fine-tuning step (DESIGN §18), from the full-training step of
:func:`~embedcalc.analysis.time.estimate.estimate_time` on the same device and workload:

- matmul FLOPs: forward F (+ the adapters' A); backward: every matmul's input gradient (≈ F, what the gradient needs
  to flow) and weight gradients only for trainable weights (f F for full fine-tuning with a trainable share f; the
  adapters' 2 A). The full step is 3 F, so the compute part scales by (2 F + f F + 3 A) / 3 F; recompute adds its
  forward to both. The adapters' rank-r GEMMs are skinny and run further from peak than the base model's: they are
  counted at the base model's efficiency, a lower bound on their time.
- QLoRA dequantizes every NF4 weight to the compute dtype before its matmul, in the forward and again in the
  backward (bitsandbytes' ``dequantize_4bit``): per pass it reads the NF4 bytes and writes the dtype's, at the
  device's memory bandwidth.
- offload moves the bytes of :class:`~embedcalc.analysis.finetune.memory.FinetuneMemory` ``pcie_bytes_per_step``
  over the device's host link, not overlapped with compute (ZeRO-Offload overlaps part of it; this is the
  conservative end); the host's optimizer step is not timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from embedcalc.analysis.finetune.adapters import FinetuneSpec, count_finetune
from embedcalc.analysis.finetune.memory import FinetuneMemory, Offload, finetune_memory
from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.plan.rows import Price, Reason
from embedcalc.analysis.time.estimate import TimeRequest, estimate_time
from embedcalc.analysis.workload import Recompute, Workload
from embedcalc.config.dtypes import DTYPE_BYTES
from embedcalc.config.resolved import ResolvedShape
from embedcalc.devices.catalogue import Device
from embedcalc.errors import EmbedcalcError
from embedcalc.units import binary_bytes

RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class Method:
    """One way to fine-tune: a label, the spec and what is offloaded."""

    label: str
    spec: FinetuneSpec
    offload: Offload = "none"


def methods_for(asked: FinetuneSpec | None, offload: Offload) -> list[Method]:
    """The methods a plan compares: full, full with the optimizer offloaded, LoRA and QLoRA (with the asked
    method's rank, targets and dropout), and the asked method itself if it is none of those."""
    base = asked or FinetuneSpec("lora")
    adapters = dict(rank=base.rank, alpha=base.alpha, targets=base.targets, dropout=base.dropout,
                    modules_to_save=base.modules_to_save)  # fmt: skip
    out = [
        Method("full", FinetuneSpec()),
        Method("full + offload", FinetuneSpec(), "optimizer"),
        Method("lora", FinetuneSpec("lora", **adapters)),  # type: ignore[arg-type]
        Method("qlora", FinetuneSpec("qlora", **adapters)),  # type: ignore[arg-type]
    ]
    if asked is not None and asked.method == "dora":
        out.append(Method("dora", asked))
    if asked is not None and offload != "none" and asked.method != "full":
        out.append(Method(f"{asked.method} + offload {offload}", asked, offload))
    return out


@dataclass(frozen=True)
class FinetuneRow:
    """One method on one device (× replicas): memory per device, step and run time, device-hours, cost."""

    device: str
    method: str
    replicas: int
    price: Price | None
    dtype: str
    recompute: Recompute | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    trainable_params: int | None = None
    step_s: float | None = None
    wall_s: float | None = None
    device_hours: float | None = None
    reasons: tuple[str, ...] = ()
    memory: dict[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.wall_s is not None

    @property
    def cost(self) -> float | None:
        if self.price is None or self.device_hours is None:
            return None
        return self.price.per_device_hour * self.device_hours

    def sort_key(self) -> tuple[Any, ...]:
        cost = self.cost if self.cost is not None else float("inf")
        wall = self.wall_s if self.wall_s is not None else float("inf")
        return (not self.fits, cost, wall, self.device, self.method)

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "method": self.method,
            "devices": self.replicas,
            "dtype": self.dtype,
            "recompute": self.recompute,
            "fits": self.fits,
            "memory_bytes": self.memory_bytes,
            "memory_limit_bytes": self.memory_limit_bytes,
            "trainable_params": self.trainable_params,
            "step_s": self.step_s,
            "wall_s": self.wall_s,
            "device_hours": self.device_hours,
            "cost": self.cost,
            "price_per_device_hour": None if self.price is None else self.price.per_device_hour,
            "reasons": [str(r) for r in self.reasons],  # plain str, not Reason
            "memory": self.memory,
        }


@dataclass(frozen=True)
class FinetuneRequest:
    """The fine-tune to plan: the micro-batch workload (mode training), the token budget, the replicas at most."""

    workload: Workload
    train_tokens: int
    max_devices: int = 1
    asked: FinetuneSpec | None = None
    offload: Offload = "none"


def _fitting(
    config: ResolvedShape, w: Workload, method: Method, limit: int
) -> tuple[Workload | None, FinetuneMemory, Any]:
    counts = count_finetune(config, method.spec)
    memory = None
    for recompute in RECOMPUTE:
        trial = replace(w, recompute=recompute)
        memory = finetune_memory(config, trial, counts, method.offload)
        if memory.device_bytes_unpaged <= limit:
            return trial, memory, counts
    assert memory is not None
    return None, memory, counts


def _step_scale(config: ResolvedShape, w: Workload, counts: Any) -> float:
    """(2 F + f F + 3 A) / 3 F: the fine-tuning step's matmul FLOPs over full training's (module docstring)."""
    forward = forward_flops(config, w).forward
    if not forward:
        return 1.0
    adapter = 0
    tokens = w.batch_size * w.seq_len
    for m in counts.modules:
        adapter += 2 * tokens * counts.spec.rank * (m.in_features + m.out_features)
    share = 0.0 if counts.spec.adapters else counts.trainable_total / max(1, counts.base_params)
    return (2 * forward + share * forward + 3 * adapter) / (3 * forward)


def _extra_seconds(config: ResolvedShape, w: Workload, memory: FinetuneMemory, device: Device) -> float:
    """NF4 dequantization traffic and PCIe transfers of one step (module docstring)."""
    extra = 0.0
    nf4 = memory.breakdown.as_dict().get("weights/nf4", 0)
    if nf4:
        passes = 3 if w.recompute != "none" else 2
        dense = (
            2 * nf4 * int(DTYPE_BYTES.get(w.dtype, 2))
        )  # about 2 values per NF4 byte, written in the dtype
        extra += passes * (nf4 + dense) / device.bandwidth
    if memory.pcie_bytes_per_step:
        link = device.host_link
        if link is None:
            raise EmbedcalcError(f"{device.name}: no host link in the catalogue to time offload over")
        extra += memory.pcie_bytes_per_step / link.per_direction_bytes_per_s.value
    return extra


def evaluate_finetune(
    config: ResolvedShape, device: Device, method: Method, replicas: int, request: FinetuneRequest,
    price: Price | None,
) -> FinetuneRow:  # fmt: skip
    """One method on ``replicas`` of ``device``: the leanest recompute that fits, its step and the run."""
    w = request.workload
    row = FinetuneRow(device.name, method.label, replicas, price, w.dtype, memory_limit_bytes=device.memory)
    try:
        trial, memory, counts = _fitting(config, w, method, device.memory)
    except EmbedcalcError as exc:  # a family whose modules embedcalc cannot name, a target it lacks
        return replace(row, reasons=(str(exc),))
    row = replace(row, memory_bytes=memory.device_bytes_unpaged, trainable_params=counts.trainable_total,
                  memory=memory.to_json())  # fmt: skip
    if trial is None:
        state = memory.device_bytes_unpaged - memory.activations_bytes - memory.loss_backward_bytes
        need, have = binary_bytes(memory.device_bytes_unpaged), binary_bytes(device.memory)
        return replace(row, reasons=(Reason(
            "memory", f"memory does not fit: {need} per device > {have} even with recompute full (weights, gradients "
            f"and optimizer state alone {binary_bytes(state)})", f"memory {need} > {have}"),))  # fmt: skip
    try:
        time = estimate_time(config, trial, TimeRequest(device=device, train_tokens=request.train_tokens,
                                                        devices=replicas), memory.trainable_weights_bytes
                             + memory.gradients_bytes + memory.optimizer_bytes).to_json()  # fmt: skip
        extra = _extra_seconds(config, trial, memory, device)
    except EmbedcalcError as exc:  # a device the catalogue gives no peak for the dtype, or no host link
        return replace(row, reasons=(Reason("untimed", f"cannot be timed: {exc}"),))
    full_step = float(time["step_s"])
    step = full_step * _step_scale(config, trial, counts) + extra
    tokens_per_step = trial.batch_size * trial.seq_len * replicas
    steps = -(-request.train_tokens // tokens_per_step)
    wall = steps * step
    return replace(
        row, recompute=trial.recompute, step_s=step, wall_s=wall, device_hours=wall * replicas / 3600
    )


def plan_finetune(
    config: ResolvedShape, devices: Sequence[tuple[Device, Price | None]], request: FinetuneRequest
) -> list[FinetuneRow]:
    """Every method on every device and replica count: those that fit first, cheapest (else fastest) first."""
    rows = []
    for device, price in devices:
        for method in methods_for(request.asked, request.offload):
            replicas = 1
            while replicas <= request.max_devices:
                rows.append(evaluate_finetune(config, device, method, replicas, request, price))
                replicas *= 2
    return sorted(rows, key=FinetuneRow.sort_key)
