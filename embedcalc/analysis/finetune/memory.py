"""Memory of one fine-tuning step on one device (and the host, with offload), in bytes.

Conventions (each with its source):

- **Frozen base weights** in their storage format: the model dtype for LoRA/DoRA/frozen parts; for QLoRA every
  ``nn.Linear`` but the LM head (transformers' bitsandbytes integration keeps ``lm_head`` in higher precision) is
  NF4 as bitsandbytes stores it (``bitsandbytes.functional.quantize_4bit``, blocksize 64, ``bnb_4bit_use_double_quant``;
  Dettmers et al. 2023, QLoRA §3): the packed weight, ceil(n / 2) bytes; one uint8 absmax per 64 values; the
  absmax quantized again in blocks of 256 with one fp32 absmax each, an fp32 offset and the 256-entry fp32
  dynamic map of that second level; the 16-entry fp32 NF4 code. Both tables are per tensor (bitsandbytes 0.50
  builds each anew; a test checks). Biases, norms, embeddings,
  the LM head and transformers-5 MoE experts (parameters, not ``nn.Linear``) stay in the model dtype. Exact against
  bitsandbytes' tensors on the CPU (tests/analysis/finetune).
- **Adapters** are fp32 (peft's ``autocast_adapter_dtype=True`` casts bf16/fp16 adapter weights up), their
  gradients fp32, their optimizer state per :func:`embedcalc.analysis.memory.training.optimizer_state_bytes` with no
  master copy. Modules saved whole (``modules_to_save``) are copies in the model dtype, gradients alike, optimizer
  state without a master copy (a Trainer on a bf16-loaded model keeps none). Full fine-tuning (with or without
  ``--freeze``) follows the training recipe of ``analysis/memory/training.py`` for its trainable parameters
  (mixed precision: 2 + 2 + 12 bytes), frozen parameters in the model dtype only.
- **Activations**: the saved activations of full training (``saved_activations``, Korthikanti et al. 2022), less
  what only a weight gradient needs: a frozen linear's backward computes the input gradient alone
  (grad_x = grad_y W), so autograd does not save its input (PyTorch's ``MmBackward0`` keeps ``self`` only when
  ``mat2`` requires grad; checked on torch 2.13). Removed per layer, when no adapter reads it: the Q/K/V input
  (t d), the FFN input (t d), the input of the FFN's output projection (t f), with eager attention the context
  (t q; SDPA keeps it as its output either way), the LM head's input (t d). Added per adapted module: lora_A's
  output, t r (the input of lora_B); with lora dropout the dropped input (t in) and its mask (t in, bool); DoRA the
  base and LoRA outputs it rescales (2 t out, peft's ``DoraLinearLayer``). The merged W + s B A whose row norms
  DoRA takes is transient: the norm is detached (Liu et al. 2024, §4.3), so nothing keeps it for the backward
  and it is freed within the forward of its module. A frozen norm saves its input as full training counts it
  (t d): LayerNorm's native kernel saves its input, mean and rstd whether or not its weight trains, and RMSNorm's
  ``x_normed * weight`` drops only x_normed, which full training does not count (saved-tensor hooks, torch 2.13).
  Layers before the first trainable one save nothing (no gradient flows there), nor does the embedding when it
  is frozen. Training runs under autocast in the model dtype. At the step's peak, the start of the backward, the
  cross-entropy's backward adds its working set, two fp32 t x vocab gradients (``loss_backward`` in the
  breakdown, :func:`~embedcalc.analysis.memory.training.loss_backward_bytes`).
- **Offload**: ``optimizer`` (ZeRO-Offload, Ren et al. 2021, §4: fp32 master weights, optimizer state and
  gradients on the host; the device keeps the model-dtype weights and the activations) moves per step the
  model-dtype gradients down and the updated weights up over PCIe; ``params`` (ZeRO-Infinity / FSDP
  ``CPUOffload(offload_params=True)``) also keeps the weights on the host, two layers resident on the device
  (the one computing and the one prefetched), and uploads every weight twice per step (forward and backward).
- **Paged optimizers** (bitsandbytes ``paged_*``) hold their state in CUDA unified memory, which the driver pages
  to the host under pressure: counted in ``optimizer_bytes`` and reported as ``pageable_bytes``, which a fit
  check may leave on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.finetune.adapters import AdapterCounts
from embedcalc.analysis.finetune.modules import model_modules
from embedcalc.analysis.memory.training import (
    FP32_BYTES,
    MASK_BYTES,
    loss_backward_bytes,
    mixed_precision,
    optimizer_state_bytes,
    saved_activations,
    training_param_bytes,
)
from embedcalc.analysis.params import param_tensors
from embedcalc.analysis.workload import Workload
from embedcalc.config.dtypes import DTYPE_BYTES
from embedcalc.config.resolved import ResolvedShape

Offload = Literal["none", "optimizer", "params"]

NF4_BLOCK = 64  # bitsandbytes Linear4bit's default blocksize
NF4_ABSMAX_BLOCK = 256  # the nested (double) quantization's blocksize
NF4_CODE_BYTES = 16 * FP32_BYTES  # get_4bit_type("nf4"): one 16-entry fp32 table per tensor
DYNAMIC_MAP_BYTES = 256 * FP32_BYTES  # create_dynamic_map(): the second level's code, per tensor


def nf4_bytes(numel: int, double_quant: bool = True) -> int:
    """Bytes of one NF4 tensor of ``numel`` values as bitsandbytes holds it (module docstring)."""
    blocks = -(-numel // NF4_BLOCK)
    packed = -(-numel // 2)
    if not double_quant:
        return packed + FP32_BYTES * blocks + NF4_CODE_BYTES
    second = -(-blocks // NF4_ABSMAX_BLOCK)
    return packed + blocks + FP32_BYTES * second + FP32_BYTES + DYNAMIC_MAP_BYTES + NF4_CODE_BYTES


@dataclass(frozen=True)
class FinetuneMemory:
    """Bytes of one fine-tuning step: on the device, on the host (offload), and moved over PCIe per step."""

    frozen_weights_bytes: int
    trainable_weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    offload: Offload
    host_bytes: int
    pcie_bytes_per_step: int
    pageable_bytes: int  # paged optimizer state the driver may move to the host
    breakdown: Breakdown
    loss_backward_bytes: int = 0  # the cross-entropy's backward working set at the step's peak

    @property
    def device_bytes(self) -> int:
        """What the device holds at the step's peak (weights, gradients, optimizer, activations not on the host)."""
        return self.breakdown.total

    @property
    def device_bytes_unpaged(self) -> int:
        """The device bytes with a paged optimizer's state evicted to the host."""
        return self.device_bytes - self.pageable_bytes

    def device_kinds(self) -> dict[str, int]:
        """The memory keys of DESIGN §5 for the device, and the host's bytes."""
        b = self.breakdown.as_dict()
        return {
            "weights_bytes": sum(v for k, v in b.items() if k.startswith("weights/")),
            "gradients_bytes": b.get("gradients", 0),
            "optimizer_bytes": b.get("optimizer", 0),
            "activations_bytes": b.get("activations", 0) + b.get("loss_backward", 0),
            "total_bytes": self.device_bytes,
            "host_bytes": self.host_bytes,
        }

    def to_json(self) -> dict[str, object]:
        return {
            "frozen_weights_bytes": self.frozen_weights_bytes,
            "trainable_weights_bytes": self.trainable_weights_bytes,
            "gradients_bytes": self.gradients_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "loss_backward_bytes": self.loss_backward_bytes,
            "device_bytes": self.device_bytes,
            "host_bytes": self.host_bytes,
            "pcie_bytes_per_step": self.pcie_bytes_per_step,
            "pageable_bytes": self.pageable_bytes,
            "offload": self.offload,
            "breakdown": self.breakdown.as_dict(),
        }


