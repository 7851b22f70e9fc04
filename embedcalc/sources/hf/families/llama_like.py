"""Decoders built like LLaMA (RMSNorm or LayerNorm, pre-norm, RoPE, an MLP), each with the one thing that sets it
apart, read off its ``modeling_*.py``: Granite's scalar multipliers, Seed-OSS's separate out-projection bias,
Nemotron's LayerNorm1P and squared-ReLU MLP, StarCoder2's LayerNorm with biases everywhere, GLM's partial rotary,
GLM-4's sandwich norms, HunYuan's per-head q/k norms, Apertus' q/k norms and learned xIELU activation, Phi-3's
fused projections, Ministral's layer_types.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import FULL, SLIDING, put_window_layout
from embedcalc.sources.hf.mappings import LEARNED_ACTIVATIONS, map_partial_rotary
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, yaml_hint

SCALARS = "a scalar multiplier: no parameters, no matmul FLOPs"


def _llama_biases(r: KeyReader) -> None:
    """q/k/v/o from attention_bias, the MLP from mlp_bias (LlamaAttention, LlamaMLP)."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")


def _read_smollm3(r: KeyReader) -> None:
    _llama_biases(r)
    r.ignore("max_window_layers", "read only with use_sliding_window")
    for key in ("no_rope_layers", "no_rope_layer_interval"):
        r.ignore(key, "which layers skip RoPE: rotary embeddings have no parameters and no matmul FLOPs")
    _windows(r)


def _read_hunyuan(r: KeyReader) -> None:
    """HunYuanDenseV1Attention: query_layernorm / key_layernorm, RMSNorm(head_dim) shared by the heads; the MLP
    has no biases."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.ignore("mlp_bias", "HunYuanDenseV1MLP builds no biases whatever this says")
    r.fixed("attention", {"qk_norm": "head"}, "query_layernorm, key_layernorm: RMSNorm(head_dim)")
    for key in ("use_qk_norm", "eod_token_id", "pretraining_tp"):
        r.ignore(key, "HunYuanDenseV1Attention always builds its q/k norms" if key == "use_qk_norm" else
                 hf_keys.TOKEN_ID if key == "eod_token_id" else "tensor-parallel split; the same FLOPs")  # fmt: skip


def _read_apertus(r: KeyReader) -> None:
    """ApertusForCausalLM: LLaMA's attention (biases from attention_bias) with q_norm / k_norm, RMSNorm(head_dim)
    shared by the heads; an up/down MLP without biases whose xIELU activation (ApertusMLP: ``ACT2CLS["xielu"]``
    when hidden_act is xielu) learns two scalars per layer; llama3 RoPE (no parameters)."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False, gated=False,
              learned_activations=LEARNED_ACTIVATIONS)  # fmt: skip
    r.fixed("attention", {"qk_norm": "head"}, "q_norm, k_norm: RMSNorm(head_dim) (ApertusAttention)")


