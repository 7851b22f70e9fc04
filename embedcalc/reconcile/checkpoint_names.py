"""Checkpoint tensor names -> embedcalc's breakdown keys (DESIGN §4: ``embedding/token``, ``decoder/attention/qkv``,
``decoder/moe/experts``, ``head/lm``), read off transformers' module names.

A name is ``[prefix.]<module path>.<parameter>``; the layer index is the number after ``layers`` / ``h`` /
``layer`` / ``block(s)``; the module's own segment decides the component (``q_proj`` -> ``attention/qkv``,
``down_proj`` -> ``ffn/out``, anything under ``experts`` -> ``moe/experts``). Quantization's side tensors (GPTQ/AWQ
``qweight``/``qzeros``/``scales``/``g_idx``, FP8's ``weight_scale_inv``/``weight_scale``/``input_scale``,
compressed-tensors' ``weight_packed``/``weight_zero_point``) belong to the module they quantize; buffers a
checkpoint may carry (``rotary_emb.inv_freq``, DeepSeek-V3's ``e_score_correction_bias``, LFM2-MoE's
``feed_forward.expert_bias``, MiniMax's lightning decay tables) are not parameters.

A layer whose block has a recurrent mixer (``layer_kinds``) files its mixer module's tensors under ``mixer/...``, the
keys of :func:`embedcalc.analysis.mixers.mixer_tensors`, read off transformers' modeling files: the module is
``mamba`` (granitemoehybrid's Mamba-2, Jamba's Mamba-1), ``mixer`` (nemotron_h's Mamba-2), ``linear_attn``
(qwen3_next's gated DeltaNet), ``conv`` (lfm2's short convolution) or ``self_attn`` (minimax's lightning layers);
its ``in_proj`` / ``in_proj_qkvz`` + ``in_proj_ba`` / ``qkv_proj`` + ``output_gate`` are ``mixer/in``, ``conv1d`` /
``conv`` ``mixer/conv``, ``A_log`` / ``D`` / ``dt_bias`` ``mixer/ssm``, its ``norm`` ``mixer/gate_norm``,
``out_proj`` ``mixer/out`` (Mamba-1's ``x_proj``, ``dt_proj``, ``dt/b/c_layernorm`` their own keys), and the
layer's pre-norm (``input_layernorm``, lfm2's ``operator_norm``, nemotron_h's ``norm``) ``mixer/norm``; in a
nemotron_h MLP or MoE block that one ``norm`` is ``ffn/norm``. Falcon-H1's ``mamba`` beside its attention in one
layer is mapped the same way, its one pre-norm attention's. Llama-3.2-Vision's cross-attention layers are
``cross_attn.*`` (q/k/v/o projections and q/k norms as above) and the layer's own ``cross_attn_attn_gate`` /
``cross_attn_mlp_gate`` (``attention/tanh_gate``, ``ffn/tanh_gate``); Zamba2's hybrid layers hold
``shared_transformer`` (its attention and MLP as any layer's, ``input_layernorm`` the attention's norm,
``pre_ff_layernorm`` the MLP's; the uses' adapter lists ``shared/attention_adapters`` / ``shared/ffn_adapters``),
``linear`` (``shared/projection``) and ``mamba_decoder`` (the Mamba-2 layer and its ``input_layernorm``,
``mixer/...``); a multimodal checkpoint's vision tower and
projector (``vision_model``, ``multi_modal_projector``, ...) belong to no component of the text model. The Nemotron
NAS models' linear sublayers are ``self_attn.linear_attn`` (``mixer/projection``, the layer's ``input_layernorm``
then ``mixer/norm``) and ``mlp.linear_mlp`` (``ffn/projection``).

Other families' module names, from their modeling files in transformers 5.24: fused Q/K/V (:data:`QKV`), MPNet's
``attn.q/k/v/o`` and its stack's ``relative_attention_bias``; GPT-NeoX's ``embed_in``; BART's and Marian's ``shared``
table, ``layernorm_embedding``, ``self_attn_layer_norm`` / ``final_layer_norm`` and the decoder's ``encoder_attn``
(``cross_attention/...``); T5's ``block.N.layer.K``: ``SelfAttention.q/k/v/o``, the decoder's ``EncDecAttention``
(cross-attention), ``DenseReluDense.wi`` / ``wi_0`` / ``wi_1`` / ``wo``, each sublayer's ``layer_norm``;
DeepSeek-V3.2's ``self_attn.indexer.wq_b`` / ``wk`` / ``k_norm`` / ``weights_proj`` (``attention/index_*``); BLOOM's
``word_embeddings_layernorm``; Falcon's ``ln_attn`` / ``ln_mlp``; Apertus'
``attention_layernorm`` / ``feedforward_layernorm`` and xIELU's ``act_fn.alpha_p`` / ``alpha_n`` (``ffn/act``);
ModernBERT's ``attn_norm`` / ``mlp_norm``, ``Wi`` / ``Wo`` and ``final_norm``; GPT-J's and Phi-2's
``lm_head.bias`` (``head/lm_bias``). A buffer name matches whole segments (``attn.bias``, GPT-2's causal mask, is
no ``c_attn.bias`` and no Falcon ``ln_attn.bias``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from embedcalc.reconcile.checkpoint_kinds import PARAM_STATICS, Kind, split_kind
from embedcalc.reconcile.checkpoint_mixer_names import mixer_key

# fused Q/K/V projections: Phi-3's qkv_proj, GPT-NeoX/Falcon/BLOOM's query_key_value, GPT-2/GPTBigCode's c_attn,
# ModernBERT/MPT's Wqkv (shapes: checkpoint_shapes)
QKV = ("qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv")
# what a layer's pre-norm serves; "parallel": attention and a recurrent mixer side by side (Falcon-H1), the pre-norm
# attention's as analysis/params.py counts it; "shared": a shared block before the mixer (Zamba2, :func:`_shared_key`)
Sublayer = Literal["attention", "mixer", "ffn", "parallel", "shared"]

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|layer|blocks|block)\.(\d+)\.")
# (module segment, component below the stack) for modules inside a layer, first match wins
_IN_LAYER: tuple[tuple[tuple[str, ...], str], ...] = (
    # Gemma 3n's AltUp (Gemma3nTextAltUp: modality_router, router_norm, prediction_coefs, correction_coefs) and
    # LAuReL (Gemma3nTextLaurelBlock: linear_left, linear_right, post_laurel_norm)
    (("modality_router",), "altup/router"), (("router_norm",), "altup/router_norm"),
    (("prediction_coefs",), "altup/predict"), (("correction_coefs",), "altup/correct"),
    (("linear_left",), "laurel/left"), (("linear_right",), "laurel/right"), (("post_laurel_norm",), "laurel/norm"),
    # Gemma 3n/4's per-layer inputs (Gemma4TextDecoderLayer) and the MoE block's norms on its two branches
    (("per_layer_input_gate",), "per_layer/gate"), (("per_layer_projection",), "per_layer/out"),
    (("post_per_layer_input_norm",), "per_layer/norm"),
    (("post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"),
      "moe/branch_norms"),
    (("experts",), "moe/experts"), (("fc1_latent_proj", "fc2_latent_proj"), "moe/latent"),
    (("attn_hc",), "hyper/attention"), (("ffn_hc",), "hyper/ffn"),  # DeepSeek-V4 (DeepseekV4HyperConnection)
    # Apertus' xIELU (XIELUActivation: alpha_p, alpha_n learned), T5/MPNet's relative position buckets
    (("act_fn",), "ffn/act"), (("relative_attention_bias",), "attention/relative_bias"),
    (("shared_expert_gate",), "moe/shared_gate"),
    (("shared_expert", "shared_experts", "shared_mlp"), "moe/shared"),
    # granitemoehybrid: block_sparse_moe.input_linear / output_linear (the experts), router.layer
    (("input_linear", "output_linear"), "moe/experts"), (("router", PARAM_STATICS), "moe/router"),
    (("q_a_proj",), "attention/q_a"), (("q_a_layernorm",), "attention/q_a_norm"), (("q_b_proj",), "attention/q_b"),
    (("kv_a_proj_with_mqa",), "attention/kv_a"), (("kv_a_layernorm",), "attention/kv_a_norm"),
    (("kv_b_proj",), "attention/kv_b"),
    (("q_norm", "k_norm", "query_layernorm", "key_layernorm", "q_layernorm", "k_layernorm"),
      "attention/qk_norm"),
    ((*QKV, "q_proj", "k_proj", "v_proj", "query", "key", "value", "q", "k", "v"), "attention/qkv"),
    (("o_proj", "out_proj", "dense_out", "o"), "attention/out"),
    (("sinks",), "attention/sinks"),
    (("softmax_scaling",), "attention/query_scale"),  # Mistral Large 4's per-head scale and bias
    (("g_proj",), "attention/head_gate"),  # Laguna's and Step-3.7's per-head gate, Linear(d, heads)
    (("gate_proj", "up_proj", "gate_up_proj", "up_gate_proj", "fc1", "c_fc", "w1", "w3", "fc_in", "dense_h_to_4h",
      "Wi", "wi", "wi_0", "wi_1"), "ffn/in"),
    (("down_proj", "fc2", "w2", "fc_out", "dense_4h_to_h", "wo"), "ffn/out"),
    # Apertus' attention_layernorm / feedforward_layernorm, Falcon's new decoder ln_attn / ln_mlp, BART's and
    # Marian's self_attn_layer_norm / final_layer_norm, ModernBERT's attn_norm / mlp_norm
    # GTE's (mGTE's checkpoint names) attn_ln / mlp_ln and Jina-v3's norm1 / norm2
    (("input_layernorm", "ln_1", "attention_norm", "attention_layernorm", "ln_attn", "self_attn_layer_norm",
      "attn_norm", "attn_ln", "norm1", "pre_self_attn_layernorm", "post_self_attn_layernorm"), "attention/norm"),
    (("pre_feedforward_layernorm", "post_feedforward_layernorm", "ln_2", "ffn_norm", "pre_ff_layernorm",
      "feedforward_layernorm", "ln_mlp", "final_layer_norm", "mlp_norm", "mlp_ln", "norm2",
      "post_mlp_layernorm"), "ffn/norm"),  # NomicBertBlock's post-norm after its MLP
)  # fmt: skip
# parameters of a layer's modules that are their own component: Gemma4TextRouter's scale and per_expert_scale,
# GPT-OSS's attention sinks (self_attn.sinks)
_OWN_PARAMS = {
    "scale": "moe/router_scale",
    "per_expert_scale": "moe/router_scale",
    "sinks": "attention/sinks",
    "correct_output_scale": "altup/output_scale",  # Gemma3nTextAltUp's
}
_ROUTERS = ("gate", "router")
# BART's and Marian's decoder cross-attention: encoder_attn.{q,k,v,out}_proj and encoder_attn_layer_norm; T5's
# EncDecAttention.{q,k,v,o} (T5LayerCrossAttention)
_CROSS = "encoder_attn"
_T5_CROSS = "EncDecAttention"
# T5Gemma's decoder layer: cross_attn.{q,k,v,o}_proj between pre_cross_attn_layernorm and post_cross_attn_layernorm
_T5GEMMA_CROSS = "cross_attn"
_FFN_BLOCKS = ("mlp", "feed_forward", "ffn", "feedforward")
_CROSS_NORMS = ("pre_cross_attn_layernorm", "post_cross_attn_layernorm")
# DeepSeek-V3.2's lightning indexer, self_attn.indexer (DeepseekV32Indexer): its parts -> analysis/params.py's keys
_INDEXER = "indexer"
_INDEXER_PARTS = {
    "wq_b": "index_q",
    "wk": "index_k",
    "k_norm": "index_k_norm",
    "weights_proj": "index_weights",
    # MiniMax-M3's block indexer (MiniMaxM3VLIndexer): q_proj, k_proj and their RMSNorms
    "q_proj": "index_q",
    "k_proj": "index_k",
    "q_norm": "index_q_norm",
    # Mistral Large 4's (MistralLarge4Indexer): the LayerNorm before wq_b and the per-head softmax scaling
    "q_input_norm": "index_input_norm",
    "softmax_scaling": "index_query_scale",
}
_EMBEDDINGS = {"embed_tokens": "embedding/token", "wte": "embedding/token", "word_embeddings": "embedding/token",
               "tok_embeddings": "embedding/token", "wpe": "embedding/position",
               "position_embeddings": "embedding/position", "embed_positions": "embedding/position",
               "token_type_embeddings": "embedding/type", "embed_in": "embedding/token", "shared": "embedding/token",
               # BLOOM's word_embeddings_layernorm, BART's layernorm_embedding (one per stack)
               "word_embeddings_layernorm": "embedding/norm", "layernorm_embedding": "embedding/norm",
               "emb_ln": "embedding/norm",  # Jina-v3's (its checkpoint's name for the embeddings' LayerNorm)
               # Gemma 3n/4's per-layer inputs (Gemma4TextModel): the packed table, its projection and norm
               "embed_tokens_per_layer": "embedding/per_layer",
               "per_layer_model_projection": "embedding/per_layer_project",
               "per_layer_projection_norm": "embedding/per_layer_norm",
               # Gemma 3n's AltUp projections of the embeddings into the extra streams (Gemma3nTextModel)
               "altup_projections": "embedding/altup_project",
               # Gemma 4's assistant (Gemma4AssistantForCausalLM): the target's vectors projected in
               "pre_projection": "embedding/input_projection"}  # fmt: skip
# Gemma 4's assistant's other parts outside the stack: the state handed back, the masked head's centroids
_HEAD_PARTS = {"post_projection": "head/output_projection", "centroids": "head/centroids"}
# lfm2's final norm is ``embedding_norm`` (applied after the last layer)
_FINAL_NORMS = (
    "norm",
    "ln_f",
    "final_layernorm",
    "norm_f",
    "final_layer_norm",
    "embedding_norm",
    "final_norm",
    "layer_norm",
    "LayerNorm",  # XLM-RoBERTa-XL's encoder.LayerNorm (an embeddings' LayerNorm is placed before this is read)
)
_PRE_NORMS = ("input_layernorm", "operator_norm", "norm")  # a layer's one pre-norm
# Mllama's tanh gates, parameters of the cross-attention layer itself (MllamaCrossAttentionDecoderLayer)
_LAYER_PARAMS = {"cross_attn_attn_gate": "attention/tanh_gate", "cross_attn_mlp_gate": "ffn/tanh_gate",
                 # DeepSeek-V4's hyper-connections, parameters of the layer in its checkpoints (hc_attn_fn, ...)
                 **{f"hc_{p}_{t}": f"hyper/{'attention' if p == 'attn' else 'ffn'}"
                    for p in ("attn", "ffn") for t in ("fn", "base", "scale")}}  # fmt: skip
# DeciLM's replace_with_linear sublayers (the Nemotron NAS models' DeciLMLinearAttention / DeciLMLinearMLP, in
# modeling_decilm.py), by their path inside the layer
_REPLACED: dict[tuple[str, ...], str] = {
    ("self_attn", "linear_attn"): "mixer/projection",
    ("mlp", "linear_mlp"): "ffn/projection",
}
# a multimodal checkpoint's towers and projectors, outside the text model embedcalc counts (Gemma 4's
# Gemma4Model: vision_tower, audio_tower and their embedders embed_vision / embed_audio)
_OUTSIDE = (
    "vision_model",
    "vision_tower",
    "multi_modal_projector",
    "visual",
    "audio_tower",
    "embed_vision",
    "embed_audio",
)


@dataclass(frozen=True)
class TensorRole:
    """Where a checkpoint tensor goes: its breakdown key (None when no component), its layer (None outside the
    stack), what kind of tensor it is, and the module it belongs to (``model.layers.0.self_attn.q_proj``)."""

    key: str | None
    layer: int | None
    kind: Kind
    module: str


def tensor_role(
    name: str, stack: str, sandwich: bool, layer_kinds: Mapping[int, Sublayer] | None = None,
    decoder_table: bool = False, parameter: bool = False,
) -> TensorRole:  # fmt: skip
    """The component of checkpoint tensor ``name`` in a model whose layers are ``stack`` (``decoder`` /
        ``encoder``); ``sandwich``: ``post_attention_layernorm`` is attention's after-norm (Gemma 2/3), not the
        FFN's pre-norm (LLaMA); ``layer_kinds``: the sublayer a layer's pre-norm serves (``mixer`` where its block has
        a recurrent mixer, ``parallel`` beside attention, ``ffn`` where it has an FFN only; ``attention`` where
        absent); ``decoder_table``: an encoder-decoder whose decoder has its own token table (T5Gemma's
        ``model.decoder.embed_tokens``) and whose ``cross_attn`` is the decoder's cross-attention (Mllama's
        ``cross_attn`` is a decoder layer's own attention); ``parameter``: the model holds ``name`` as a parameter
    (transformers' own model says so: Laguna's router ``e_score_correction_bias``, a buffer in DeepSeek-V3), whatever
    the name says of buffers elsewhere."""
    module, param, kind = split_kind(name)
    if parameter and kind == "buffer":  # a name buffers carry elsewhere, a parameter of this model (Laguna's)
        kind = "weight"
    segments = module.split(".")
    match = _LAYER.search(name)
    layer = int(match.group(1)) if match is not None else None
    if kind == "buffer" or any(segment in _OUTSIDE for segment in segments):
        return TensorRole(None, layer, kind, module)
    last = segments[-1] if segments else ""
    if match is None:
        if "lm_head" in segments or last in ("embed_out", "output"):  # GPT-J's and Phi-2's lm_head has a bias
            return TensorRole("head/lm_bias" if param == "bias" else "head/lm", None, kind, module)
        if last in _HEAD_PARTS:
            return TensorRole(_HEAD_PARTS[last], None, kind, module)
        if last == "hc_head" or param.startswith("hc_head_"):  # DeepSeek-V4's final collapse of its streams
            return TensorRole(f"{stack}/hyper_head", None, kind, module)
        if last == "head" or last == "embed":  # DeepSeek's own checkpoint names (DeepSeek-V4)
            return TensorRole("head/lm" if last == "head" else "embedding/token", None, kind, module)
        if (
            "altup_unembed_projections" in segments
        ):  # Gemma 3n's projections of the streams back, after the stack
            return TensorRole(f"{stack}/altup_unembed", None, kind, module)
        if last == "rotary_emb" and param == "alpha":  # Mistral Large 4's learned LeRoPE scales (a parameter)
            return TensorRole(f"{stack}/rope_scale", None, kind, module)
        if last == "relative_attention_bias":  # MPNet's, shared by the layers
            return TensorRole(f"{stack}/attention/relative_bias", None, kind, module)
        if decoder_table and stack == "decoder" and last == "embed_tokens":
            return TensorRole("embedding/decoder_token", None, kind, module)
        for segment in segments:
            if segment in _EMBEDDINGS:
                return TensorRole(_EMBEDDINGS[segment], None, kind, module)
        if "embeddings" in segments and last in ("LayerNorm", "norm"):
            return TensorRole("embedding/norm", None, kind, module)
        if "pooler" in segments:
            return TensorRole("pooler", None, kind, module)
        if last == "embeddings":  # nemotron_h's backbone.embeddings
            return TensorRole("embedding/token", None, kind, module)
        if last in _FINAL_NORMS:
            return TensorRole(f"{stack}/final_norm", None, kind, module)
        return TensorRole(None, None, kind, module)
    inside = within_layer(module, layer)
    if not inside and param in _LAYER_PARAMS:
        return TensorRole(f"{stack}/{_LAYER_PARAMS[param]}", layer, kind, module)
    if inside and inside[-1] in ("router", "self_attn", "altup") and param in _OWN_PARAMS:
        return TensorRole(f"{stack}/{_OWN_PARAMS[param]}", layer, kind, module)
    sublayer = (layer_kinds or {}).get(layer, "attention") if layer is not None else "attention"
    if tuple(inside) in _REPLACED:
        return TensorRole(f"{stack}/{_REPLACED[tuple(inside)]}", layer, kind, module)
    if sublayer == "shared":
        return TensorRole(_shared_key(inside, param, stack, sandwich), layer, kind, module)
    key = mixer_key(inside, param, sublayer == "parallel") if sublayer in ("mixer", "parallel") else None
    if key is None and len(inside) == 1 and inside[0] in _PRE_NORMS:
        key = f"{'attention' if sublayer == 'parallel' else sublayer}/norm"
    if decoder_table and stack == "decoder" and inside[:1] == [_T5GEMMA_CROSS]:  # T5GemmaCrossAttention
        key = f"cross_attention/{'out' if inside[-1] == 'o_proj' else 'qkv'}"
    return TensorRole(f"{stack}/{key}" if key else _layer_key(inside, stack, sandwich), layer, kind, module)


def tensor_stack(name: str, architecture: str) -> str:
    """The stack tensor ``name`` belongs to: an encoder-decoder's ``model.encoder.*`` (BART, Marian, T5) is the
    encoder's, everything else (its decoder, the shared table, the head) the decoder's; the one stack otherwise."""
    if architecture == "encoder-decoder":
        return "encoder" if "encoder" in name.split(".") else "decoder"
    return "encoder" if architecture == "encoder" else "decoder"


# an encoder checkpoint's masked-LM head: RobertaLMHead / MPNetLMHead's lm_head.*, BertForMaskedLM's cls.predictions.*
_MLM_HEADS = ("lm_head", "cls")


def task_head(name: str, architecture: str) -> str | None:
    """Why tensor ``name`` of an encoder's checkpoint is outside the model counted (``AutoModel``, the counting
    rule): the masked-LM head of a ``*ForMaskedLM`` checkpoint; None otherwise."""
    if architecture != "encoder" or name.split(".")[0] not in _MLM_HEADS:
        return None
    return "a masked-LM head: the encoder is counted as AutoModel, which has none"


def outside_text_model(name: str) -> str | None:
    """Why tensor ``name`` is no part of the text model: the multimodal tower or projector it belongs to; None
    for the text model's tensors."""
    tower = next((s for s in name.split(".") if s in _OUTSIDE), None)
    if tower is None:
        return None
    return (
        f"{tower}: a vision/audio tower or projector of a multimodal checkpoint, not part of the text model"
    )