def _frozen_weight_bytes(config: ResolvedShape, counts: AdapterCounts, e: int) -> tuple[int, int]:
    """(frozen weights in their format, of which NF4 storage) for a fine-tune's base model."""
    if counts.spec.method != "qlora":
        frozen = counts.base_params - (0 if counts.spec.adapters else counts.trainable.total)
        return e * frozen, 0
    quantized = [m for m in model_modules(config).linears if m.key != "head/lm"]
    nf4 = sum(nf4_bytes(m.in_features * m.out_features) for m in quantized)
    rest = counts.base_params - sum(m.in_features * m.out_features for m in quantized)
    return e * rest + nf4, nf4


def _adapter_tensors(counts: AdapterCounts) -> list[tuple[int, ...]]:
    """Shapes of the adapter tensors (lora_A, lora_B, DoRA magnitudes), one entry per tensor."""
    r = counts.spec.rank
    shapes: list[tuple[int, ...]] = []
    for m in counts.modules:
        shapes += [(r, m.in_features), (m.out_features, r)]
        if counts.spec.method == "dora":
            shapes.append((m.out_features,))
    for p, factor in zip(counts.expert_params, counts.expert_ranks, strict=True):
        rank = factor * r * p.experts  # peft's ParamWrapper: lora_A (r E) x in, lora_B out x (r E)
        shapes += [(rank, p.in_features), (p.out_features, rank)]
    return shapes