def _read_nemotron(r: KeyReader) -> None:
    """NemotronForCausalLM: LayerNorm1P (weight and bias), up/down MLP with squared ReLU, partial rotary."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias", norm="layernorm", gated=False)
    map_partial_rotary(r, 0.5)


def _read_starcoder2(r: KeyReader) -> None:
    """Starcoder2ForCausalLM: LayerNorm, biases on every projection (use_bias), c_fc/c_proj MLP, tied head."""
    read_core(r, qkv="use_bias", out="use_bias", ffn="use_bias", norm="layernorm", gated=False)
    r.ignore("activation_function", "Starcoder2MLP reads hidden_act")
    r.expect("mlp_type", ("default",), "another MLP layout")
    r.expect("norm_type", ("layer_norm",), "another norm")
    window_key, window, _ = r.value("sliding_window")
    if window is None:
        r.ignore(window_key, "null: every layer attends to the whole context")
    else:
        r.put("sliding_window", window, window_key, "file", "every layer (Starcoder2Attention)")


def _read_glm(r: KeyReader, placement: str = "pre") -> None:
    """GlmForCausalLM: q/k/v biases (attention_bias), o_proj without, a fused gate_up_proj, half rotary."""
    read_core(r, qkv="attention_bias", out=False, ffn=False, placement=placement)
    map_partial_rotary(r, 0.5)


def _read_glm4(r: KeyReader) -> None:
    """Glm4DecoderLayer adds post_self_attn_layernorm and post_mlp_layernorm: sandwich norms."""
    _read_glm(r, placement="sandwich")


def _read_phi3(r: KeyReader) -> None:
    """Phi3ForCausalLM: fused qkv_proj and gate_up_proj (the same counts as separate ones), no biases, partial
    rotary (Phi-4-mini), a window on every layer when sliding_window is set."""
    read_core(r, qkv=False, out=False, ffn=False)
    for key in ("attention_bias", "mlp_bias"):
        r.ignore(key, "Phi3Attention and Phi3MLP build no biases whatever this says")
    map_partial_rotary(r, 1.0)
    window_key, window, _ = r.value("sliding_window")
    if window is None:
        r.ignore(window_key, "null: every layer attends to the whole context")
    else:
        r.put("sliding_window", window, window_key, "file", "every layer (Phi3Attention's sliding_window)")
    r.ignore("original_max_position_embeddings", hf_keys.ROPE)


def _read_ministral(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn=False)
    _windows(r, default_all_sliding=True)


def _windows(r: KeyReader, default_all_sliding: bool = False) -> None:
    """layer_types / sliding_window / use_sliding_window as a window on the layers that slide."""
    window_key, window, _ = r.value("sliding_window")
    use_key, use = r.lookup("use_sliding_window")
    layers = r.data.get("num_layers")
    if not isinstance(layers, int):
        return
    sliding = window is not None and (use is True or (use is MISSING and default_all_sliding))
    r.ignore(use_key, "read with layer_types and sliding_window")
    put_window_layout(r, layers, [SLIDING if sliding else FULL] * layers, window, window_key, None,
                      cap_at_context=False)  # fmt: skip


def refuse(r: KeyReader, key: str, harmless: tuple[Any, ...], missing: str) -> None:
    """A key whose other values need a layer embedcalc cannot describe."""
    written, value = r.lookup(key)
    if value is MISSING or any(value == h and type(value) is type(h) for h in harmless):
        if value is not MISSING:
            r.ignore(key, f"{written} = {value!r}: the transformers default")
        return
    r.problem(written, f"{written} = {value!r} is not modelled: {missing}. {yaml_hint(r.family)}")


_APERTUS = dict(
    vocab_size=131072, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, hidden_act="xielu", max_position_embeddings=65536, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0,
)  # fmt: skip
LLAMA = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=None,
    hidden_act="silu",
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    attention_bias=False,
    attention_dropout=0.0,
    mlp_bias=False,
)


def _family(model_type: str, config_class: str, model: str, read: Any, defaults: dict[str, Any],
            attribute_map: dict[str, str] | None = None) -> Family:  # fmt: skip
    return Family(model_type, config_class, f"{model} (AutoModelForCausalLM)", "llama-2-7b", defaults, read,
                  attribute_map or {})  # fmt: skip


FAMILIES = (
    _family("smollm3", "SmolLM3Config", "SmolLM3ForCausalLM", _read_smollm3,
            LLAMA | dict(vocab_size=128256, hidden_size=2048, num_hidden_layers=36, num_attention_heads=16,
                          num_key_value_heads=4, max_position_embeddings=32768, tie_word_embeddings=True,
                          sliding_window=None)),
    _family("hunyuan_v1_dense", "HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", _read_hunyuan,
            {k: v for k, v in LLAMA.items() if k != "mlp_bias"} | dict(vocab_size=290943, head_dim=None)),
    _family("apertus", "ApertusConfig", "ApertusForCausalLM", _read_apertus, _APERTUS),
    _family("nemotron", "NemotronConfig", "NemotronForCausalLM", _read_nemotron,
            LLAMA | dict(vocab_size=256000, hidden_size=6144, intermediate_size=24576, num_attention_heads=48,
                          hidden_act="relu2", max_position_embeddings=4096, head_dim=None)),
    _family("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", _read_starcoder2,
            dict(vocab_size=49152, hidden_size=3072, intermediate_size=12288, num_hidden_layers=30,
                 num_attention_heads=24, num_key_value_heads=2, hidden_act="gelu_pytorch_tanh",
                 max_position_embeddings=4096, tie_word_embeddings=True, use_bias=True, sliding_window=None,
                 attention_dropout=0.0)),
    _family("glm", "GlmConfig", "GlmForCausalLM", _read_glm,
            dict(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                 num_attention_heads=32, num_key_value_heads=2, head_dim=128, hidden_act="silu",
                 max_position_embeddings=131072, tie_word_embeddings=False, attention_bias=True,
                 attention_dropout=0.0)),
    _family("glm4", "Glm4Config", "Glm4ForCausalLM", _read_glm4,
            dict(vocab_size=151552, hidden_size=4096, intermediate_size=13696, num_hidden_layers=40,
                 num_attention_heads=32, num_key_value_heads=2, head_dim=128, hidden_act="silu",
                 max_position_embeddings=131072, tie_word_embeddings=False, attention_bias=True,
                 attention_dropout=0.0)),
    _family("phi3", "Phi3Config", "Phi3ForCausalLM", _read_phi3,
            dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=4096,
                 tie_word_embeddings=False, sliding_window=None, attention_dropout=0.0)),
    _family("ministral", "MinistralConfig", "MinistralForCausalLM", _read_ministral,
            dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                 max_position_embeddings=131072, tie_word_embeddings=False, sliding_window=4096,
                 attention_dropout=0.0)),
)  # fmt: skip