def within_layer(module: str, layer: int | None) -> list[str]:
    """The segments of ``module`` after its layer index (``model.layers.3.mamba.conv1d`` -> ``mamba``, ``conv1d``);
    all of them outside the stack."""
    segments = module.split(".")
    return segments[segments.index(str(layer)) + 1 :] if str(layer) in segments else segments


# Zamba2's hybrid layer (Zamba2HybridLayer): shared_transformer (Zamba2AttentionDecoderLayer: self_attn, feed_forward,
# input_layernorm, pre_ff_layernorm; the use's adapter lists), linear (the use's projection), mamba_decoder (the
# layer's own Mamba-2 layer and its input_layernorm)
_SHARED_ADAPTERS = {
    "linear_q_adapter_list": "shared/attention_adapters",
    "linear_k_adapter_list": "shared/attention_adapters",
    "linear_v_adapter_list": "shared/attention_adapters",
    "gate_up_proj_adapter_list": "shared/ffn_adapters",
}


def _shared_key(inside: list[str], param: str, stack: str, sandwich: bool) -> str | None:
    """A tensor of a layer with a shared block (Zamba2, names above): the block's attention and FFN as any layer's,
    its adapters and projection ``shared/...``, the Mamba-2 layer ``mixer/...``."""
    if inside == ["linear"]:
        return f"{stack}/shared/projection"
    if inside[:1] == ["mamba_decoder"]:
        if inside[1:] == ["input_layernorm"]:
            return f"{stack}/mixer/norm"
        key = mixer_key(inside[1:], param)
        return f"{stack}/{key}" if key else None
    adapter = next((_SHARED_ADAPTERS[s] for s in inside if s in _SHARED_ADAPTERS), None)
    if adapter is not None:
        return f"{stack}/{adapter}"
    return _layer_key(inside[1:] if inside[:1] == ["shared_transformer"] else inside, stack, sandwich)


