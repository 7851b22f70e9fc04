"""``embedcalc verify DIR --checkpoint``: a real checkpoint's tensors beside the analytic count, component by
component, from the safetensors headers alone (no tensor loaded, no torch).

Per breakdown key: the tensors stored, their dtypes and bytes on disk, the parameters they hold against the analytic
count, and the analytic weight memory at the config's dtype. Conventions:

- a tensor's component comes from its module name (:mod:`embedcalc.reconcile.checkpoint_names`);
- a packed quantized weight holds several parameters per element and is shape-checked unpacked
  (:mod:`checkpoint_packed`: GPTQ/AWQ ``qweight`` and compressed-tensors ``weight_packed`` at the config's bits,
  MXFP4 ``*_blocks``, NVFP4 weights, DeepSeek-V4's FP4 experts); an FP8 weight holds one per element; their scales,
  zeros and group indices are no parameters: their bytes are reported as ``scale_bytes``;
- a tied head is stored once (transformers saves ``lm_head.weight`` only when untied); a stored one beside
  ``tie_word_embeddings`` is listed as stored twice;
- an encoder-decoder's ``model.encoder.*`` tensors are the encoder stack's, the rest the decoder's (BART, Marian);
  an embeddings' norm where the config counts none is layer 0's attention pre-norm (ModernBERT, whose layer 0
  ``attn_norm`` is an Identity: embedcalc.sources.hf.families.encoders);
- a recurrent mixer layer's tensors are its ``mixer/...`` keys (the layer's kind from the config's layer plan);
- Qwen3-Next's ``q_proj`` holds the query and the output gate (``attention/gate``), Linear(d, 2 H hd): its
  parameters and bytes are split in half between ``attention/qkv`` and ``attention/gate``; it is one of the
  tensors of each, and one tensor of the total (``stored_tensors`` counts distinct tensors);
- layers past ``num_hidden_layers`` (DeepSeek-V3's multi-token-prediction layer) and buffers (``inv_freq``) are
  listed as extra, not counted;
- an encoder's masked-LM head (``lm_head.*``, ``cls.*``) is extra: the encoder is counted as ``AutoModel``; a
  position table where the config counts none (Marian's sinusoidal one) is extra;
- a multimodal checkpoint's vision and audio towers and projectors are listed as extra, not part of the text model;
- shapes are checked tensor by tensor from the block of the tensor's layer (:mod:`checkpoint_shapes`: attention
  of every kind, dense and MoE FFNs, norms, per-layer inputs, every tensor of a recurrent mixer), so a transposed
  or reshaped tensor is named even where its component's total agrees; a tensor the layer's block does not build
  (a ``k_proj`` in a layer sharing an earlier layer's K/V) is listed as extra.

The checkpoint agrees when every component's parameters equal the analytic count, no shape disagrees and no
component the config has is missing; otherwise ``verify`` exits 3 naming the tensors.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from embedcalc.analysis.params import count_params
from embedcalc.config.dtypes import ALIASES, DTYPE_BYTES
from embedcalc.config.resolved import ResolvedShape
from embedcalc.reconcile.checkpoint_names import (
    Sublayer,
    outside_text_model,
    task_head,
    tensor_role,
    tensor_stack,
)
from embedcalc.reconcile.checkpoint_packed import ELEMENT_BITS, checked_param, packing
from embedcalc.reconcile.checkpoint_shapes import ShapeRules, refile
from embedcalc.sources.checkpoint import Checkpoint, StoredTensor

_HF_DTYPES = ALIASES  # a config.json's torch_dtype / dtype -> embedcalc's name (embedcalc.config.dtypes)
_STORED_DTYPES = {"F32": "fp32", "BF16": "bf16", "F16": "fp16"}


@dataclass(frozen=True)
class ComponentCheck:
    """One breakdown key: stored vs analytic."""

    key: str
    analytic_params: int
    stored_params: int
    tensors: int
    dtypes: tuple[str, ...]
    stored_bytes: int
    scale_bytes: int
    quantized_tensors: int
    analytic_bytes: int

    @property
    def agree(self) -> bool:
        return self.analytic_params == self.stored_params

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "analytic_params": self.analytic_params, "stored_params": self.stored_params,
                "agree": self.agree, "tensors": self.tensors, "dtypes": list(self.dtypes),
                "stored_bytes": self.stored_bytes, "scale_bytes": self.scale_bytes,
                "quantized_tensors": self.quantized_tensors, "analytic_bytes": self.analytic_bytes}  # fmt: skip


@dataclass(frozen=True)
class TensorNote:
    """A tensor named in the result: a wrong shape, or one outside every component, and why."""

    tensor: str
    shape: tuple[int, ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "shape": list(self.shape), "reason": self.reason}


@dataclass(frozen=True)
class CheckpointCheck:
    """A checkpoint reconciled with its config's analytic counts."""

    target: str
    directory: str
    files: tuple[str, ...]
    sharded: bool
    dtype: str
    components: list[ComponentCheck]
    shape_errors: list[TensorNote]
    extra: list[TensorNote]
    missing: list[str]
    # distinct tensors filed under a component (a split tensor is in two components, once here)
    stored_tensors: int
    notes: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return not self.shape_errors and not self.missing and all(c.agree for c in self.components)

    @property
    def stored_params(self) -> int:
        return sum(c.stored_params for c in self.components)

    @property
    def analytic_params(self) -> int:
        return sum(c.analytic_params for c in self.components)

    def problems(self) -> list[str]:
        """One line per disagreement, each naming the tensors."""
        lines = [f"{n.tensor} has shape {list(n.shape)}: {n.reason}" for n in self.shape_errors]
        lines += [f"{key}: the config has it, the checkpoint holds no tensor of it" for key in self.missing]
        lines += [f"{c.key}: {c.stored_params:,} parameters stored, {c.analytic_params:,} counted from the config"
                  for c in self.components if not c.agree and c.key not in self.missing]  # fmt: skip
        return lines

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "directory": self.directory, "files": list(self.files),
                "sharded": self.sharded, "dtype": self.dtype, "agree": self.agree,
                "analytic_params": self.analytic_params, "stored_params": self.stored_params,
                "stored_tensors": self.stored_tensors, "components": [c.to_json() for c in self.components],
                "shape_errors": [n.to_json() for n in self.shape_errors], "missing": list(self.missing),
                "extra": [n.to_json() for n in self.extra], "notes": list(self.notes)}  # fmt: skip


