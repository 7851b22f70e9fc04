"""The shape a checkpoint tensor must have, from the block of its layer (``config.stack_plan(stack).block_at(layer)``,
the layer model of DESIGN.md §9): ``verify --checkpoint`` checks every tensor it can place, so a transposed or
reshaped tensor whose element count matches is named even where its component's total agrees.

One function, :func:`tensor_shape`, from (block, tensor) to the expected shape and the config's reason, or to "the
block builds no such tensor" (then the tensor is extra, not counted). The widths are the analysis' own
(:mod:`embedcalc.analysis.structure`: ``head_width``, ``kv_width``, the block's FFN widths), laid out as transformers
5.24 stores them (``nn.Linear``: out x in):

- standard attention: ``q_proj`` (H hd, d), twice as tall with an output gate (Qwen3-Next); ``k_proj`` / ``v_proj``
  (G hd, d), none where the layer reuses an earlier layer's keys (``kv_shared``; Gemma 4's ``is_kv_shared_layer``)
  and no ``v_proj`` where the values are the keys (``values_from_keys``; Gemma 4's ``attention_k_eq_v``);
  ``o_proj`` (d, H hd); q/k norms (hd,) per head or (H hd,) / (G hd,) over all heads, no ``k_norm`` where K/V are
  shared; ``sinks`` (H,); the block's own head_dim and KV heads (Gemma 4's full layers, Nemotron NAS);
- latent attention (``DeepseekV3Attention``): ``q_a_proj`` (q_lora_rank, d), ``q_a_layernorm`` (q_lora_rank,),
  ``q_b_proj`` (H (nope + rope), q_lora_rank) or one ``q_proj`` (H (nope + rope), d); ``kv_a_proj_with_mqa``
  (kv_lora_rank + rope, d), ``kv_a_layernorm`` (kv_lora_rank,), ``kv_b_proj`` (H (nope + v), kv_lora_rank);
  ``o_proj`` (d, H v);
- a dense FFN: ``gate_proj`` / ``up_proj`` (F, d), a fused ``gate_up_proj`` (2 F, d), ``down_proj`` (d, F);
- a mixture of experts: the router (``gate`` / ``router`` / Gemma 4's ``router.proj`` / HunYuan's ``gate.wg``) (E, d)
  and its bias (E,), ERNIE 4.5's ``moe_statics.e_score_correction_bias`` (1, E);
  Gemma 4's ``router.scale`` (d,) and ``router.per_expert_scale`` (E,); per-expert modules ``experts.N.gate_proj``
  / ``up_proj`` / Mixtral's ``w1`` / ``w3`` (I, d) and ``down_proj`` / ``w2`` (d, I), as ``save_pretrained`` writes
  Qwen3-MoE, Mixtral and DeepSeek-V3; fused 3-D experts ``experts.gate_up_proj`` (E, 2 I, d) and
  ``experts.down_proj`` (E, d, I) (``Gemma4TextExperts``, ``Qwen3MoeExperts``), GPT-OSS's input-major
  ``gate_up_proj`` (E, d, 2 I) and ``down_proj`` (E, I, d) with their biases (E, 2 I), (E, d) (``GptOssExperts``;
  Llama 4's ``Llama4TextExperts`` and Aria's likewise, without biases: :data:`INPUT_MAJOR_EXPERTS`); GraniteMoE's
  ``input_linear`` (E, 2 I, d) / ``output_linear`` (E, d, I);
  shared experts as a dense FFN of the shared width, ``shared_expert_gate`` (1, d); Gemma 4's branch norms (d,);
- a layer's norms (d,); Gemma 4's per-layer inputs ``per_layer_input_gate`` (P, d), ``per_layer_projection``
  (d, P); outside the layers the per-layer table (per-layer vocab, L P), ``per_layer_model_projection`` (L P, d)
  and ``per_layer_projection_norm`` (P,); a recurrent mixer's tensors (:mod:`checkpoint_mixers`).

- fused Q/K/V (:data:`~embedcalc.reconcile.checkpoint_names.QKV`): one ``nn.Linear(d, H hd + 2 G hd)``, the
  queries' rows then the keys' and values' (Phi-3's ``qkv_proj``, GPTBigCode's ``c_attn`` with MQA's one KV head,
  Falcon's ``query_key_value`` in its three layouts), or the same rows interleaved head by head (GPT-NeoX's and
  BLOOM's ``query_key_value``, (3 H hd, d)), which is the same shape; ModernBERT's ``Wqkv`` (3 d, d); GPT-2's
  ``Conv1D`` ``c_attn`` is stored input-major, (d, 3 d) (:data:`CONV1D_QKV`).

GPT-2's other Conv1D weights are input-major too: ``mlp.c_fc`` (d, F), ``mlp.c_proj`` (F, d), ``attn.c_proj``
(H hd, d). T5's (``T5Attention``, ``T5DenseActDense`` / ``T5DenseGatedActDense``) ``q`` / ``k`` / ``v`` / ``o`` are
q/k/v/o_proj's, ``wi`` / ``wi_0`` / ``wi_1`` (d_ff, d), ``wo`` (d, d_ff), ``relative_attention_bias``
(relative_attention_num_buckets, H) in layer 0 of each stack. DeepSeek-V3.2's indexer: ``wq_b`` (H_I D_I,
q_lora_rank), ``wk`` (D_I, d), ``k_norm`` (D_I,), ``weights_proj`` (H_I, d).

A bias has its weight's first dimension. Tensors no rule names here (BERT-style ``dense`` layers) are checked by
their component's total only.
"""

