"""DeepSeek-V2 / V3 (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM: multi-head latent attention), DeepSeek-V3.2 and
GLM-5 (DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM: DeepSeek sparse attention, read as attention kind sparse) and
GLM-4.5 (Glm4MoeForCausalLM: standard attention), all with dense MLPs on the first ``first_k_dense_replace`` layers
(or as ``mlp_layer_types`` lists them) and routed plus shared experts after; and MiniCPM3 (MiniCPM3ForCausalLM:
DeepSeek-V2's MLA in a dense LLaMA stack, no experts).

DeepSeek-V3.2 (transformers' ``DeepseekV32Attention``, always with a query rank) adds a lightning indexer to every
layer: ``index_n_heads`` heads of ``index_head_dim`` (wq_b from the query latent, wk with a LayerNorm, weights_proj)
keeping ``index_topk`` keys per query. GLM-5 (``GlmMoeDsaConfig``) is the same model whose layers may reuse the
previous full layer's selection (``indexer_types`` "shared": no indexer there), from ``indexer_types``, else
``index_topk_pattern``, else the ``index_topk_freq`` / ``index_skip_topk_offset`` schedule (all full by default).

MLA (DeepSeek-V2 report §2.1): q_a_proj Linear(hidden, q_lora_rank) (bias when ``attention_bias``), q_a_layernorm,
q_b_proj, or one bias-free q_proj when ``q_lora_rank`` is null (V2-Lite); kv_a_proj_with_mqa Linear(hidden,
kv_lora_rank + qk_rope_head_dim), kv_a_layernorm, kv_b_proj; o_proj from heads x v_head_dim (bias when
``attention_bias``). MoE layers: a bias-free router of ``n_routed_experts`` (V3 / GLM: its
``e_score_correction_bias`` is a buffer, not a parameter), experts of ``moe_intermediate_size``, and the shared
experts as one MLP of ``n_shared_experts`` x ``moe_intermediate_size``. transformers places MoE layers by
``first_k_dense_replace`` alone (``moe_layer_freq`` is not read). GLM-4.5: q/k/v biases when ``attention_bias``,
none on o_proj, q/k RMSNorm(head_dim) when ``use_qk_norm``, partial rotary (no parameters).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.layered import ignore_moe_keys, origin, put_layout, read_moe
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, all_of


def _moe_layout(
    r: KeyReader, shared_selection: tuple[str, list[bool]] | None = None, fixed_first: int | None = None
) -> None:
    """Dense layers, then MoE from ``first_k_dense_replace`` on (or as ``mlp_layer_types`` lists them, which
    DeepseekV32Config writes); ``fixed_first``: a class without ``first_k_dense_replace`` whose default
    ``mlp_layer_types`` makes that many first layers dense (GLM-4.7-Flash: one); ``shared_selection`` (the key
    that decided it, and per layer whether it reuses the previous layer's top-k) gives GLM-5's shared layers a
    variant of their own."""
    ignore_moe_keys(r)
    r.ignore(
        "moe_layer_freq", "transformers places MoE layers by first_k_dense_replace alone and never reads it"
    )
    s_key, shared, _ = r.value("n_shared_experts")
    extra: dict[str, Any] = {}
    if isinstance(shared, int) and shared > 0:
        extra = {"num_shared_experts": shared}
    moe = read_moe(r, "n_routed_experts", extra=extra)
    layers = r.data.get("num_layers")
    if fixed_first is None:
        k_key, first, _ = r.value("first_k_dense_replace")
    else:
        reason = f"{r.family.config_class} does not read it: its default mlp_layer_types makes the first "
        r.ignore("first_k_dense_replace", reason + f"{fixed_first} layer(s) dense")
        k_key, first = "mlp_layer_types", fixed_first
    if moe is None or not isinstance(layers, int) or not isinstance(first, int):
        return
    sparse = _mlp_layer_types(r, layers, k_key)
    if sparse is None:
        sparse = [i >= first for i in range(layers)]
        note = f"layers {first}.. MoE, the first {first} dense"
    else:
        k_key, note = "mlp_layer_types", f"{sum(sparse)} MoE layers as mlp_layer_types lists them"
    names = ["moe" if is_moe else "default" for is_moe in sparse]
    blocks: dict[str, dict[str, Any]] = {"moe": {"ffn": moe}}
    if shared_selection is not None:
        i_key, shared = shared_selection
        names = [n + "_shared" if sh else n for n, sh in zip(names, shared, strict=True)]
        reuse = {"attention": {"kind": "sparse", "index_shared": True}}
        blocks |= {"default_shared": reuse, "moe_shared": {"ffn": moe} | reuse}
        k_key, note = f"{k_key}, {i_key}", f"{note}; {sum(shared)} layers reuse the previous selection"
    put_layout(r, names, blocks, f"n_routed_experts, num_experts_per_tok, moe_intermediate_size, {s_key}, {k_key}",
               note)  # fmt: skip


def _mlp_layer_types(r: KeyReader, layers: int, first_key: str) -> list[bool] | None:
    """Which layers are MoE by ``mlp_layer_types`` ("dense" / "sparse" per layer), None without the key."""
    key, value = r.lookup("mlp_layer_types")
    if value is MISSING or value is None:
        return None
    if not isinstance(value, list) or len(value) != layers or not all_of(value, {"dense", "sparse"}):
        r.problem(key, f"mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} layers; got "
                       f"{value!r}")  # fmt: skip
        return None
    if first_key != key:
        r.ignore(first_key, "mlp_layer_types decides which layers are MoE")
    return [v == "sparse" for v in value]


def map_mla(
    r: KeyReader, kind: str = "mla", extra: tuple[tuple[str, str], ...] = (), mlp_bias_read: bool = False
) -> None:
    spec: dict[str, Any] = {"kind": kind}
    keys = []
    for key, name in (("q_lora_rank", "q_lora_rank"), ("kv_lora_rank", "kv_lora_rank"),
                      ("qk_nope_head_dim", "qk_nope_head_dim"), ("qk_rope_head_dim", "qk_rope_head_dim"),
                      ("v_head_dim", "v_head_dim"), *extra):  # fmt: skip
        written, value, _ = r.value(key)
        keys.append(written)
        if value is not None:
            spec[name] = value
    note = (
        "multi-head latent attention"
        if kind == "mla"
        else "DeepSeek sparse attention: MLA + lightning indexer"
    )
    r.put("attention", spec, ", ".join(keys), origin(r, ", ".join(keys)), note)
    nope, rope = spec.get("qk_nope_head_dim"), spec.get("qk_rope_head_dim")
    if isinstance(nope, int) and isinstance(rope, int):
        r.derived("qk_head_dim", nope + rope, "qk_nope_head_dim + qk_rope_head_dim")
        hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
            # MLA's heads are qk_nope_head_dim + qk_rope_head_dim wide whatever hidden_size / heads is (GLM-4.7-Flash:
            # 2048 / 20); the flat head_dim says so, and the latent attention spec sets every width it uses
            r.put("head_dim", nope + rope, ", ".join(keys[2:4]), origin(r, ", ".join(keys[2:4])),
                  "MLA: each head is qk_nope_head_dim + qk_rope_head_dim wide")  # fmt: skip
    r.ignore("num_key_value_heads", "MLA caches one latent per token; kv_b_proj expands it to every head")
    r.ignore("head_dim", "MLA's head widths are qk_nope_head_dim + qk_rope_head_dim and v_head_dim")
    r.ignore("rope_interleave", hf_keys.ROPE)
    if not mlp_bias_read:
        r.expect("mlp_bias", (False,), "biases on the MLPs and shared experts")


def _read_deepseek(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    map_mla(r)
    _moe_layout(r)


def _read_glm4_moe_lite(r: KeyReader) -> None:
    """GLM-4.7-Flash (Glm4MoeLiteForCausalLM): DeepseekV3Attention (MLA) and GLM-4.5's MoE (DeepSeek-V3's router,
    experts and shared experts); ``Glm4MoeLiteConfig`` has no ``first_k_dense_replace``: ``mlp_layer_types``
    (default: layer 0 dense, the rest sparse) places the MoE layers."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    map_mla(r)
    r.ignore("pretraining_tp", "tensor-parallel split of the original training code; the same FLOPs")
    _moe_layout(r, fixed_first=1)