def _layer_key(inside: list[str], stack: str, sandwich: bool) -> str | None:
    if f"{_CROSS}_layer_norm" in inside or any(s in _CROSS_NORMS for s in inside):
        return f"{stack}/cross_attention/norm"
    if _CROSS in inside or _T5_CROSS in inside:
        return f"{stack}/cross_attention/{'out' if inside[-1] in ('out_proj', 'o') else 'qkv'}"
    if _INDEXER in inside and inside[-1] in _INDEXER_PARTS:
        return f"{stack}/attention/{_INDEXER_PARTS[inside[-1]]}"
    t5_norm = _t5_norm(inside, stack)
    if t5_norm is not None:
        return f"{stack}/{t5_norm}"
    if inside[-1:] in (["key"], ["value"]) and any(s in _FFN_BLOCKS for s in inside[:-1]):
        # an FFN written as a key-value memory (RWKV's channel mixing, RwkvFeedForward: key d -> 4d, value back),
        # not attention's projections of the same names
        return f"{stack}/ffn/{'in' if inside[-1] == 'key' else 'out'}"
    for names, component in _IN_LAYER:
        if any(segment in names for segment in inside):
            return f"{stack}/{component}"
    # HunYuan's router is mlp.gate.wg (HunYuanMoEV1Gate)
    if len(inside) >= 2 and (inside[-1] in _ROUTERS or inside[-2:] == ["gate", "wg"]):
        return f"{stack}/moe/router"
    if inside == ["LayerNorm"]:  # XLM-RoBERTa-XL's layer.N.LayerNorm: the pre-norm of its MLP
        return f"{stack}/ffn/norm"
    if "post_attention_layernorm" in inside:
        return f"{stack}/{'attention' if sandwich else 'ffn'}/norm"
    # BERT: attention.output.dense / attention.output.LayerNorm, intermediate.dense, output.dense / .LayerNorm
    if "attention" in inside and "output" in inside:
        return f"{stack}/attention/{'norm' if inside[-1] == 'LayerNorm' else 'out'}"
    if inside[-2:] == ["attention", "LayerNorm"]:  # MPNet's MPNetAttention.LayerNorm
        return f"{stack}/attention/norm"
    if "intermediate" in inside:
        return f"{stack}/ffn/in"
    if "output" in inside:
        return f"{stack}/ffn/{'norm' if inside[-1] == 'LayerNorm' else 'out'}"
    # GPT-2's attn.c_proj and mlp.c_proj, GPT-NeoX's attention.dense, ModernBERT's attn.Wo and mlp.Wo
    if inside[-1:] in (["c_proj"], ["dense"], ["Wo"]):
        return f"{stack}/{'ffn' if 'mlp' in inside else 'attention'}/out"
    return None


def _t5_norm(inside: list[str], stack: str) -> str | None:
    """T5's ``layer.K.layer_norm`` (T5Block: ``layer`` holds self-attention, in the decoder cross-attention, then the
    FFN, each with its own pre-norm): K 0 attention's, K 1 in the decoder cross-attention's, the last the FFN's."""
    if len(inside) != 3 or inside[0] != "layer" or inside[2] != "layer_norm" or not inside[1].isdigit():
        return None
    k = int(inside[1])
    if k == 0:
        return "attention/norm"
    return "cross_attention/norm" if stack == "decoder" and k == 1 else "ffn/norm"
