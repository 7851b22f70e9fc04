"""Packed quantized weights in a checkpoint: how many parameters a stored tensor holds, and the logical shape its
packed shape stands for (``verify --checkpoint``).

A format of fewer than 8 bits per value stores several values per integer element; the count and the shape checked
are the unpacked ones. Which tensors are packed, and at how many bits, comes from the config's
``quantization_config``, its format recognised as :func:`embedcalc.sources.hf.quantization.quantized_dtype`
recognises it for the analysis' dtype:

- GPTQ / AWQ (``bits``) and compressed-tensors (``config_groups.*.weights.num_bits``): ``qweight`` /
  ``weight_packed`` int32 (or uint8) tensors hold ``element bits / bits`` values per element;
- MXFP4 (``quant_method: mxfp4``, gpt-oss): ``<projection>_blocks`` uint8 (..., out, in / 32, 16), two E2M1 values per
  byte in blocks of 32 beside one E8M0 exponent per block in ``<projection>_scales`` (..., out, in / 32)
  (transformers' ``integrations/mxfp4.py``: ``_convert_moe_packed_tensors`` unpacks each byte into two values along
  the input dimension, so the blocks are stored output-major even where the BF16 tensor is input-major);
- NVFP4 (``quant_method: modelopt``, ``quant_algo: NVFP4``; NVIDIA TensorRT Model Optimizer's export): each quantized
  linear's ``weight`` uint8 (out, in / 2), two E2M1 values per byte, with ``weight_scale`` (FP8, one per 16
  values), ``weight_scale_2`` and ``input_scale`` (FP32 scalars);
- FP4 experts of an FP8 checkpoint (``quant_method: fp8`` with ``expert_dtype: fp4``, in the quantization config
  or, DeepSeek-V4's, at the top level: transformers' ``FineGrainedFP8Config.expert_dtype`` and
  ``DeepseekV4Config.__post_init__``): the routed experts' weights int8 (out, in / 2), two E2M1 values per byte
  (``FP8Experts``: "weight is int8, K dim halved"), their scales one UE8M0 byte per 32 values.

Every other tensor holds one parameter per element (an FP8 weight, an int8 weight at 8 bits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from embedcalc.sources.checkpoint import StoredTensor
from embedcalc.sources.hf.quantization import quantized_dtype

# bits of one stored element of the integer dtypes a packed tensor uses (safetensors' names)
ELEMENT_BITS = {"I32": 32, "U32": 32, "I16": 16, "U16": 16, "I8": 8, "U8": 8}
BLOCKS = "_blocks"  # MXFP4's packed values (gpt-oss); their exponents are "<projection>_scales"
_FP4 = (
    "mxfp4",
    "nvfp4",
)  # the dtypes of sources/hf/quantization.py whose weights are two E2M1 values per byte


@dataclass(frozen=True)
class Packing:
    """How a checkpoint packs its quantized weights: ``bits`` per value of its packed tensors (``qweight``,
    ``weight_packed``, ``_blocks``), and which plain-named integer weights hold two FP4 values per byte
    (``fp4``: ``all`` of them, the routed ``experts`` only, or none)."""

    bits: int
    fp4: str | None
    why: str | None

    def params(self, tensor: StoredTensor, kind: str, key: str) -> int:
        """The parameters ``tensor`` (placed with ``kind`` under breakdown ``key``) holds."""
        per = self.per_element(tensor, kind, key)
        return tensor.numel * per if per else tensor.numel

    def per_element(self, tensor: StoredTensor, kind: str, key: str) -> int | None:
        """Values per stored element of a packed tensor; None for one that is not packed."""
        element = ELEMENT_BITS.get(tensor.dtype)
        if element is None:
            return None
        if kind == "packed":
            return max(element // self.bits, 1)
        if kind == "weight" and tensor.dtype in ("U8", "I8") and self.holds_fp4(key):
            return 2
        return None

    def holds_fp4(self, key: str) -> bool:
        return self.fp4 == "all" or (self.fp4 == "experts" and key.endswith("/moe/experts"))

    def logical_shape(
        self, tensor: StoredTensor, kind: str, key: str, param: str, input_major: bool
    ) -> tuple[int, ...]:
        """The unpacked shape: MXFP4's (..., out, in / 32, 16) blocks as (..., out, in), or (..., in, out) where
        the model's fused experts are input-major (``input_major``: gpt-oss's BF16 ``gate_up_proj`` is (E, d, 2 I));
        any other packed tensor with its last (input) dimension times the values per element. GPTQ's ``qweight``
        (in / 8, out) packs its first dimension: its shape is not checked (None from :func:`checked_param`)."""
        per = self.per_element(tensor, kind, key)
        shape = tensor.shape
        if not per or not shape:
            return shape
        if param.endswith(BLOCKS) and len(shape) >= 3:
            *lead, out, groups, width = shape
            return (*lead, groups * width * per, out) if input_major else (*lead, out, groups * width * per)
        return (*shape[:-1], shape[-1] * per)


def checked_param(param: str, kind: str) -> str | None:
    """The parameter name whose shape rule a tensor is checked by: a weight's own, an MXFP4 ``gate_up_proj_blocks``
    as ``gate_up_proj``, compressed-tensors' ``weight_packed`` (packed along its input dimension) as ``weight``;
    None for GPTQ / AWQ's ``qweight`` (in / 8, out: packed along its first dimension), counted, not shape-checked."""
    if kind == "weight":
        return param
    if kind == "packed" and param.endswith(BLOCKS):
        return param.removesuffix(BLOCKS)
    return "weight" if kind == "packed" and param == "weight_packed" else None


def _num_bits(quant: Mapping[str, Any]) -> int | None:
    """``bits`` (GPTQ/AWQ) or compressed-tensors' ``config_groups.*.weights.num_bits``."""
    if type(quant.get("bits")) is int and 0 < quant["bits"] <= 32:
        return int(quant["bits"])
    groups = quant.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if (
            isinstance(weights, dict)
            and type(weights.get("num_bits")) is int
            and 0 < weights["num_bits"] <= 32
        ):
            return int(weights["num_bits"])
    return None


def packing(raw: Mapping[str, Any]) -> Packing:
    """The config's packing (module docstring); 4 bits and no FP4 weights when it names none."""
    quant = raw.get("quantization_config") or raw.get("compression_config") or {}
    if not isinstance(quant, Mapping):
        quant = {}
    found = quantized_dtype(quant)  # the format the analysis reads the model's dtype from
    if found is not None and found[0] in _FP4:
        return Packing(4, "all", f"{found[1]}; two E2M1 values per byte")
    expert_dtype = quant.get("expert_dtype", raw.get("expert_dtype"))
    if quant.get("quant_method") == "fp8" and expert_dtype == "fp4":
        return Packing(
            4, "experts", "expert_dtype fp4: the routed experts' int8 weights hold two E2M1 values each"
        )
    bits = _num_bits(quant)
    return Packing(bits or 4, None, None if bits is None else f"{bits}-bit packed weights")