from __future__ import annotations

from dataclasses import replace

from embedcalc.analysis.structure import Dims, head_width, kv_width, per_layer_width, q_heads
from embedcalc.config.layer_plan import FFN, Attention, Block
from embedcalc.config.resolved import ResolvedShape
from embedcalc.reconcile.checkpoint_compressed import compressed_role
from embedcalc.reconcile.checkpoint_indexer import indexer_shape
from embedcalc.reconcile.checkpoint_mixers import mixer_tensor_shape
from embedcalc.reconcile.checkpoint_names import QKV, TensorRole, within_layer
from embedcalc.reconcile.checkpoint_shared import shared_tensor_shape

# (shape, why); a shape of None: the block builds no such tensor, and why
Expected = tuple[tuple[int, ...] | None, str]

_IN = ("gate_proj", "up_proj", "w1", "w3", "c_fc", "wi", "wi_0", "wi_1")
# model types whose fused experts are stored input-major, (E, d, 2 I) and (E, I, d): transformers 5.24's
# GptOssExperts, Llama4TextExperts, AriaGroupedExpertsGemm (their forward multiplies x @ W)
INPUT_MAJOR_EXPERTS = frozenset({"gpt_oss", "llama4", "llama4_text", "aria", "aria_text"})
_OUT = ("down_proj", "w2", "c_proj", "wo")
# T5's and MPNet's attention projections q / k / v / o (T5Attention, MPNetSelfAttention), GPT-2's attn.c_proj
_ALIASES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "c_proj": "o_proj"}
# model types whose fused c_attn is a Conv1D (transformers' pytorch_utils.Conv1D: weight (in, out))
CONV1D_QKV = frozenset({"gpt2"})


def _linear(rows: int, cols: int, why_rows: str, why_cols: str, param: str) -> Expected | None:
    """An ``nn.Linear(cols, rows)``'s weight (rows, cols) or bias (rows,)."""
    if param == "weight":
        return (rows, cols), f"{why_rows}, {why_cols}"
    return ((rows,), why_rows) if param == "bias" else None