def _full_optimizer(config: ResolvedShape, counts: AdapterCounts, workload: Workload) -> int:
    """Optimizer state of full fine-tuning's trainable tensors (a key partly frozen by layer: its share)."""
    from embedcalc.analysis.params import count_params

    base = count_params(config).as_dict()
    trainable = counts.trainable.as_dict()
    mixed = mixed_precision(workload.dtype)
    total = 0
    for t in param_tensors(config):
        part, whole = trainable.get(t.key, 0), base.get(t.key, 0)
        if part and whole:
            state = int(optimizer_state_bytes(t.shape, workload.optimizer, mixed)) * int(t.copies)
            total += state * part // whole
    return total


def finetune_memory(
    config: ResolvedShape, workload: Workload, counts: AdapterCounts, offload: Offload = "none"
) -> FinetuneMemory:
    """Device and host bytes of one fine-tuning step of ``config`` (module docstring)."""
    e = int(DTYPE_BYTES[workload.dtype]) if workload.dtype in DTYPE_BYTES else 2
    spec = counts.spec
    frozen_bytes, nf4 = _frozen_weight_bytes(config, counts, e)
    saved_params = sum(v for k, v in counts.added.items() if k.endswith("/modules_to_save"))
    if spec.adapters:
        adapter_params = counts.adapter_params
        trainable_bytes = FP32_BYTES * adapter_params + e * saved_params
        gradients = FP32_BYTES * adapter_params + e * saved_params
        optimizer = sum(
            int(optimizer_state_bytes(s, workload.optimizer, False)) for s in _adapter_tensors(counts)
        )
        optimizer += (
            int(optimizer_state_bytes((saved_params,), workload.optimizer, False)) if saved_params else 0
        )
    else:
        per = training_param_bytes(workload.dtype)
        trainable_bytes = per * counts.trainable_total
        gradients = per * counts.trainable_total
        optimizer = _full_optimizer(config, counts, workload)
    activations = finetune_activations(config, workload, counts)
    pageable = optimizer if workload.optimizer.startswith("paged_") else 0
    out = Breakdown()
    host = pcie = 0
    weights_device = frozen_bytes + trainable_bytes
    if offload == "none":
        out.add("weights/frozen", frozen_bytes - nf4)
        out.add("weights/nf4", nf4)
        out.add("weights/trainable", trainable_bytes)
        out.add("gradients", gradients)
        out.add("optimizer", optimizer)
    else:
        host = gradients + optimizer
        # gradients down in the model dtype, updated weights back up (ZeRO-Offload §4.1)
        trainable_params = counts.trainable_total
        pcie = 2 * e * trainable_params
        pageable = 0
        if offload == "optimizer":
            out.add("weights/frozen", frozen_bytes - nf4)
            out.add("weights/nf4", nf4)
            out.add("weights/trainable", trainable_bytes)
        else:
            host += weights_device
            resident = 2 * _largest_layer_bytes(config, weights_device, counts)
            out.add("weights/resident_layers", resident)
            pcie += 2 * weights_device  # every weight up for the forward and again for the backward
    out.add("activations", activations)
    loss = loss_backward_bytes(config, workload)
    out.add("loss_backward", loss)
    return FinetuneMemory(
        frozen_bytes,
        trainable_bytes,
        gradients,
        optimizer,
        activations,
        offload,
        host,
        pcie,
        pageable,
        out,
        loss,
    )


