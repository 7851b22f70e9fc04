"""The names transformers gives a family's linear modules, and peft's default LoRA targets per family.

An adapter attaches to a module by name (peft's ``target_modules``), so counting what LoRA adds means knowing, for
each role of the layer model (a query projection, a fused Q/K/V, a gated FFN's up projection, the LM head), the
module path transformers builds for it. The paths below are read off the modeling files of transformers 5.x
(``modeling_llama.py``: ``model.layers.N.self_attn.q_proj``, ``mlp.gate_proj``; ``modeling_gpt2.py``:
``transformer.h.N.attn.c_attn``, a Conv1D peft treats as linear; ``modeling_bert.py``: ``encoder.layer.N.attention
.self.query``, ``intermediate.dense``; ``modeling_t5.py``: ``encoder.block.N.layer.0.SelfAttention.q``, the
decoder's ``layer.1.EncDecAttention`` and ``layer.2.DenseReluDense``, ...) and checked module by module against the
models transformers builds on the meta device (tests/analysis/finetune).

Mixture-of-experts layers in transformers 5 keep their routed experts as 3-D parameters
(``mlp.experts.gate_up_proj``: experts x 2 expert_dim x embed_dim, ``mlp.experts.down_proj``) and their router as a
parameter of a router module, not ``nn.Linear``: ``target_modules`` (``all-linear`` included) never reaches them,
peft's ``target_parameters`` does (:mod:`embedcalc.analysis.finetune.modules`).

:data:`DEFAULT_TARGETS` is peft's ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``
(``peft/utils/constants.py``, peft 0.22) for the families named here: what ``LoraConfig()`` targets when no
``target_modules`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# roles of one layer's linear modules; "ffn/in" is a plain FFN's first matrix, "ffn/gate" + "ffn/up" (or the fused
# "ffn/gate_up") a gated one's
Role = str


@dataclass(frozen=True)
class Naming:
    """Module paths of one family: per stack, the layer's path (``{i}`` its index) and each role's path in it."""

    layers: dict[str, str]  # stack -> "model.layers.{i}"
    roles: dict[str, dict[Role, str]]  # stack -> role -> path inside the layer
    fused_qkv: bool = False
    fused_gate_up: bool = False
    model: dict[Role, str] = field(default_factory=dict)  # pooler, head/lm, embedding/project_in
    experts: str = "mlp.experts"  # path of the routed experts' module (3-D parameters) inside the layer
    router: str = "mlp.gate"  # path of the router module (gpt-oss: mlp.router)


_LLAMA_ROLES = {
    "attention/q": "self_attn.q_proj",
    "attention/k": "self_attn.k_proj",
    "attention/v": "self_attn.v_proj",
    "attention/out": "self_attn.o_proj",
    # DeepSeek-V2/V3 latent attention (modeling_deepseek_v3.py)
    "attention/q_a": "self_attn.q_a_proj",
    "attention/q_b": "self_attn.q_b_proj",
    "attention/q_full": "self_attn.q_proj",
    "attention/kv_a": "self_attn.kv_a_proj_with_mqa",
    "attention/kv_b": "self_attn.kv_b_proj",
    "ffn/gate": "mlp.gate_proj",
    "ffn/up": "mlp.up_proj",
    "ffn/in": "mlp.fc1",
    "ffn/out": "mlp.down_proj",
    "moe/shared/gate": "mlp.shared_experts.gate_proj",
    "moe/shared/up": "mlp.shared_experts.up_proj",
    "moe/shared/out": "mlp.shared_experts.down_proj",
}
_GPT_OSS = Naming(
    {"decoder": "model.layers.{i}"},
    {"decoder": _LLAMA_ROLES},
    router="mlp.router",
    model={"head/lm": "lm_head", "embedding/token": "model.embed_tokens"},
)
_LLAMA = Naming(
    {"decoder": "model.layers.{i}"},
    {"decoder": _LLAMA_ROLES},
    model={"head/lm": "lm_head", "embedding/token": "model.embed_tokens"},
)
_PHI3 = Naming(
    {"decoder": "model.layers.{i}"},
    {
        "decoder": {
            "attention/qkv": "self_attn.qkv_proj",
            "attention/out": "self_attn.o_proj",
            "ffn/gate_up": "mlp.gate_up_proj",
            "ffn/out": "mlp.down_proj",
        }
    },
    fused_qkv=True,
    fused_gate_up=True,
    model={"head/lm": "lm_head", "embedding/token": "model.embed_tokens"},
)
_GPT2 = Naming(
    {"decoder": "transformer.h.{i}"},
    {
        "decoder": {
            "attention/qkv": "attn.c_attn",
            "attention/out": "attn.c_proj",
            "ffn/in": "mlp.c_fc",
            "ffn/out": "mlp.c_proj",
        }
    },
    fused_qkv=True,
    model={"head/lm": "lm_head", "embedding/token": "transformer.wte"},
)
_NEOX_ROLES = {
    "attention/qkv": "attention.query_key_value",
    "attention/out": "attention.dense",
    "ffn/in": "mlp.dense_h_to_4h",
    "ffn/out": "mlp.dense_4h_to_h",
}
_GPT_NEOX = Naming(
    {"decoder": "gpt_neox.layers.{i}"},
    {"decoder": _NEOX_ROLES},
    fused_qkv=True,
    model={"head/lm": "lm_head", "embedding/token": "gpt_neox.embed_in"},
)
_FALCON_ROLES = {
    "attention/qkv": "self_attention.query_key_value",
    "attention/out": "self_attention.dense",
    "ffn/in": "mlp.dense_h_to_4h",
    "ffn/out": "mlp.dense_4h_to_h",
}
_FALCON = Naming(
    {"decoder": "transformer.h.{i}"},
    {"decoder": _FALCON_ROLES},
    fused_qkv=True,
    model={"head/lm": "lm_head", "embedding/token": "transformer.word_embeddings"},
)
_BERT_ROLES = {
    "attention/q": "attention.self.query",
    "attention/k": "attention.self.key",
    "attention/v": "attention.self.value",
    "attention/out": "attention.output.dense",
    "ffn/in": "intermediate.dense",
    "ffn/out": "output.dense",
}
_WORDS = "embeddings.word_embeddings"
_BERT = Naming(
    {"encoder": "encoder.layer.{i}"},
    {"encoder": _BERT_ROLES},
    model={"pooler": "pooler.dense", "embedding/token": _WORDS},
)
_MPNET = Naming(
    {"encoder": "encoder.layer.{i}"},
    {
        "encoder": {
            "attention/q": "attention.attn.q",
            "attention/k": "attention.attn.k",
            "attention/v": "attention.attn.v",
            "attention/out": "attention.attn.o",
            "ffn/in": "intermediate.dense",
            "ffn/out": "output.dense",
        }
    },
    model={"pooler": "pooler.dense", "embedding/token": _WORDS},
)
_DEBERTA = Naming(
    {"encoder": "encoder.layer.{i}"},
    {
        "encoder": {
            "attention/q": "attention.self.query_proj",
            "attention/k": "attention.self.key_proj",
            "attention/v": "attention.self.value_proj",
            "attention/out": "attention.output.dense",
            "ffn/in": "intermediate.dense",
            "ffn/out": "output.dense",
        }
    },
    model={"embedding/token": _WORDS},
)
# ALBERT shares one layer across depth: one module path, no index (modeling_albert.py)
_ALBERT = Naming(
    {"encoder": "encoder.albert_layer_groups.0.albert_layers.0"},
    {
        "encoder": {
            "attention/q": "attention.query",
            "attention/k": "attention.key",
            "attention/v": "attention.value",
            "attention/out": "attention.dense",
            "ffn/in": "ffn",
            "ffn/out": "ffn_output",
        }
    },
    model={
        "pooler": "pooler",
        "embedding/project_in": "encoder.embedding_hidden_mapping_in",
        "embedding/token": _WORDS,
    },
)
_MODERNBERT = Naming(
    {"encoder": "layers.{i}"},
    {
        "encoder": {
            "attention/qkv": "attn.Wqkv",
            "attention/out": "attn.Wo",
            "ffn/gate_up": "mlp.Wi",
            "ffn/in": "mlp.Wi",
            "ffn/out": "mlp.Wo",
        }
    },
    fused_qkv=True,
    fused_gate_up=True,
    model={"embedding/token": "embeddings.tok_embeddings"},
)


def _t5_roles(cross: bool) -> dict[Role, str]:
    ffn = "layer.2" if cross else "layer.1"
    roles = {f"attention/{r}": f"layer.0.SelfAttention.{r[0]}" for r in ("q", "k", "v", "out")}
    if cross:
        roles |= {f"cross_attention/{r}": f"layer.1.EncDecAttention.{r[0]}" for r in ("q", "k", "v", "out")}
    # T5 v1.1's gated FFN: wi_0 (gate), wi_1 (up); T5's own: wi
    return roles | {
        "ffn/in": f"{ffn}.DenseReluDense.wi",
        "ffn/gate": f"{ffn}.DenseReluDense.wi_0",
        "ffn/up": f"{ffn}.DenseReluDense.wi_1",
        "ffn/out": f"{ffn}.DenseReluDense.wo",
    }


_T5 = Naming(
    {"encoder": "encoder.block.{i}", "decoder": "decoder.block.{i}"},
    {"encoder": _t5_roles(False), "decoder": _t5_roles(True)},
    model={"head/lm": "lm_head", "embedding/token": "shared"},
)


# T5Gemma (modeling_t5gemma.py): Gemma 2's layer names in model.encoder / model.decoder, the decoder's
# cross_attn.{q,k,v,o}_proj, the head T5GemmaLMHead.out_proj, a token table per stack
_T5GEMMA = Naming(
    {"encoder": "model.encoder.layers.{i}", "decoder": "model.decoder.layers.{i}"},
    {
        "encoder": _LLAMA_ROLES,
        "decoder": _LLAMA_ROLES
        | {f"cross_attention/{r}": f"cross_attn.{n}_proj" for r, n in (("q", "q"), ("k", "k"), ("v", "v"),
                                                                          ("out", "o"))},
    },
    model={"head/lm": "lm_head.out_proj", "embedding/token": "model.encoder.embed_tokens",
           "embedding/decoder_token": "model.decoder.embed_tokens"},
)  # fmt: skip


def _bart_roles(cross: bool) -> dict[Role, str]:
    names = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "out": "out_proj"}
    roles = {f"attention/{r}": f"self_attn.{n}" for r, n in names.items()}
    if cross:
        roles |= {f"cross_attention/{r}": f"encoder_attn.{n}" for r, n in names.items()}
    return roles | {"ffn/in": "fc1", "ffn/out": "fc2"}


def _seq2seq(prefix: str, head: bool) -> Naming:
    return Naming(
        {"encoder": f"{prefix}encoder.layers.{{i}}", "decoder": f"{prefix}decoder.layers.{{i}}"},
        {"encoder": _bart_roles(False), "decoder": _bart_roles(True)},
        model={"head/lm": "lm_head", "embedding/token": f"{prefix}shared"}
        if head
        else {"embedding/token": f"{prefix}shared"},
    )


NAMINGS: dict[str, Naming] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3_text",
            "deepseek_v3",
            "deepseek_v2",
            "olmo2",
            "granite",
        ),
        _LLAMA,
    ),
    "gpt_oss": _GPT_OSS,
    "phi3": _PHI3,
    "gpt2": _GPT2,
    "gpt_neox": _GPT_NEOX,
    "falcon": _FALCON,
    "bloom": _FALCON,
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "mpnet": _MPNET,
    "deberta-v2": _DEBERTA,
    "albert": _ALBERT,
    "modernbert": _MODERNBERT,
    "t5": _T5,
    "mt5": _T5,
    "t5gemma": _T5GEMMA,
    "bart": _seq2seq("model.", True),
    "marian": _seq2seq("model.", False),  # counted as MarianModel (no LM head), the presets' convention
}
"""Families whose module names are known; a config without ``family`` uses LLaMA's."""

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "t5": ("q", "v"),
    "mt5": ("q", "v"),
    "bart": ("q_proj", "v_proj"),
    "gpt2": ("c_attn",),
    "bloom": ("query_key_value",),
    "gpt_neox": ("query_key_value",),
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"),
    "llama": ("q_proj", "v_proj"),
    "falcon": ("query_key_value",),
    "mistral": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "gemma": ("q_proj", "v_proj"),
    "gemma2": ("q_proj", "v_proj"),
    "gemma3_text": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "qwen3": ("q_proj", "v_proj"),
}
"""peft's default ``target_modules`` by model_type (peft/utils/constants.py); other families name theirs."""


