"""A config.json's ``quantization_config`` -> the model's own dtype and the matrices it covers (DESIGN.md §14: the
default dtype is the model's own, and the output says where it came from).

The methods that name a format embedcalc counts (:mod:`embedcalc.config.dtypes`), as transformers' quantizers
and the checkpoints that use them write them:

- ``quant_method: fp8`` (transformers' ``FineGrainedFP8Config``; DeepSeek-V3's e4m3 blocks) -> fp8;
- ``quant_method: mxfp4`` (transformers' ``Mxfp4Config``, ``integrations/mxfp4.py``; gpt-oss) -> mxfp4;
- ``quant_method: modelopt`` (NVIDIA TensorRT Model Optimizer's exported checkpoints) with ``quant_algo`` FP8 or
  NVFP4 -> fp8 or nvfp4.

Which matrices they cover (the config's ``quantized``): the quantizer converts every ``nn.Linear`` (for gpt-oss
the experts' stacked projections too) except the modules the config names (``modules_to_not_convert``; ModelOpt
``exclude_modules`` or ``ignore``). When that list leaves the attention out (a pattern naming ``attn`` or
``attention``) in a mixture-of-experts model, only the routed experts are quantized (``experts``): gpt-oss lists
``model.layers.*.self_attn``, ``model.layers.*.mlp.router``, ``model.embed_tokens`` and ``lm_head``. Otherwise
the layers' linear matrices are (``layers``, the default; the embeddings and head stay in the activation dtype
whatever the list says, as the memory model counts them). Another method is not a dtype embedcalc names: the
unquantized dtype is read and ``--dtype`` sets one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embedcalc.sources.hf.reader import KeyReader

_MODELOPT = {"FP8": "fp8", "NVFP4": "nvfp4"}
_EXCLUDED_KEYS = ("modules_to_not_convert", "exclude_modules", "ignore")


def quantized_dtype(quant: Mapping[str, Any]) -> tuple[str, str] | None:
    """(dtype, why) of a ``quantization_config`` whose method names a format embedcalc counts; None otherwise."""
    method = quant.get("quant_method")
    if method == "fp8":
        return "fp8", "quant_method fp8: the weights are stored in FP8"
    if method == "mxfp4":
        return "mxfp4", "quant_method mxfp4: E2M1 values in blocks of 32 with an E8M0 scale (OCP MX)"
    algo = quant.get("quant_algo")
    if method == "modelopt" and isinstance(algo, str) and algo.upper() in _MODELOPT:
        return _MODELOPT[algo.upper()], f"quant_method modelopt, quant_algo {algo}"
    return None


def excluded_modules(quant: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """(the key, its module patterns) of the modules the quantizer leaves alone; None when none are listed."""
    for key in _EXCLUDED_KEYS:
        value = quant.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return key, value
    return None


def read_quantization(reader: KeyReader, quant: Mapping[str, Any]) -> bool:
    """Map ``quant`` onto ``dtype`` (and ``quantized`` when only the experts are converted); False when its
    method is not a format embedcalc counts (module docstring)."""
    found = quantized_dtype(quant)
    if found is None:
        return False
    dtype, why = found
    reader.consumed.add("quantization_config")
    reader.put("dtype", dtype, "quantization_config", "file", why)
    excluded = excluded_modules(quant)
    ffn = reader.data.get("ffn")
    moe = isinstance(ffn, Mapping) and ffn.get("kind") == "moe"
    if excluded is not None and moe:
        key, patterns = excluded
        if any("attn" in p or "attention" in p for p in patterns):
            shown = ", ".join(patterns)
            reader.put("quantized", "experts", f"quantization_config.{key}", "file",
                       f"not converted: {shown}; only the routed experts are {dtype}")  # fmt: skip
    return True