def _largest_layer_bytes(config: ResolvedShape, weights: int, counts: AdapterCounts) -> int:
    """One layer's share of the weights (the largest stack's layers are taken as equal): weights / layers."""
    layers = config.num_layers + (
        config.resolved_decoder_layers if config.architecture == "encoder-decoder" else 0
    )
    return -(-weights // max(1, layers))


# --- activations ------------------------------------------------------------------------------------------------


def finetune_activations(config: ResolvedShape, workload: Workload, counts: AdapterCounts) -> int:
    """Saved activations of one fine-tuning step (module docstring)."""
    full = saved_activations(config, replace(workload, mode="training"))
    if not counts.spec.adapters and not counts.spec.freeze:
        return full.total
    return max(
        0, full.total - _not_saved(config, workload, counts, full) + _adapter_saved(config, workload, counts)
    )


def _tokens(config: ResolvedShape, workload: Workload, stack: str | None) -> int:
    if stack == "decoder" and config.architecture == "encoder-decoder":
        return workload.batch_size * (workload.tgt_len or workload.seq_len)
    return workload.batch_size * workload.seq_len


def _not_saved(config: ResolvedShape, workload: Workload, counts: AdapterCounts, full: Breakdown) -> int:
    """Bytes full training saves that this fine-tune does not (frozen linears' inputs, the frozen prefix)."""
    if workload.recompute == "full":
        return 0
    e = workload.activation_bytes
    mods = model_modules(config) if counts.spec.adapters else None
    read: set[tuple[str | None, int | None, str]] = set()
    trainable_keys = {k.rsplit("/", 1)[0] if counts.spec.adapters else k for k, _ in counts.trainable.items()}
    if mods is not None:
        for m in counts.modules:
            read.add((m.stack, m.layer, _role_group(m.key, m.name)))
    removed = 0
    first = _first_trainable(config, counts)
    # a frozen norm keeps what full training counts for it, its input (t d): RMSNorm's x_normed * weight would
    # also save x_normed, but only for the weight's gradient, and full training does not count that one
    for index, (stack_name, layers, block_ffn_width, q_width, d) in enumerate(_layer_shapes(config)):
        t = _tokens(config, workload, stack_name)
        for layer in range(layers):
            if (index, layer) < first:
                continue  # counted below with the whole prefix
            if mods is None:  # --freeze: trainable layers keep everything
                continue
            if (stack_name, layer, "attention_in") not in read:
                removed += t * e * d
            if workload.attention == "eager" and (stack_name, layer, "attention_out") not in read:
                removed += t * e * q_width
            if block_ffn_width and (stack_name, layer, "ffn_in") not in read:
                removed += t * e * d
            if block_ffn_width and (stack_name, layer, "ffn_out") not in read:
                removed += t * e * block_ffn_width
    if "head/lm" in full and not any(k.startswith("head/lm") for k in trainable_keys):
        removed += _tokens(config, workload, "decoder") * e * config.resolved_token_embed_dim
    removed += _prefix_saved(config, workload, full, first)
    return removed


def _role_group(key: str, name: str) -> str:
    if key.endswith("attention/qkv") or key.endswith(("attention/q_a", "attention/kv_a", "attention/q")):
        return "attention_in"
    if key.endswith("attention/out"):
        return "attention_out"
    if key.endswith("ffn/in"):
        return "ffn_in"
    if key.endswith("ffn/out"):
        return "ffn_out"
    return "other"


def _layer_shapes(config: ResolvedShape) -> list[tuple[str, int, int, int, int]]:
    """(stack, layers, dense FFN width or 0, query width, embed_dim) per stack; MoE layers keep everything."""
    from embedcalc.analysis.structure import stacks

    out = []
    for stack in stacks(config):
        plan = config.stack_plan(stack.name)
        block = plan.block_at(0)
        ffn = block.ffn.ffn_dim if block.ffn is not None and not block.ffn.moe else 0
        q = config.num_heads * config.resolved_head_dim
        out.append((stack.name, plan.num_layers, int(ffn or 0), q, config.embed_dim))
    return out


def _stack_names(config: ResolvedShape) -> list[str]:
    from embedcalc.analysis.structure import stacks

    return [s.name for s in stacks(config)]


def _first_trainable(config: ResolvedShape, counts: AdapterCounts) -> tuple[int, int]:
    """(stack index, layer) of the first layer with a trainable parameter; layers before it save nothing.
    (0, 0): the first layer (or the embedding) is trainable; past the end: no layer is."""
    names = _stack_names(config)
    if counts.spec.adapters:
        layered = [
            (names.index(m.stack or names[0]), m.layer or 0) for m in counts.modules if m.layer is not None
        ]
        layered += [(names.index(p.stack), p.layer) for p in counts.expert_params]
        return min(layered) if layered else (len(names), 0)
    if any(k.startswith("embedding") for k, _ in counts.trainable.items()):
        return (0, 0)
    for item in counts.spec.freeze:
        stack, _, span = item.partition(":")
        if span.startswith("0-") or span == "0":
            name = names[0] if stack == "layers" else stack
            return names.index(name), int(span.split("-")[-1]) + 1
    return (0, 0)


def _prefix_saved(config: ResolvedShape, workload: Workload, full: Breakdown, first: tuple[int, int]) -> int:
    """What full training saves for the layers before ``first`` and the embedding (nothing needs it)."""
    if first == (0, 0):
        return 0
    from embedcalc.analysis.memory.training import layer_saved
    from embedcalc.analysis.structure import Dims

    saved = sum(v for k, v in full.items() if k.endswith("/embedding"))
    x = Dims.of(config, workload.batch_size, workload.seq_len, workload.tgt_len)
    for index, sd in enumerate(x.stacks):
        if index > first[0]:
            break
        plan = config.stack_plan(sd.name)
        stop = plan.num_layers if index < first[0] else min(first[1], plan.num_layers)
        for block, count in plan.counts(0, stop):
            per = sum(v for _, v in layer_saved(config, workload, x, block, sd, 1, workload.recompute))
            saved += int(per) * count
    return saved


def _adapter_saved(config: ResolvedShape, workload: Workload, counts: AdapterCounts) -> int:
    """What the adapters save: lora_A's output (t r), with dropout the dropped input and its mask, DoRA's lora_B
    output; the adapters' inputs are tensors the base model already holds (dropout 0)."""
    e, r = workload.activation_bytes, counts.spec.rank
    total = 0
    for m in counts.modules:
        t = _tokens(config, workload, m.stack)
        total += t * e * r
        if counts.spec.dropout > 0:
            total += t * (e + MASK_BYTES) * m.in_features
        if counts.spec.method == "dora":  # peft's DoRA: the base and LoRA outputs, each scaled
            total += 2 * t * e * m.out_features
    for p in counts.expert_params:  # tokens reach top_k of the experts
        t = _tokens(config, workload, p.stack)
        total += t * e * r
    return total