def _read_minicpm3(r: KeyReader) -> None:
    """MiniCPM3ForCausalLM: DeepseekV2Attention (MLA, biases on q_a / kv_a / o from attention_bias) in LLaMA's
    dense stack (LlamaMLP with mlp_bias, RMSNorm, pre-norm); ``v_head_dim`` null is hidden_size //
    num_attention_heads, as MiniCPM3Config computes it. Its three scalings have no parameters and no matmul FLOPs:
    ``scale_emb`` multiplies the embeddings (MiniCPM3ScaledWordEmbedding's embed_scale is a buffer),
    ``scale_depth`` / sqrt(layers) each residual branch, and hidden / ``dim_model_base`` divides the LM head's
    input."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    map_mla(r, mlp_bias_read=True)
    v_key, v_dim, v_in_file = r.value("v_head_dim")
    hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
    if v_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        attention = dict(r.data["attention"]) | {"v_head_dim": hidden // heads}
        r.put("attention", attention, v_key, "file" if v_in_file else "default",
              "v_head_dim null: hidden_size // num_attention_heads (MiniCPM3Config)")  # fmt: skip
    for key in ("scale_emb", "scale_depth", "dim_model_base"):
        r.ignore(key, "a scalar multiplier (MiniCPM3's embedding, residual and logit scaling): no parameters, no "
                      "matmul FLOPs")  # fmt: skip
    r.ignore("pretraining_tp", "tensor-parallel split of the original training code; the same FLOPs")


_INDEXER = (
    ("index_n_heads", "index_heads"),
    ("index_head_dim", "index_head_dim"),
    ("index_topk", "index_topk"),
)


def _read_deepseek_v32(r: KeyReader) -> None:
    """DeepSeek-V3.2 (and GLM-5): DeepSeek-V3's MLA with the lightning indexer in every layer (kind sparse)."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    map_mla(r, "sparse", _INDEXER)
    layers = r.data.get("num_layers")
    key, types = r.lookup("layer_types")
    if types is not MISSING and types is not None and isinstance(layers, int):
        if types != ["indexed_attention"] * layers:
            r.problem(key, f"layer_types = {types!r}: {r.family.config_class} builds indexed (DSA) attention in "
                           f"each of the {layers} layers, which the file must list as 'indexed_attention'")  # fmt: skip
        else:
            r.ignore(key, "every layer indexed (DSA) attention, as the class writes it")
    shared = (
        _indexer_types(r, layers)
        if r.family.model_type == "glm_moe_dsa" and isinstance(layers, int)
        else None
    )
    _moe_layout(r, shared)