# peft 0.22 rewrites transformers-4 MoE target names for transformers-5 models whose experts became 3-D parameters
# (peft/utils/transformers_weight_conversion.py: _MOE_TARGET_MODULE_MAPPING, _MOE_FUSED_TARGETS; the families are
# those transformers' conversion_mapping._MODEL_TO_CONVERSION_PATTERN maps to mixtral or qwen2_moe and that have a
# checkpoint conversion): a v4 name becomes a target parameter (and stays a module target where it names only
# nn.Linear modules: adapters._convert_moe), and targeting both halves of a fused weight gives it rank 2 r.
MOE_V4_NAMES: dict[str, dict[str, str]] = {
    "mixtral": {"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
    "qwen2_moe": {
        "gate": "gate.weight",
        "gate_proj": "gate_up_proj",
        "up_proj": "gate_up_proj",
        "down_proj": "down_proj",
    },
}
MOE_FUSED: dict[str, tuple[str, ...]] = {"mixtral": ("w1", "w3"), "qwen2_moe": ("gate_proj", "up_proj")}
MOE_CONVERTED: dict[str, str] = {
    "mixtral": "mixtral",
    "qwen2_moe": "qwen2_moe",
    "qwen3_moe": "qwen2_moe",
    "deepseek_v3": "qwen2_moe",
}


def naming_for(family: str | None) -> Naming | None:
    """The module names of ``family`` (LLaMA's when None); None when the family's names are not known."""
    return _LLAMA if family is None else NAMINGS.get(family)
