"""The one dtype vocabulary (DESIGN.md §14): the names every flag, config file, JSON output and the Python API use.

Short names are canonical and are what JSON writes: ``fp32``, ``bf16``, ``fp16``, ``fp8``, ``mxfp4``, ``nvfp4``,
``int8``, ``int4``. The
long names people and checkpoints also write (``float32``, ``bfloat16``, ``float16``: PyTorch's and a Hugging Face
``config.json``'s ``torch_dtype``) are accepted as aliases wherever a dtype is read, and become the short ones.

What each name means for the cost (stated once; memory and the roofline read it from here):

- ``fp32``, ``bf16``, ``fp16``: weights, activations and KV cache in that format (4, 2, 2 bytes per element).
- ``fp8`` (E4M3, as FP8 inference and training run it: NVIDIA Transformer Engine, DeepSeek-V3 §3.3, TensorRT-LLM):
  weights stored in 1 byte and the linear layers' GEMMs run at the device's FP8 peak; everything else stays in
  bf16: the activations and KV cache between layers (2 bytes; ``--kv-dtype fp8`` stores the cache in fp8), the
  attention score and context matmuls (softmax(QKᵀ)V runs in bf16 in FlashAttention-2 and PyTorch's SDPA), norms,
  softmax and element-wise work, and the embeddings and the LM head (kept in bf16 by Transformer Engine's
  recipes and DeepSeek-V3's). A device without an FP8 peak refuses it (exit 3).
- ``int8``, ``int4``: weight-only quantization (GPTQ, Frantar et al. 2022; AWQ, Lin et al. 2023): the weights of
  the linear layers stored in 8 or 4 bits with an fp16 scale and zero point per group of ``quant_group_size``
  input values (:func:`embedcalc.analysis.memory.inference.weight_bytes`); dequantized and multiplied in fp16,
  so activations and KV cache are fp16 and the GEMMs run at the fp16 peak. Inference only.
- ``mxfp4``, ``nvfp4``: 4-bit floating point (E2M1) weights in blocks that share a scale, the linear layers'
  matrices inside the layers (or only the routed experts: the config's ``quantized``), the rest bf16 as under fp8:

  - ``mxfp4`` (OCP Microscaling Formats (MX) Specification v1.0, 2023, §5.3 and Table 1): 32 consecutive input
    values of a row share one E8M0 scale (a power of two, 1 byte): 16 + 1 = 17 bytes per 32 values, 4.25 bits
    a value; gpt-oss ships its experts so (OpenAI 2025, gpt-oss model card §2.1: "4.25 bits per parameter").
  - ``nvfp4`` (NVIDIA, "Introducing NVFP4 for efficient and accurate low-precision inference", 2025; TensorRT
    Model Optimizer's NVFP4 checkpoints): 16 values share one FP8 E4M3 scale: 8 + 1 = 9 bytes per 16 values,
    plus per matrix an fp32 second-level weight scale (``weight_scale_2``) and the fp32 scale of its input
    activations (``input_scale``): 8 bytes a stored matrix.

  On a device with an FP4 peak in the catalogue (Blackwell: B200, GB200) the quantized GEMMs run on its FP4
  tensor cores: ``nvfp4`` as W4A4 at the FP4 peak (the activations quantized to NVFP4 on the fly, as TensorRT-LLM
  runs ModelOpt's NVFP4 checkpoints), ``mxfp4`` as W4A8 at the FP8 peak (the activations quantized to MXFP8: the
  engines' MXFP4 MoE kernels on Blackwell, TensorRT-LLM's gpt-oss support matrix, examples/models/core/gpt_oss/
  README.md: "Blackwell | mxfp8 | mxfp4", and vLLM's FlashInfer MXFP4 x MXFP8 path; Blackwell's mixed FP4 x FP8
  MMA runs at the FP8 rate). Elsewhere a model's own FP4 weights (a preset's or a config.json's
  ``quantization_config``) run weight-only, dequantized to bf16 and multiplied at the bf16 peak (the same support
  matrix: "Hopper | bf16 | mxfp4"; vLLM's Marlin and Triton MXFP4 kernels on Hopper and Ampere), and an FP4
  ``--dtype`` asked for explicitly is refused naming the device (exit 3). Inference only.

The KV cache (``--kv-dtype``, apart from the weights; default the activations' dtype) takes ``fp32``, ``bf16``,
``fp16``, ``fp8``, ``int8`` (a byte a value) and ``nvfp4`` (:data:`KV_ELEMENT_BYTES`: 9 bytes per 16 values, only on a
device with FP4 tensor cores and for a model whose cached vectors are whole 16-value blocks; the attention math is
costed as with the other KV dtypes, only the bytes change).

Where a workload's dtype came from (``dtype_source``): ``flag`` (``--dtype``, or ``dtype=`` in the Python API),
``preset`` (the published dtype a shipped preset records), ``config`` (a config file's ``dtype``, or a Hugging
Face ``config.json``'s ``torch_dtype`` / ``dtype``), ``default`` (none of these: fp32).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, get_args

Dtype = Literal["fp32", "bf16", "fp16", "fp8", "mxfp4", "nvfp4", "int8", "int4"]
DTYPES: tuple[Dtype, ...] = get_args(Dtype)
KvDtype = Literal[
    "fp32", "bf16", "fp16", "fp8", "nvfp4", "int8"
]  # a KV cache stored apart from the activations
KV_DTYPES: tuple[KvDtype, ...] = get_args(KvDtype)
DtypeSource = Literal["flag", "preset", "config", "default"]
DEFAULT_DTYPE: Dtype = "fp32"

ALIASES: dict[str, Dtype] = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

# Bytes per stored element (int4 packs two per byte; quantization scales are counted apart, per group; the FP4
# formats' block scales are in their figure: 17 / 32 and 9 / 16, the per-matrix scales apart).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "mxfp4": 17 / 32, "nvfp4": 9 / 16, "int8": 1, "int4": 0.5,
}  # fmt: skip
# Bytes per cached value of each --kv-dtype: exact, as a fraction where a value takes less than a byte. nvfp4 (NVIDIA's
# NVFP4 KV cache: TensorRT-LLM's "NVFP4 KV Cache" recipe, ModelOpt-calibrated; vLLM on Blackwell): 16 consecutive
# values of a cached K or V vector (along the head dimension) in E2M1 with one E4M3 scale, 9 bytes per 16 values, as
# the nvfp4 weights store them; the per-layer fp32 K and V scales are the checkpoint's, not the cache's. A model
# whose cached vectors are not whole blocks (a head width not a multiple of 16) is refused nvfp4 KV
# (analysis.memory.capacity_search.kv_dtype_problem), so the count is exact wherever it is given.
KV_ELEMENT_BYTES: dict[str, int | Fraction] = {
    "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1,
}  # fmt: skip
# KV dtypes engines store only on a device with an FP4 peak (Blackwell): TensorRT-LLM's NVFP4 KV cache kernels
# (XQA/FMHA read it dequantized to FP8) and vLLM's are built for SM100 and later
FP4_KV_DTYPES = frozenset({"nvfp4"})
WEIGHT_ONLY_DTYPES = frozenset({"int8", "int4"})
FP4_DTYPES = frozenset({"mxfp4", "nvfp4"})
INFERENCE_ONLY_DTYPES = WEIGHT_ONLY_DTYPES | FP4_DTYPES  # no training in these formats here


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format (module docstring): values per block along a row's inputs, bytes of a full block
    (the packed values and their shared scale), and fp32 bytes per stored matrix (nvfp4's two per-tensor scales)."""

    block: int
    block_bytes: int
    per_matrix_bytes: int


