"""Exact parameter counts per component (DESIGN.md §4, §9; docs/layers.md): every trainable parameter, tied once.

Every count is a sum over the model's tensors, and the tensors of a stack are those of each distinct block
(``config.stack_plan``) times its number of layers (once with ``shared_layers``, ALBERT). Conventions, matching the
model ``embedcalc.modeling`` builds and Hugging Face's models for the presets:

- attention (standard, multi-head latent, sparse with its indexer, block-sparse, cross-attention over an external
  sequence): :mod:`embedcalc.analysis.attention`; tanh gates add one scalar each to the attention and the FFN
  (``attention/tanh_gate``, ``ffn/tanh_gate``); rope_scale one log-scale per rotary frequency for the decoder
  (``decoder/rope_scale``).
- a sublayer replaced by a linear (the Nemotron NAS models' ``replace_with_linear``): one bias-free
  embed_dim x embed_dim weight and the sublayer's norm (``mixer/projection``, ``ffn/projection``).
- FFN: embed_dim -> ffn_dim -> embed_dim; gated activations (swiglu, geglu) have gate and up projections, so three
  embed_dim x ffn_dim matrices (Shazeer 2020); xIELU adds its two learned scalars (``ffn/act``). Mixture of
  experts: a router embed_dim -> num_experts, num_experts such FFNs of expert_dim, one shared FFN of
  num_shared_experts x shared_expert_dim, an optional shared gate; a latent MoE (Nemotron-3, latent_dim L) runs
  the experts on L (L -> fe -> L) between two linears d -> L and L -> d (``moe/latent``); zero experts
  (LongCat-Flash) widen the router to num_experts + zero_experts outputs and have no parameters of their own.
- norms: LayerNorm 2 * width (width with ``norm_bias: false``), RMSNorm width, none with ``norm_affine: false``;
  one per sublayer (two with sandwich norms, one per layer for parallel blocks with one norm) and a final norm per
  stack when ``final_norm``.
- positions: learned tables are parameters (one per stack, max_seq_len + position_offset rows); sinusoidal, rope,
  alibi are not; relative (T5) is a buckets x num_heads table in the first block of each stack (Raffel et al.
  2020, §2.1).
- token table (vocab_size + extra_token_rows) x token_embed_dim; when token_embed_dim differs from embed_dim, a
  projection token_embed_dim -> embed_dim after the lookup (after the embedding norm with
  ``factorized_embeddings``, ALBERT, whose position and type tables and embedding norm are token_embed_dim wide)
  and embed_dim -> token_embed_dim before the LM head; ``lm_head_bias`` adds a vocab_size bias (phi-2), even
  when the head is tied.
- hyper-connections (DeepSeek-V4, ``hyper_connections``): per residual sublayer and layer ``hyper/<sublayer>``,
  and the final collapse ``<stack>/hyper_head`` (:mod:`embedcalc.analysis.hyper`).
- encoder-decoder: one token table shared by encoder and decoder (Vaswani et al. 2017, §3.4); with
  ``decoder_token_table`` (T5Gemma) the decoder has its own, ``embedding/decoder_token``, which a tied head reuses.
- a shared block (``blocks.NAME.shared``, Zamba2; config/shared_spec.py): its attention (Q/K/V reading the 2 d wide
  concatenation of the input and the embeddings), FFN and their norms once per weight set its layers use
  (``shared_sets``), the per-use adapters (``shared/attention_adapters``, ``shared/ffn_adapters``) and projection
  (``shared/projection``) in every layer.

**Active parameters** (Fedus et al. 2021; DeepSeek-V3 report, Table 1): the total minus the (num_experts - top_k)
routed experts a token does not use, in every MoE layer; equal to the total for dense models.

The functions take a :class:`embedcalc.analysis.structure.Dims`, so the sweep grid calls them on arrays.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from embedcalc.analysis.altup import altup_layer_tensors, altup_model_tensor, laurel_tensors
from embedcalc.analysis.attention import attention_tensors
from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.drafter import head_tensors, input_tensors
from embedcalc.analysis.hyper import hyper_head_tensors, hyper_layer_tensors
from embedcalc.analysis.mixers import mixer_tensors
from embedcalc.analysis.structure import (
    Dims,
    Num,
    cross_attention,
    head_width,
    kv_width,
    per_layer_width,
    q_heads,
    stacks,
    sublayer_norms,
)
from embedcalc.analysis.tensor import ParamTensor, norm_tensors
from embedcalc.analysis.tensor import linear as _linear
from embedcalc.config.altup import has_laurel
from embedcalc.config.layer_plan import FFN, Block
from embedcalc.config.resolved import ResolvedShape


def activation_tensors(config: ResolvedShape) -> list[ParamTensor]:
    """A learned activation's parameters in one dense FFN: xIELU's alpha_p and alpha_n, one scalar each (Huang
    2024, arXiv 2411.13010, eq. 4; transformers' XIELUActivation), replicated under TP; none for the others."""
    if config.activation != "xielu":
        return []
    return [ParamTensor("ffn/act", (1,)) for _ in range(2)]


def ffn_tensors(config: ResolvedShape, ffn: FFN, block: Block, x: Dims) -> list[ParamTensor]:
    """The tensors of one FFN sublayer: dense (``ffn/...``) or a mixture of experts (``moe/...``)."""
    d, w = x.d, x.widths(block)
    if not ffn.moe:
        f_in = 2 * w.f if ffn.gated else w.f
        out = _linear("ffn/in", d, f_in, ffn.bias, "column") + _linear(
            "ffn/out", w.f, d, ffn.down_bias, "row"
        )
        return out + activation_tensors(config)
    fe_in = 2 * w.fe if ffn.gated else w.fe
    e, di = ffn.num_experts, ffn.latent_dim or d  # di: the width the routed experts read and write
    out = _linear("moe/router", d, e + ffn.zero_experts, ffn.router_bias, "none")  # zero experts scored too
    out += _linear("moe/experts", di, fe_in, ffn.expert_bias, "column", e, expert=True)
    out += _linear("moe/experts", w.fe, di, ffn.expert_bias, "row", e, expert=True)
    if ffn.latent_dim:  # Nemotron-3: fc1_latent_proj d -> L, fc2_latent_proj L -> d, biased as the MLP
        out += _linear("moe/latent", d, di, ffn.bias, "none") + _linear("moe/latent", di, d, ffn.bias, "none")
    if ffn.shared_dim:
        fs_in = 2 * w.fs if ffn.gated else w.fs
        out += _linear("moe/shared", d, fs_in, ffn.bias, "column") + _linear(
            "moe/shared", w.fs, d, ffn.bias, "row"
        )
    if ffn.shared_gate:
        out += _linear("moe/shared_gate", d, 1, False, "none")
    if ffn.router_scale:  # Gemma 4: Gemma4TextRouter.scale (d) and .per_expert_scale (E)
        out += [ParamTensor("moe/router_scale", (d,)), ParamTensor("moe/router_scale", (e,))]
    if ffn.branch_norms:  # Gemma 4: post_feedforward_layernorm_1, pre_ / post_feedforward_layernorm_2
        out += norm_tensors(config, "moe/branch_norms", d, 3)
    return out


def projection_tensors(config: ResolvedShape, where: str, x: Dims, norms: int) -> list[ParamTensor]:
    """A sublayer replaced by one linear (``where`` mixer or ffn): the bias-free embed_dim x embed_dim weight
    ``{where}/projection`` and the sublayer's own norm(s), as DeciLM builds ``DeciLMLinearAttention`` /
    ``DeciLMLinearMLP`` (``nn.Linear(hidden, hidden, bias=False)``) behind ``input_layernorm`` /
    ``post_attention_layernorm`` (NVIDIA's ``modeling_decilm.py``). Replicated under TP: no collective."""
    return _linear(f"{where}/projection", x.d, x.d, False, "none") + norm_tensors(
        config, f"{where}/norm", x.d, norms
    )


def shared_tensors(config: ResolvedShape, block: Block, x: Dims) -> list[ParamTensor]:
    """A layer's shared block (config/shared_spec.py; Zamba2's ``Zamba2AttentionDecoderLayer``): its input norm over
    the concatenated width, attention reading it, the FFN's norm and the FFN, each marked with the number of weight
    sets (``shared_sets``); then the layer's own adapters and projection (Zamba2's ``linear_q/k/v_adapter_list``,
    ``gate_up_proj_adapter_list`` and ``Zamba2HybridLayer.linear``)."""
    use, a, ffn = block.shared, block.attention, block.ffn
    assert use is not None and a is not None and ffn is not None  # the schema's rule (check_shared)
    wide = 2 * x.d if use.embeddings else x.d
    out = attention_tensors(config, a, x, "attention", d_in=wide) + norm_tensors(
        config, "attention/norm", wide
    )
    out += ffn_tensors(config, ffn, block, x) + norm_tensors(config, "ffn/norm", x.d)
    out = [replace(t, shared_sets=use.copies) for t in out]
    rank = use.adapter_rank
    if use.attention_adapters:  # q, k, v: input -> rank -> the projection's output, bias-free
        for width in (q_heads(a, x) * head_width(a, x), kv_width(a, x), kv_width(a, x)):
            out += _linear("shared/attention_adapters", wide, rank, False, "none")
            out += _linear(
                "shared/attention_adapters", rank, width, False, "column"
            )  # as the q, k, v it adds to
    if use.ffn_adapters:  # the FFN's input projection (gate and up together when gated)
        w = x.widths(block).f
        out += _linear("shared/ffn_adapters", x.d, rank, False, "none")
        out += _linear("shared/ffn_adapters", rank, 2 * w if ffn.gated else w, False, "column")
    return out + _linear("shared/projection", x.d, x.d, False, "none")


def block_tensors(config: ResolvedShape, block: Block, x: Dims, cross: bool) -> list[ParamTensor]:
    """The tensors of one layer of ``block``; keys relative to the stack, in model order."""
    attention_norms, cross_norms, ffn_norms = sublayer_norms(config)
    out: list[ParamTensor] = []
    if block.shared is not None:  # Zamba2: the shared block, then the recurrent mixer and its norm
        assert block.mixer is not None
        out = shared_tensors(config, block, x) + mixer_tensors(block.mixer, x)
        return out + norm_tensors(config, "mixer/norm", x.d, attention_norms)
    if "mixer" in block.projections:
        out += projection_tensors(config, "mixer", x, attention_norms)
    if block.attention is not None:
        out += attention_tensors(config, block.attention, x, "attention")
        if config.relative_bias_per_layer:  # UMT5: each layer's self-attention holds its own table
            out.append(ParamTensor("attention/relative_bias", (config.relative_attention_num_buckets, x.h)))
        out += norm_tensors(config, "attention/norm", x.d, attention_norms)
    if block.mixer is not None:
        out += mixer_tensors(block.mixer, x)
        if not block.parallel_mixers:  # beside attention (Falcon-H1) it reads attention/norm's output
            out += norm_tensors(config, "mixer/norm", x.d, attention_norms)
    if cross:
        out += attention_tensors(config, cross_attention(config), x, "cross_attention")
        out += norm_tensors(config, "cross_attention/norm", x.d, cross_norms)
    if block.ffn is not None:
        out += ffn_tensors(config, block.ffn, block, x)
        if block.attention is not None and block.attention.tanh_gates:  # Mllama's cross_attn_mlp_gate
            out.append(ParamTensor("ffn/tanh_gate", (1,)))
        out += norm_tensors(config, "ffn/norm", x.d, ffn_norms)
    if "ffn" in block.projections:
        out += projection_tensors(config, "ffn", x, ffn_norms)
    p = config.per_layer_input_dim
    if p:  # Gemma 3n/4: per_layer_input_gate, per_layer_projection, post_per_layer_input_norm
        out += _linear("per_layer/gate", x.d, p, False, "none") + _linear(
            "per_layer/out", p, x.d, False, "none"
        )
        out += norm_tensors(config, "per_layer/norm", x.d)
    norm = lambda key, width: norm_tensors(config, key, width)  # noqa: E731
    if config.altup_inputs:  # Gemma 3n (analysis/altup.py)
        out += altup_layer_tensors(config.altup_inputs, x.d, norm)
    if config.laurel_rank and has_laurel(config.laurel_rank, block):
        out += laurel_tensors(config.laurel_rank, x.d, norm)
    if config.hyper_connections:  # DeepSeek-V4 (analysis/hyper.py)
        out += hyper_layer_tensors(config.hyper_connections, x.d, block)
    return out


def rotary_width(config: ResolvedShape) -> int:
    """The widest rotary width of the model's attention layers: MLA's qk_rope_head_dim, else rotary_dim or the
    head width (the width of one rotary embedding's frequency table, two channels per frequency)."""
    widths = [
        a.qk_rope_head_dim if a.latent else config.rotary_dim or a.head_dim
        for stack in stacks(config)
        for block in config.stack_plan(stack.name).blocks
        if (a := block.attention) is not None
    ]
    return max(widths, default=0)


def _embedding_tensors(config: ResolvedShape, x: Dims) -> list[ParamTensor]:
    d, d_tok, copies = x.d, x.d_tok, len(x.stacks)
    wide = d_tok if config.factorized_embeddings else d  # width of the position / type tables and the norm
    out = [ParamTensor("embedding/token", (config.token_rows, d_tok), split="vocab")]
    if (
        config.decoder_token_table
    ):  # T5Gemma: the decoder's own table, with the decoder's first layer under PP
        out.append(
            ParamTensor("embedding/decoder_token", (config.token_rows, d_tok), split="vocab", stack="decoder")
        )
    project = _linear("embedding/project_in", d_tok, d, config.embedding_projection_bias, "none")
    if config.embedding_projection and not config.factorized_embeddings:
        out += project  # OPT-350m: right after the token lookup
    if config.position == "learned":
        out.append(ParamTensor("embedding/position", (config.position_rows, wide), copies))
    if config.type_vocab_size:
        out.append(ParamTensor("embedding/type", (config.type_vocab_size, wide)))
    if config.resolved_embedding_norm:
        out += [replace(t, copies=copies) for t in norm_tensors(config, "embedding/norm", wide)]
    if config.embedding_projection and config.factorized_embeddings:
        out += project  # ALBERT: after the embedding norm
    if (
        config.per_layer_input_dim
    ):  # Gemma 3n/4: embed_tokens_per_layer, per_layer_model_projection and its norm
        width = per_layer_width(config, x)
        out.append(
            ParamTensor("embedding/per_layer", (config.per_layer_vocab_size or config.vocab_size, width))
        )
        out += _linear("embedding/per_layer_project", d, width, False, "none")
        out += norm_tensors(config, "embedding/per_layer_norm", config.per_layer_input_dim)
    if config.altup_inputs:  # Gemma 3n's AltUp copies of the stream
        out.append(altup_model_tensor("embedding/altup_project", config.altup_inputs, d))
    return out + input_tensors(config, d)  # a drafter's input from its target (analysis/drafter.py)


def model_tensors(config: ResolvedShape, x: Dims) -> list[ParamTensor]:
    """Every parameter tensor of ``config`` at sizes ``x`` (tied weights once), with its key and TP split."""
    out = _embedding_tensors(config, x)
    for sd in x.stacks:
        name = sd.name
        if config.resolved_relative_bias and not config.relative_bias_per_layer:
            out.append(ParamTensor(f"{name}/attention/relative_bias", (config.relative_attention_num_buckets, x.h),
                                   stack=name))  # fmt: skip
        if config.disentangled is not None:  # DeBERTa's rel_embeddings (2 span x d) and its norm
            out.append(
                ParamTensor(f"{name}/attention/rel_embeddings", (config.disentangled.rows, x.d), stack=name)
            )
            if config.disentangled.norm:
                out += [
                    replace(t, stack=name)
                    for t in norm_tensors(config, f"{name}/attention/rel_embeddings", x.d)
                ]
        for block, count in sd.blocks:
            layers = 1 if config.shared_layers else count
            for t in block_tensors(config, block, x, sd.stack.cross_attention):
                uses = (
                    min(layers, t.shared_sets) if t.shared_sets else layers
                )  # a shared block's sets (Zamba2)
                out.append(replace(t, key=f"{name}/{t.key}", copies=uses * t.copies, stack=name,
                                   per_layer=True, block=block.name, per_layer_copies=t.copies))  # fmt: skip
        if config.rope_scale:  # Mistral Large 4's LeRoPE: a log-scale per rotary frequency (decoders only)
            out.append(ParamTensor(f"{name}/rope_scale", (rotary_width(config) // 2,), stack=name))
        if config.hyper_connections:  # DeepSeek-V4: the streams collapsed before the final norm
            out += hyper_head_tensors(config.hyper_connections, x.d, name)
        if config.altup_inputs:  # folded back before the final norm
            out.append(altup_model_tensor(f"{name}/altup_unembed", config.altup_inputs, x.d, stack=name))
        if config.resolved_final_norm:
            out += [
                replace(t, key=f"{name}/final_norm", stack=name)
                for t in norm_tensors(config, "final_norm", x.d)
            ]
    d, d_tok = x.d, x.d_tok
    if config.resolved_pooler:
        out += _linear("pooler", d, d, config.bias, "none")
    out += head_tensors(config, d)  # a drafter's output projection, a masked head's centroids
    if config.resolved_lm_head and config.embedding_projection:
        out.append(ParamTensor("head/project_out", (d_tok, d)))
    if config.resolved_lm_head and not config.tie_embeddings:
        out.append(ParamTensor("head/lm", (config.vocab_size, d_tok), split="vocab"))
    if config.resolved_lm_head and config.lm_head_bias:
        out.append(ParamTensor("head/lm_bias", (config.vocab_size,), split="vocab"))
    return out


def param_terms(config: ResolvedShape, x: Dims) -> dict[str, Num]:
    """Parameters by breakdown key at sizes ``x`` (ints or arrays), in model order."""
    out: dict[str, Num] = {}
    for t in model_tensors(config, x):
        out[t.key] = out[t.key] + t.numel if t.key in out else t.numel
    return out


def inactive_params(config: ResolvedShape, x: Dims) -> Num:
    """Parameters of the routed experts a token does not use: (num_experts - top_k) per MoE layer."""
    total: Num = 0
    for sd in x.stacks:
        for block, count in sd.blocks:
            ffn = block.ffn
            if ffn is None or not ffn.moe:
                continue
            per_expert = sum(prod(t.shape) for t in ffn_tensors(config, ffn, block, x) if t.expert)
            layers = 1 if config.shared_layers else count
            total = total + layers * (ffn.num_experts - ffn.top_k) * per_expert
    return total


def param_tensors(config: ResolvedShape) -> list[ParamTensor]:
    """Every parameter tensor of ``config`` (tied weights once), with its breakdown key and TP split."""
    return model_tensors(config, Dims.of(config))


def count_params(config: ResolvedShape) -> Breakdown:
    """Trainable parameters of ``config`` by component; ``.total`` is the model's size."""
    out = Breakdown()
    for key, value in param_terms(config, Dims.of(config)).items():
        out.add(key, value)
    return out


def active_params(config: ResolvedShape) -> int:
    """Parameters a token uses (module docstring): the total for dense models."""
    x = Dims.of(config)
    return int(sum(param_terms(config, x).values()) - inactive_params(config, x))