def _standard(a: Attention, x: Dims, part: str, param: str, conv1d: bool = False) -> Expected | None:
    part = _ALIASES.get(part, part)
    # the block's own heads where it sets them (Laguna, Step-3.7), else the config's
    hd, h = int(head_width(a, x)), int(q_heads(a, x))
    if part == "g_proj":  # the per-head gate (Laguna, Step-3.7)
        return _linear(h, x.d, "num_heads", "hidden", param) if a.head_gate else None
    q, kv = h * hd, int(kv_width(a, x))
    vd = a.v_head_dim or hd  # the value heads' own width (MiMo-V2-Flash), else head_dim
    if part in QKV:
        why = "num_heads x head_dim + 2 x num_kv_heads x head_dim"
        if conv1d and param == "weight":  # Conv1D(3 d, d) stores its weight (in, out)
            return (x.d, q + 2 * kv), f"hidden, {why} (Conv1D, input-major)"
        return _linear(q + 2 * kv, x.d, why, "hidden", param)
    if part in ("k_proj", "v_proj", "k_norm", "key_layernorm", "k_layernorm") and a.kv_shared:
        return (
            None,
            "the layer reuses an earlier layer's keys and values (kv_shared): it builds no such tensor",
        )
    if part == "v_proj" and a.values_from_keys:
        return None, "the layer's values are its keys (values_from_keys): it builds no v_proj"
    if part == "q_proj":
        if a.output_gate:  # Qwen3-Next: query and output gate in one projection
            return _linear(2 * q, x.d, "2 x num_heads x head_dim (query and output gate)", "hidden", param)
        return _linear(q, x.d, "num_heads x head_dim", "hidden", param)
    if part == "v_proj" and a.v_head_dim:
        return _linear(kv // hd * vd, x.d, "num_kv_heads x v_head_dim", "hidden", param)
    if part in ("k_proj", "v_proj"):
        return _linear(kv, x.d, "num_kv_heads x head_dim", "hidden", param)
    if part == "o_proj" and a.v_head_dim:
        return _linear(x.d, h * vd, "hidden", "num_heads x v_head_dim", param)
    if part == "o_proj":
        return _linear(x.d, q, "hidden", "num_heads x head_dim", param)
    if param not in ("weight", "bias") or a.qk_norm == "none":
        return None
    if part in ("q_norm", "query_layernorm", "q_layernorm"):
        return ((hd,), "head_dim") if a.qk_norm == "head" else ((q,), "num_heads x head_dim")
    if part in ("k_norm", "key_layernorm", "k_layernorm"):
        return ((hd,), "head_dim") if a.qk_norm == "head" else ((kv,), "num_kv_heads x head_dim")
    return None


def _latent(a: Attention, x: Dims, part: str, param: str) -> Expected | None:
    """Multi-head latent attention (DeepSeek-V2 §2.1; transformers' ``DeepseekV3Attention``)."""
    h, rank, kv_rank = int(x.h), a.q_lora_rank or 0, a.kv_lora_rank
    qk, rope = a.qk_nope_head_dim + a.qk_rope_head_dim, a.qk_rope_head_dim
    norms = {"q_a_layernorm": ((rank,), "q_lora_rank"), "kv_a_layernorm": ((kv_rank,), "kv_lora_rank")}
    if part in norms:
        return norms[part] if param in ("weight", "bias") else None
    linears = {
        "q_a_proj": (rank, x.d, "q_lora_rank", "hidden"),
        "q_b_proj": (h * qk, rank, "num_heads x (qk_nope_head_dim + qk_rope_head_dim)", "q_lora_rank"),
        "q_proj": (h * qk, x.d, "num_heads x (qk_nope_head_dim + qk_rope_head_dim)", "hidden"),
        "kv_a_proj_with_mqa": (kv_rank + rope, x.d, "kv_lora_rank + qk_rope_head_dim", "hidden"),
        "kv_b_proj": (h * (a.qk_nope_head_dim + a.v_head_dim), kv_rank,
                      "num_heads x (qk_nope_head_dim + v_head_dim)", "kv_lora_rank"),
        "o_proj": (x.d, h * a.v_head_dim, "hidden", "num_heads x v_head_dim"),
    }  # fmt: skip
    if part not in linears:
        return None
    rows, cols, why_rows, why_cols = linears[part]
    return _linear(rows, cols, why_rows, why_cols, param)


def _attention(a: Attention, x: Dims, part: str, param: str, conv1d: bool) -> Expected | None:
    if part == "sinks" or param == "sinks":
        return (int(q_heads(a, x)),), "num_heads"
    if a.latent:
        return _latent(a, x, part, param)
    return _standard(a, x, part, param, conv1d)


def _dense(width: int, gated: bool, x: Dims, part: str, param: str, what: str) -> Expected | None:
    """A dense FFN of ``width`` (a block's FFN, or the shared experts): up/gate (width, d), down (d, width)."""
    if part in _IN:
        return _linear(width, x.d, what, "hidden", param)
    if part in ("gate_up_proj", "up_gate_proj") and gated:  # GTE's checkpoint: mlp.up_gate_proj
        return _linear(2 * width, x.d, f"2 x {what}", "hidden", param)
    if part in _OUT:
        return _linear(x.d, width, "hidden", what, param)
    return None


def _experts(ffn: FFN, x: Dims, inside: list[str], param: str, input_major: bool) -> Expected | None:
    """The routed experts: per-expert modules, or one 3-D tensor per projection (module docstring)."""
    e, width, d = ffn.num_experts, ffn.expert_dim, x.d
    fused_in = 2 * width if ffn.gated else width
    why_in = "2 x moe_intermediate_size" if ffn.gated else "moe_intermediate_size"
    if any(s.isdigit() for s in inside):  # experts.N.<projection>: one expert's dense FFN
        return _dense(width, ffn.gated, x, inside[-1], param, "moe_intermediate_size")
    last = inside[-1] if inside else ""
    if last in ("input_linear", "output_linear") and param == "weight":  # GraniteMoeParallelExperts
        if last == "input_linear":
            return (e, fused_in, d), f"num_experts, {why_in}, hidden"
        return (e, d, width), "num_experts, hidden, moe_intermediate_size"
    if input_major:  # x @ W (GPT-OSS with biases, Llama 4 and Aria without)
        layouts = {"gate_up_proj": ((e, d, fused_in), f"num_experts, hidden, {why_in}"),
                   "down_proj": ((e, width, d), "num_experts, moe_intermediate_size, hidden"),
                   "gate_up_proj_bias": ((e, fused_in), f"num_experts, {why_in}"),
                   "down_proj_bias": ((e, d), "num_experts, hidden")}  # fmt: skip
    else:
        layouts = {"gate_up_proj": ((e, fused_in, d), f"num_experts, {why_in}, hidden"),
                   "up_proj": ((e, fused_in, d), f"num_experts, {why_in}, hidden"),
                   "down_proj": ((e, d, width), "num_experts, hidden, moe_intermediate_size")}  # fmt: skip
    shape = layouts.get(param)
    return (shape[0], shape[1]) if shape is not None else None


def _moe(
    ffn: FFN, x: Dims, component: str, inside: list[str], param: str, input_major: bool
) -> Expected | None:
    e, d, last = ffn.num_experts, x.d, inside[-1] if inside else ""
    if component == "moe/router":
        if (
            param == "e_score_correction_bias" and "moe_statics" in inside
        ):  # Ernie4_5_MoeStatics: (1 group, E)
            return (1, e), "1 group, num_experts"
        if param == "e_score_correction_bias":  # Laguna's, a Parameter of the router
            return (e,), "num_experts"
        if ffn.zero_experts:  # LongCat-Flash's router scores its zero experts too
            return _linear(e + ffn.zero_experts, d, "num_experts + zero_experts", "hidden", param)
        return _linear(e, d, "num_experts", "hidden", param)
    if component == "moe/router_scale":  # Gemma4TextRouter.scale, .per_expert_scale
        return {"scale": ((d,), "hidden"), "per_expert_scale": ((e,), "num_experts")}.get(param)
    if component == "moe/experts":  # a latent MoE's experts read and write its latent width
        return _experts(
            ffn, replace(x, d=ffn.latent_dim) if ffn.latent_dim else x, inside, param, input_major
        )
    if component == "moe/latent":  # NemotronHMoE: fc1_latent_proj hidden -> L, fc2_latent_proj L -> hidden
        if last == "fc1_latent_proj":
            return _linear(ffn.latent_dim, d, "moe_latent_size", "hidden", param)
        return _linear(d, ffn.latent_dim, "hidden", "moe_latent_size", param)
    if component == "moe/shared":
        return _dense(ffn.shared_dim, ffn.gated, x, last, param, "shared experts' intermediate size")
    if component == "moe/shared_gate":
        return _linear(1, d, "1", "hidden", param)
    if component == "moe/branch_norms":
        return ((d,), "hidden") if param in ("weight", "bias") else None
    return None


def _embedding(config: ResolvedShape, x: Dims, component: str, param: str) -> Expected | None:
    """The tables outside the layers: token rows x width, the head, Gemma 4's per-layer inputs."""
    if component == "head/lm_bias":  # GPT-J's, Phi-2's lm_head bias
        return ((config.vocab_size,), "vocab_size") if param == "bias" else None
    if param != "weight":
        return (
            ((config.embed_dim,), "hidden") if component.endswith("/final_norm") and param == "bias" else None
        )
    d, vocab = config.embed_dim, config.vocab_size
    if component.endswith("/final_norm"):
        return (d,), "hidden"
    if component == "head/lm":
        return (vocab, d), "vocab_size, hidden"
    drafter = {  # Gemma 4's assistant: pre_projection, post_projection, masked_embedding.centroids
        "embedding/input_projection": (config.input_projection_dim, "2 x backbone_hidden_size"),
        "head/output_projection": (config.output_projection_dim, "backbone_hidden_size"),
        "head/centroids": (config.head_centroids, "num_centroids"),
    }
    if component in drafter:
        width, why = drafter[component]
        if not width:
            return None
        if component == "embedding/input_projection":
            return (d, width), f"hidden, {why}"
        return (width, d), f"{why}, hidden"
    if component == "embedding/token":
        width = config.token_embed_dim or d
        if config.extra_token_rows:  # Mllama: vocab_size + 8 rows
            return (config.token_rows, width), "vocab_size + extra_token_rows, hidden"
        return (vocab, width), "vocab_size, hidden"
    p = config.per_layer_input_dim
    if not p:
        return None
    packed = int(per_layer_width(config, x))
    if component == "embedding/per_layer":
        return (config.per_layer_vocab_size or vocab, packed), (
            "vocab_size_per_layer_input, num_layers x hidden_size_per_layer_input"
        )
    if component == "embedding/per_layer_project":
        return (packed, d), "num_layers x hidden_size_per_layer_input, hidden"
    if component == "embedding/per_layer_norm":
        return (p,), "hidden_size_per_layer_input"
    return None


INDEXED = ("attention/index_q", "attention/index_weights")


def refile(role: TensorRole, block: Block | None, param: str = "") -> TensorRole:
    """The role as the layer's block places it: in a MoE block a dense FFN beside the routed experts (Gemma 4's
    ``mlp`` next to ``experts``) is its shared branch, ``moe/shared``; latent attention without a query latent
    (DeepSeek-V2-Lite's ``q_lora_rank`` null) has one full-rank ``q_proj``, ``attention/q``; DeepSeek-V4's
    compressed attention by its own names (:mod:`embedcalc.reconcile.checkpoint_compressed`, ``param`` the
    tensor's parameter name)."""
    if block is not None and block.attention is not None and block.attention.compressed:
        role = compressed_role(role, param)
    key = role.key
    if block is None or key is None:
        return role
    stack, _, component = key.partition("/")
    a = block.attention
    if component == "attention/qkv" and a is not None and a.latent and a.q_lora_rank is None:
        return replace(role, key=f"{stack}/attention/q")
    if component in ("ffn/in", "ffn/out") and block.ffn is not None and block.ffn.moe:
        return replace(role, key=f"{stack}/moe/shared")
    return role


class ShapeRules:
    """The shapes of one config's checkpoint tensors (module docstring): its ``stack``'s blocks, its sizes, and
    whether its fused experts are input-major (``model_type`` in :data:`INPUT_MAJOR_EXPERTS`)."""

    def __init__(self, config: ResolvedShape, stack: str, model_type: str | None) -> None:
        self.config = config
        self.plan = config.stack_plan(stack)
        self.num_layers = self.plan.num_layers  # once: block() runs per tensor
        self.x = Dims.of(config)
        self.input_major = model_type in INPUT_MAJOR_EXPERTS
        self.conv1d = model_type in CONV1D_QKV

    def block(self, layer: int | None) -> Block | None:
        """The block of ``layer``; None outside the stack."""
        return self.plan.block_at(layer) if layer is not None and layer < self.num_layers else None

    def tensor_shape(self, role: TensorRole, param: str) -> Expected | None:
        """The shape the config gives the tensor at ``role`` with parameter ``param`` and why, from the block of
        its layer; a None shape where that block builds no such tensor; None where no rule here names it."""
        if role.key is None:
            return None
        if role.layer is None:
            return _embedding(self.config, self.x, role.key, param)
        block = self.block(role.layer)
        if block is None:
            return None
        _, _, component = role.key.partition("/")
        return _in_layer(self.config, self.x, block, component, within_layer(role.module, role.layer), param,
                         (self.input_major, self.conv1d))  # fmt: skip


def _conv1d(x: Dims, block: Block, component: str) -> Expected | None:
    """GPT-2's other Conv1D weights, stored (in, out) (transformers' pytorch_utils.Conv1D): ``mlp.c_fc`` (d, F),
    ``mlp.c_proj`` (F, d), ``attn.c_proj`` (H hd, d); their biases (out,) are the nn.Linear rule's."""
    if component == "attention/out" and block.attention is not None:
        q = int(x.h) * int(head_width(block.attention, x))
        return (q, x.d), "num_heads x head_dim, hidden (Conv1D, input-major)"
    f = int(x.widths(block).f)
    if component == "ffn/in":
        return (x.d, f), "hidden, intermediate_size (Conv1D, input-major)"
    if component == "ffn/out":
        return (f, x.d), "intermediate_size, hidden (Conv1D, input-major)"
    return None


def _in_layer(
    config: ResolvedShape,
    x: Dims,
    block: Block,
    component: str,
    inside: list[str],
    param: str,
    layouts: tuple[bool, bool],
) -> Expected | None:
    """A tensor of a layer of ``block``: ``component`` its breakdown key below the stack, ``inside`` its module path
    within the layer; ``layouts``: (fused experts input-major, fused QKV a Conv1D)."""
    input_major, conv1d = layouts
    last = inside[-1] if inside else ""
    if component.endswith("/projection"):  # a sublayer replaced by a d x d linear (DeciLM)
        return ((x.d, x.d), "hidden, hidden") if param == "weight" else None
    if block.shared is not None:  # Zamba2's shared block: what reads its 2 d wide input, the use's adapters
        found = shared_tensor_shape(block, x, component, inside, param)
        if found is not None:
            return found
    if component in ("attention/norm", "ffn/norm", "mixer/norm", "per_layer/norm", "cross_attention/norm"):
        return ((x.d,), "hidden") if param in ("weight", "bias") else None
    if component.startswith("mixer/") and block.mixer is not None:
        return mixer_tensor_shape(block.mixer, x.d, inside, param)
    if component.endswith("tanh_gate"):
        return (1,), "one scalar"
    if (
        component == "attention/relative_bias"
    ):  # T5Attention's, layer 0 of each stack: nn.Embedding(buckets, H)
        buckets = config.relative_attention_num_buckets
        return ((buckets, x.h), "relative_attention_num_buckets, num_heads") if param == "weight" else None
    if block.attention is not None and block.attention.compressed and component.startswith("attention/"):
        # DeepSeek-V4's attention: the indexer's query and head weights have DeepSeek-V3.2's shapes; the rest of
        # its tensors are counted, not shape-checked
        return indexer_shape(block.attention, x, last, param) if component in INDEXED else None
    if component.startswith("attention/index_") and block.attention is not None:
        return indexer_shape(block.attention, x, last, param)
    if conv1d and param == "weight" and last in ("c_fc", "c_proj"):
        return _conv1d(x, block, component)
    p = config.per_layer_input_dim
    if component == "per_layer/gate" and p:
        return _linear(p, x.d, "hidden_size_per_layer_input", "hidden", param)
    if component == "per_layer/out" and p:
        return _linear(x.d, p, "hidden", "hidden_size_per_layer_input", param)
    # a decoder's cross-attention (BART's encoder_attn) has its self-attention's widths
    if component.startswith(("attention/", "cross_attention/")) and block.attention is not None:
        return _attention(block.attention, x, last, param, conv1d)
    ffn = block.ffn
    if ffn is None:
        return None
    if component.startswith("moe/") and ffn.moe:
        return _moe(ffn, x, component, inside, param, input_major)
    if component in ("ffn/in", "ffn/out") and not ffn.moe:
        return _dense(int(x.widths(block).f), ffn.gated, x, last, param, "intermediate_size")
    return None