# mxfp4: 32 E2M1 values + one E8M0 scale (OCP MX v1.0, Table 1); nvfp4: 16 E2M1 values + one E4M3 scale, and
# per matrix the fp32 weight and input scales
BLOCK_FORMATS: dict[str, BlockFormat] = {
    "mxfp4": BlockFormat(32, 32 // 2 + 1, 0),
    "nvfp4": BlockFormat(16, 16 // 2 + 1, 2 * 4),
}
# the nvfp4 KV cache stores its blocks as the nvfp4 weights do (the per-matrix scales are the checkpoint's)
KV_ELEMENT_BYTES["nvfp4"] = Fraction(BLOCK_FORMATS["nvfp4"].block_bytes, BLOCK_FORMATS["nvfp4"].block)
BENCH_DTYPES: tuple[Dtype, ...] = ("fp32", "bf16", "fp16")  # what the torch model runs in (modeling.device)

# The activation (and default KV cache) dtype of each weight dtype: fp8 keeps bf16 between layers, the weight-only
# formats dequantize to fp16 (module docstring).
ACTIVATION_DTYPE: dict[str, Dtype] = {
    "fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16", "mxfp4": "bf16", "nvfp4": "bf16",
    "int8": "fp16", "int4": "fp16",
}  # fmt: skip


class DtypeError(ValueError):
    """A name that is not in the vocabulary (the caller turns it into its own error: a flag, a config field)."""


def dtype_choices(choices: tuple[str, ...] = DTYPES, sep: str = "|") -> str:
    """``fp32|bf16|...`` and the aliases that apply, for messages and help (``sep=" | "``: a list --help wraps
    between two names)."""
    aliases = [f"{long}={short}" for long, short in ALIASES.items() if short in choices]
    return sep.join(choices) + (f" (or {', '.join(aliases)})" if aliases else "")


def canonical_dtype(value: object, choices: tuple[str, ...] = DTYPES) -> str:
    """The short name of ``value`` (a short name or an alias, in any case, with or without PyTorch's ``torch.``
    prefix: ``BF16``, ``BFloat16`` and ``torch.bfloat16`` are ``bf16``) among ``choices``; DtypeError otherwise."""
    name: object = value
    if isinstance(value, str):
        name = value.strip().lower().removeprefix("torch.")
        name = ALIASES.get(str(name), name)
    if not isinstance(name, str) or name not in choices:
        raise DtypeError(f"{value!r} is not a dtype here; use {dtype_choices(choices)}")
    return name