def _dtype(raw: dict[str, Any], tensors: tuple[StoredTensor, ...]) -> str:
    for key in ("dtype", "torch_dtype"):
        if isinstance(raw.get(key), str) and raw[key] in _HF_DTYPES:
            return _HF_DTYPES[raw[key]]
    floats = [t for t in tensors if t.dtype in _STORED_DTYPES]
    return _STORED_DTYPES[max(floats, key=lambda t: t.nbytes).dtype] if floats else "fp32"


class LayerKinds(Mapping[int, Sublayer]):
    """The sublayer each layer's pre-norm serves: its recurrent mixer, else attention, else its FFN alone
    (``parallel``: a recurrent mixer beside attention; ``shared``: a shared block before the mixer, Zamba2).
    Computed per layer a tensor names, on demand: the work follows the checkpoint's tensors, never the config's layer
    count (which may be 10^29, issue 33)."""

    def __init__(self, config: ResolvedShape, stack: str) -> None:
        self._plan = config.stack_plan(stack)
        self._layers = self._plan.num_layers  # a sum over runs: computed once, not per tensor

    def __getitem__(self, layer: int) -> Sublayer:
        if not 0 <= layer < self._layers:
            raise KeyError(layer)
        block = self._plan.block_at(layer)
        if block.shared is not None:  # Zamba2's hybrid layer: a shared block before its mixer
            return "shared"
        if block.mixer is not None:
            return "mixer" if block.attention is None else "parallel"
        if "mixer" in block.projections:  # its input_layernorm is the projection's norm
            return "mixer"
        return "ffn" if block.attention is None and block.ffn is not None else "attention"

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._layers))

    def __len__(self) -> int:
        return min(self._layers, sys.maxsize)


