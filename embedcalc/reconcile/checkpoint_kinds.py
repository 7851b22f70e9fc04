"""What kind of tensor a checkpoint name is, before which component it belongs to
(:mod:`embedcalc.reconcile.checkpoint_names`): a weight, a packed quantized weight (several parameters per stored
element), a quantization side tensor (scales, zero points, group indices: the module they quantize owns them, they
count no parameters), or a buffer a checkpoint may carry (rotary tables, routing biases, decay tables), which is no
parameter either.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["weight", "packed", "scale", "buffer"]
# ERNIE 4.5's moe_statics.e_score_correction_bias is an nn.Parameter (Ernie4_5_MoeStatics), DeepSeek's a buffer
PARAM_STATICS = "moe_statics"
PACKED = ("qweight", "weight_packed")  # packed integer weights: several parameters per stored element
# NVFP4 (ModelOpt): weight_scale_2 and input_scale, FP32 scalars beside the FP8 weight_scale; compressed-tensors'
# NVFP4: weight_global_scale, input_global_scale; ModelOpt's FP8 KV cache: self_attn.k_scale / v_scale
SCALES = ("qzeros", "scales", "g_idx", "weight_scale_inv", "weight_scale", "input_scale", "weight_zero_point",
          "weight_g_idx", "weight_shape", "zeros", "absmax", "quant_map", "weight_scale_2", "weight_global_scale",
          "input_global_scale", "k_scale", "v_scale")  # fmt: skip
# a fused expert tensor's quantization side tensors, named after its projection: MXFP4's gate_up_proj_blocks (packed
# values) and gate_up_proj_scales (gpt-oss), FP8Experts' gate_up_proj_scale_inv (transformers' finegrained_fp8.py)
PACKED_SUFFIXES = ("_blocks",)
SCALE_SUFFIXES = ("_scales", "_scale_inv")
BUFFERS = (
    "inv_freq",
    "e_score_correction_bias",
    "masked_bias",
    "attn.bias",
    "position_ids",
    "slope_rate",
    "query_decay",
    "key_decay",
    "diagonal_decay",
    "feed_forward.expert_bias",
    "layer_scalar",
    "act_fn.beta",
    "act_fn.eps",
    "final_logits_bias",
    "tid2eid",
    "token_ordering",
)  # fmt: skip (Gemma 4's layer_scalar: nn.Buffer(torch.ones(1)), saved with the weights; XIELUActivation's beta and
# eps (transformers/activations.py), BartForConditionalGeneration's final_logits_bias and Gemma 4's assistant's
# masked_embedding.token_ordering are nn.Buffers too)


_BUFFER_SUFFIXES = tuple(
    f".{b}" for b in BUFFERS
)  # one C-level endswith per name (a header may hold 200,000)


def split_kind(name: str) -> tuple[str, str, Kind]:
    """(module path, parameter name, kind) of a tensor name."""
    module, _, param = name.rpartition(".")
    if (name in BUFFERS or name.endswith(_BUFFER_SUFFIXES)) and not module.endswith(PARAM_STATICS):
        return module, param, "buffer"
    if param in PACKED or param.endswith(PACKED_SUFFIXES):
        return module, param, "packed"
    if param in SCALES or param.endswith(SCALE_SUFFIXES):
        return module, param, "scale"
    return module, param, "weight"