def _indexer_types(r: KeyReader, layers: int) -> tuple[str, list[bool]] | None:
    """GLM-5's per-layer indexer (GlmMoeDsaConfig.__post_init__): ``indexer_types``, else ``index_topk_pattern``
    (F full / S shared), else the schedule ``index_topk_freq`` / ``index_skip_topk_offset``; a shared layer reuses
    the previous full layer's selection. Returns (the key that decided it, shared per layer), None when no layer
    is shared."""
    key, types = r.lookup("indexer_types")
    p_key, pattern = r.lookup("index_topk_pattern")
    f_key, freq = r.lookup("index_topk_freq")
    o_key, offset = r.lookup("index_skip_topk_offset")
    if types is MISSING or types is None:
        if pattern is not MISSING and pattern is not None:
            key, types = p_key, [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
        else:
            step = max(freq if isinstance(freq, int) else 1, 1)
            skip = offset if isinstance(offset, int) else 2
            key, types = (
                f_key,
                ["full" if max(i - skip + 1, 0) % step == 0 else "shared" for i in range(layers)],
            )
    for other in (p_key, f_key, o_key):
        if other != key and other in r.raw:
            r.ignore(other, f"{key} decides which layers run their own indexer")
    if not isinstance(types, list) or len(types) != layers or not all_of(types, {"full", "shared"}):
        r.problem(key, f"{key} must give 'full' or 'shared' for each of the {layers} layers; got {types!r}")
        return None
    if types and types[0] != "full":  # no layers: the schema refuses num_hidden_layers
        r.problem(key, f"{key}: layer 0 is 'shared', but a shared layer reuses an earlier layer's selection")
        return None
    if "shared" not in types:
        for k in (key, o_key):
            r.ignore(k, "every layer runs its own indexer")
        return None
    return key, [t == "shared" for t in types]


def read_glm4_moe(r: KeyReader, qk_norm: bool = True) -> None:
    """GLM-4.5's decoder; ``qk_norm`` False for a family whose attention builds no q/k norms whatever
    ``use_qk_norm`` says (GLM-4.5V's text model)."""
    read_core(r, qkv="attention_bias", out="attention_bias", ffn=False)
    r.fixed("out_bias", False, "Glm4MoeAttention: o_proj without bias")
    hidden, heads = r.data.get("embed_dim"), r.data.get("num_heads")
    if "head_dim" not in r.data and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
        # Glm4MoeAttention: getattr(config, "head_dim", None) or hidden_size // num_attention_heads (floor)
        r.put("head_dim", hidden // heads, "head_dim", "default", "hidden_size // num_attention_heads")
    qk_key, qk, _ = r.value("use_qk_norm")
    if not qk_norm:
        r.ignore(qk_key, f"{r.family.config_class}'s attention builds no q/k norms whatever this says")
    elif qk is True:
        r.put("attention", {"qk_norm": "head"}, qk_key, "file", "q_norm, k_norm: RMSNorm(head_dim)")
    else:
        r.ignore(qk_key, "false: no q/k norms")
    r.ignore("partial_rotary_factor", "partial rotary positions: " + hf_keys.ROPE)
    _moe_layout(r)


_V2: dict[str, Any] = dict(
    vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False, attention_bias=False,
    attention_dropout=0.0, first_k_dense_replace=0, kv_lora_rank=512, q_lora_rank=1536, n_routed_experts=64,
    n_shared_experts=2, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, num_experts_per_tok=None,
    moe_intermediate_size=1407, num_key_value_heads=None,
)  # fmt: skip
_V3: dict[str, Any] = dict(
    vocab_size=129280, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048, num_hidden_layers=61,
    num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1, n_routed_experts=256, kv_lora_rank=512,
    q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, qk_nope_head_dim=128, num_experts_per_tok=8,
    first_k_dense_replace=3, hidden_act="silu", max_position_embeddings=4096, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0,
)  # fmt: skip
GLM_MOE: dict[str, Any] = dict(
    vocab_size=151552, hidden_size=4096, intermediate_size=10944, num_hidden_layers=46, num_attention_heads=96,
    num_key_value_heads=8, hidden_act="silu", max_position_embeddings=131072, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, moe_intermediate_size=1408, num_experts_per_tok=8,
    n_shared_experts=1, n_routed_experts=128, first_k_dense_replace=1, use_qk_norm=False,
)  # fmt: skip
_MINICPM3: dict[str, Any] = dict(
    vocab_size=73448, hidden_size=2560, intermediate_size=6400, num_hidden_layers=62, num_attention_heads=40,
    num_key_value_heads=40, hidden_act="silu", max_position_embeddings=32768, tie_word_embeddings=True,
    attention_bias=False, attention_dropout=0.0, mlp_bias=False, kv_lora_rank=256, q_lora_rank=768,
    qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=None,
)  # fmt: skip
_V32: dict[str, Any] = _V3 | dict(max_position_embeddings=163840, index_n_heads=64, index_head_dim=128,
                                   index_topk=2048)  # fmt: skip
_GLM5: dict[str, Any] = _V32 | dict(
    vocab_size=154880, hidden_size=6144, intermediate_size=12288, num_hidden_layers=78, num_attention_heads=64,
    num_key_value_heads=64, q_lora_rank=2048, v_head_dim=256, qk_nope_head_dim=192, max_position_embeddings=202752,
    index_n_heads=32,
)  # fmt: skip
_GLM_LITE: dict[str, Any] = dict(
    vocab_size=154880, hidden_size=2048, intermediate_size=10240, moe_intermediate_size=1536, num_hidden_layers=47,
    num_attention_heads=20, num_key_value_heads=20, n_shared_experts=1, n_routed_experts=64, kv_lora_rank=512,
    q_lora_rank=768, qk_rope_head_dim=64, v_head_dim=256, qk_nope_head_dim=192, num_experts_per_tok=4,
    hidden_act="silu", max_position_embeddings=202752, tie_word_embeddings=False, attention_bias=False,
    attention_dropout=0.0,
)  # fmt: skip
# num_experts: DeepseekV32Config, GlmMoeDsaConfig and MistralLarge4TextConfig take it from the file's leftover keys
# and set n_routed_experts to it in __post_init__ ("BC: re-route"; derive finds the kwargs read)
V32_ALIASES = {"num_local_experts": "n_routed_experts", "num_experts": "n_routed_experts"}
FAMILIES = (
    Family("deepseek_v2", "DeepseekV2Config", "DeepseekV2ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _V2,
           _read_deepseek, {"num_experts": "n_routed_experts"}),
    Family("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM (AutoModelForCausalLM)", "deepseek-v3", _V3,
           _read_deepseek, {"num_local_experts": "n_routed_experts"}),
    Family("deepseek_v32", "DeepseekV32Config", "DeepseekV32ForCausalLM (AutoModelForCausalLM)", "deepseek-v3.2",
           _V32, _read_deepseek_v32, V32_ALIASES),
    Family("glm_moe_dsa", "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM (AutoModelForCausalLM)", "deepseek-v3.2", _GLM5,
           _read_deepseek_v32, V32_ALIASES),
    Family("minicpm3", "MiniCPM3Config", "MiniCPM3ForCausalLM (AutoModelForCausalLM)", "deepseek-v3",
           _MINICPM3, _read_minicpm3),
    Family("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM (AutoModelForCausalLM)", "deepseek-v3", GLM_MOE,
           read_glm4_moe, {"num_local_experts": "n_routed_experts"}),
    Family("glm4_moe_lite", "Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM (AutoModelForCausalLM)", "deepseek-v3",
           _GLM_LITE, _read_glm4_moe_lite,
           {"num_local_experts": "n_routed_experts", "head_dim": "qk_rope_head_dim"}),
)  # fmt: skip