def reconcile_checkpoint(
    target: str, config: ResolvedShape, checkpoint: Checkpoint, parameters: frozenset[str] = frozenset()
) -> CheckpointCheck:
    """Every tensor of ``checkpoint`` placed on a component of ``config`` and checked (module docstring);
    ``parameters``: names the model is known to hold as parameters (a name that is a buffer in other families)."""
    # an encoder-decoder's tensors are each of one stack (tensor_stack), every other model's of its one stack
    stacks = (
        ("encoder", "decoder")
        if config.architecture == "encoder-decoder"
        else (tensor_stack("", config.architecture),)
    )
    placement = config.resolved_norm_placement
    analytic = count_params(config).as_dict()
    dtype = _dtype(checkpoint.raw_config, checkpoint.tensors)
    packed = packing(checkpoint.raw_config)
    kinds = {stack: LayerKinds(config, stack) for stack in stacks}
    # post_attention_layernorm is attention's own norm where the FFN has one after it too (Gemma 2/3 sandwich;
    # OLMo-2's post-sublayer norms, counted as pre-norms), the FFN's pre-norm otherwise (LLaMA)
    # (a parallel block's post_attention_layernorm is its FFN's pre-norm: GPT-NeoX's use_parallel_residual)
    sandwich = placement not in ("pre", "parallel") or any(
        ".post_feedforward_layernorm." in t.name for t in checkpoint.tensors
    )
    raw = checkpoint.raw_config
    text: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else {}
    model_type = raw.get("model_type") or text.get("model_type")
    rules = {stack: ShapeRules(config, stack, model_type) for stack in stacks}
    gates = {f"{s}/attention/gate" for s in stacks} & set(analytic)
    # per key: (tensor, parameters, bytes) it holds there
    stored: dict[str, list[tuple[StoredTensor, int, int]]] = defaultdict(list)
    scales: dict[str, int] = defaultdict(int)
    shape_errors: list[TensorNote] = []
    extra: list[TensorNote] = []
    notes: list[str] = []
    tied = config.tie_embeddings and "head/lm" not in analytic
    # computed once, not per tensor: each stack's depth (an encoder-decoder's decoder may be deeper, T5Gemma)
    depth = {s: config.resolved_decoder_layers if s == "decoder" and len(stacks) == 2 else config.num_layers
             for s in stacks}  # fmt: skip
    for tensor in checkpoint.tensors:
        stack = tensor_stack(tensor.name, config.architecture)
        role = tensor_role(tensor.name, stack, sandwich, kinds[stack], config.decoder_token_table,
                           tensor.name in parameters)  # fmt: skip
        if role.key == "embedding/norm" and "embedding/norm" not in analytic and stack == "encoder":
            # ModernBERT: layer 0's attn_norm is an Identity; the embeddings' norm is counted as its pre-norm
            role = replace(role, key=f"{stack}/attention/norm", layer=0)
        param = tensor.name.rsplit(".", 1)[-1]
        role = refile(role, rules[stack].block(role.layer), param)
        if (
            tower := outside_text_model(tensor.name) or task_head(tensor.name, config.architecture)
        ) is not None:
            extra.append(TensorNote(tensor.name, tensor.shape, tower))
            continue
        if tensor.name.split(".")[0] == "mtp":  # DeepSeek-V3/V4's multi-token-prediction layer
            extra.append(TensorNote(tensor.name, tensor.shape, "a multi-token prediction layer: not built by "
                                    "transformers"))  # fmt: skip
            continue
        if role.kind == "buffer":
            extra.append(TensorNote(tensor.name, tensor.shape, "a buffer, not a parameter"))
            continue
        if role.layer is not None and role.layer >= (num_layers := depth[stack]):
            extra.append(
                TensorNote(
                    tensor.name,
                    tensor.shape,
                    f"layer {role.layer} is past the config's "
                    f"{num_layers} layers (multi-token prediction): not built by transformers",
                )
            )
            continue
        if role.key == "embedding/position" and role.key not in analytic:
            extra.append(TensorNote(tensor.name, tensor.shape, "a fixed sinusoidal table (MarianModel saves it, "
                                    "requires_grad False): not a learned parameter"))  # fmt: skip
            continue
        if role.key == "head/lm" and tied:
            extra.append(
                TensorNote(tensor.name, tensor.shape, "the head is tied to the token embedding: stored twice")
            )
            continue
        if role.key is None:
            extra.append(TensorNote(tensor.name, tensor.shape, "no component of the config holds it"))
            continue
        checked = checked_param(param, role.kind)
        expected = rules[stack].tensor_shape(role, checked) if checked is not None else None
        if expected is not None and expected[0] is None:
            extra.append(TensorNote(tensor.name, tensor.shape, expected[1]))
            continue
        if role.kind == "scale":
            scales[role.key] += tensor.nbytes
            stored[role.key].append((tensor, 0, tensor.nbytes))
            continue
        params = packed.params(tensor, role.kind, role.key)
        gate = f"{stack}/attention/gate"
        if gate in gates and role.key == f"{stack}/attention/qkv" and role.module.endswith("q_proj"):
            stored[gate].append((tensor, params // 2, tensor.nbytes // 2))
            stored[role.key].append((tensor, params - params // 2, tensor.nbytes - tensor.nbytes // 2))
        else:
            stored[role.key].append((tensor, params, tensor.nbytes))
        shape = packed.logical_shape(tensor, role.kind, role.key, param, rules[stack].input_major)
        if expected is not None and expected[0] is not None and shape != expected[0]:
            unpacked = f" (unpacked {list(shape)})" if shape != tensor.shape else ""
            shape_errors.append(TensorNote(tensor.name, tensor.shape, f"the config gives {list(expected[0])} "
                                           f"({expected[1]}){unpacked}"))  # fmt: skip
    if gates:
        notes.append(
            "q_proj holds the query and the output gate: split in half, attention/qkv and attention/gate "
            "(one tensor of each, once in the total)"
        )
    if tied:
        notes.append("LM head tied to the token embedding: stored once, as embedding/token")
    components = []
    for key in [*analytic, *(k for k in stored if k not in analytic)]:
        rows = stored.get(key, [])
        weights = [t for t, p, _ in rows if p]
        components.append(ComponentCheck(
            key, analytic.get(key, 0), sum(p for _, p, _ in rows), len(rows),
            tuple(sorted({t.dtype for t, _, _ in rows})), sum(b for _, _, b in rows), scales.get(key, 0),
            sum(1 for t in weights if t.dtype.startswith("F8") or t.dtype in ELEMENT_BITS),
            int(analytic.get(key, 0) * DTYPE_BYTES[dtype])))  # fmt: skip
    missing = [key for key, count in analytic.items() if count and not stored.get(key)]
    filed = len({t.name for rows in stored.values() for t, _, _ in rows})
    quantized = sum(c.quantized_tensors for c in components)
    if quantized:
        how = packed.why or f"packed integers at {packed.bits} bits, or FP8"
        notes.append(f"{quantized} quantized weight tensors ({how}), counted unpacked; their scales apart")
    return CheckpointCheck(target, str(checkpoint.directory), checkpoint.files, checkpoint.sharded, dtype,
                           components, shape_errors, extra, missing, filed, notes)  # fmt: skip
