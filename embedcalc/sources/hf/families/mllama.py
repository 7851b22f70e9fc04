"""Llama-3.2-Vision's text model (``mllama_text_model``; the ``text_config`` of an ``mllama`` file is counted as it):
transformers' ``MllamaForCausalLM``, ``MllamaTextModel`` and an untied LM head.

Meta, "Llama 3.2" (2024) and transformers' ``configuration_mllama.py`` / ``modeling_mllama.py``. A Llama 3 decoder
(RMSNorm pre-norm, RoPE, GQA, bias-free gated MLP) in which the layers listed in ``cross_attention_layers`` are
``MllamaCrossAttentionDecoderLayer`` instead of self-attention layers:

- ``MllamaTextCrossAttention``: q_proj from the text, k_proj / v_proj from ``cross_attention_states`` (the vision
  tower's output after ``multi_modal_projector``, hidden_size wide), an RMSNorm of head_dim on the queries and one on
  the keys (``q_norm``, ``k_norm``), no RoPE, no causal mask, o_proj; head_dim = hidden_size / num_attention_heads;
- tanh gates ``cross_attn_attn_gate`` and ``cross_attn_mlp_gate`` (one scalar each) on the attention and MLP
  outputs; the layer's own input and post-attention RMSNorms and a gated MLP as the other layers';
- its cache holds the K and V of the vision tokens, computed once per image.

The token table has ``vocab_size + 8`` rows (``MllamaTextModel.embed_tokens``: the image token and reserved ids);
the LM head predicts ``vocab_size``. The vision tokens a cross-attention layer reads, per sequence of one image, are
``max_num_tiles x ((image_size // patch_size)^2 + 1)`` (``MllamaVisionModel.num_patches``: the patches and a class
token per tile; every image is padded to max_num_tiles tiles, and ``MllamaModel`` reshapes the projected states to
(batch, images x tiles x patches, hidden)): from the outer file's ``vision_config`` when there is one (6404 for
Llama-3.2-11B-Vision's 560-pixel tiles), else ``MllamaVisionConfig``'s defaults (448 / 14, 4 tiles: 4100).
``context_tokens`` changes the count (``--set context_tokens=...``, e.g. for more images). The vision tower and
projector are not counted (the text model is, as for Qwen2.5-VL's): ``MllamaVisionModel`` is a second stack (a
patch convolution, gated tile and position embeddings, a 32-layer local and an 8-layer gated global encoder, the
intermediate-layer concatenation) that the layer model does not describe, so counting it would mean a separate,
hand-written formula; verify --checkpoint lists its tensors as held by no component of the text model.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import int_list, put_layout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, Origin

EXTRA_ROWS = 8  # MllamaTextModel: nn.Embedding(config.vocab_size + 8, hidden_size)
# MllamaVisionConfig's defaults for the sizes that decide the vision tokens
VISION_DEFAULTS = {"image_size": 448, "patch_size": 14, "max_num_tiles": 4}
CROSS_BLOCK = {"attention": {"cross": True, "qk_norm": "head", "tanh_gates": True}}


def _side(value: Any, index: int) -> Any:
    """One side of an ``image_size`` / ``patch_size``: an int, or the height / width of a pair."""
    if isinstance(value, list | tuple) and len(value) == 2:
        return value[index]
    return value


def vision_tokens(vision: dict[str, Any]) -> int | None:
    """Tokens per image the cross-attention layers read: max_num_tiles x ((image / patch)^2 + 1) (module docstring);
    None when a size is not a positive integer."""
    sizes = {k: vision.get(k, v) for k, v in VISION_DEFAULTS.items()}
    sides = [(_side(sizes["image_size"], i), _side(sizes["patch_size"], i)) for i in (0, 1)]
    numbers = [*(x for pair in sides for x in pair), sizes["max_num_tiles"]]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in numbers):
        return None
    patches = int(sides[0][0] // sides[0][1]) * int(sides[1][0] // sides[1][1])
    return int(sizes["max_num_tiles"]) * (patches + 1)


def _read_context(r: KeyReader) -> None:
    """``context_tokens`` from the forwarded ``vision_config`` of an ``mllama`` file, else the class defaults."""
    key, vision = r.lookup("vision_config")
    origin: Origin = "file" if vision is not MISSING else "default"
    if vision is MISSING or vision is None:
        vision, key = {}, "vision_config (MllamaVisionConfig defaults)"
    if not isinstance(vision, dict):
        r.problem(key, f"{key} must be an object (MllamaVisionConfig's keys); got {vision!r}")
        return
    tokens = vision_tokens(vision)
    if tokens is None:
        r.problem(key, f"{key}: image_size, patch_size and max_num_tiles must be positive integers; got "
                       f"{ {k: vision.get(k, v) for k, v in VISION_DEFAULTS.items()} }")  # fmt: skip
        return
    sizes = {k: vision.get(k, v) for k, v in VISION_DEFAULTS.items()}
    note = (f"vision tokens of one image: max_num_tiles {sizes['max_num_tiles']} x ((image_size "
            f"{sizes['image_size']} // patch_size {sizes['patch_size']})^2 + 1); the vision tower itself is not "
            "counted")  # fmt: skip
    r.put("context_tokens", tokens, key, origin, note)


def _read_mllama_text(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False, dropout_key="dropout")
    r.fixed("extra_token_rows", EXTRA_ROWS, "MllamaTextModel's embed_tokens: vocab_size + 8 rows")
    layers = r.data.get("num_layers")
    key, value, _ = r.value("cross_attention_layers")
    if value is None:  # MllamaTextConfig.__post_init__'s default
        value = [3, 8, 13, 18, 23, 28, 33, 38]
    if not isinstance(layers, int):
        return
    listed = int_list(r, key, value, layers)
    if listed is None:
        return
    if not listed:
        r.ignore(key, "no layer is a cross-attention layer")
        r.ignore("vision_config", "no layer reads the vision tokens")
        return
    names = ["cross" if i in listed else "default" for i in range(layers)]
    note = (f"{len(set(listed))} cross-attention layers (MllamaCrossAttentionDecoderLayer: q/k norms, tanh gates, "
            f"K/V of the vision tokens), {layers - len(set(listed))} self-attention")  # fmt: skip
    put_layout(r, names, {"cross": CROSS_BLOCK}, key, note)
    _read_context(r)


FAMILIES = (
    Family("mllama_text_model", "MllamaTextConfig", "MllamaForCausalLM (the text model of "
           "MllamaForConditionalGeneration, with its LM head)", "llama-3.2-11b-vision",
           dict(vocab_size=128256, hidden_size=4096, hidden_act="silu", num_hidden_layers=40, num_attention_heads=32,
                num_key_value_heads=8, intermediate_size=14336, max_position_embeddings=131072,
                tie_word_embeddings=False, cross_attention_layers=None, dropout=0.0), _read_mllama_text),
)  # fmt: skip
