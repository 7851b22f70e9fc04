"""Encoders of today's embedding and retrieval models, counted as transformers' ``AutoModel`` (the backbone):
XLM-RoBERTa-XL, Jina-Embeddings-v3, GTE (mGTE), EuroBERT (transformers' ``modeling_xlm_roberta_xl.py``,
``modeling_jina_embeddings_v3.py``, ``modeling_gte.py``, ``modeling_eurobert.py``).

- ``xlm-roberta-xl`` (XLMRobertaXLModel, with pooler; Goyal et al. 2021, arXiv:2105.00572): RoBERTa's embeddings
  (word, token type, a learned position table numbered from ``pad_token_id`` + 1) **without** their LayerNorm, then
  pre-norm blocks (``self_attn_layer_norm`` before the attention, ``LayerNorm`` before the MLP) and a final
  ``encoder.LayerNorm``; biased q/k/v/o and a plain GELU MLP, as BERT's.
- ``jina_embeddings_v3`` (JinaEmbeddingsV3Model, with pooler; Sturua et al. 2024, arXiv:2409.10173): XLM-RoBERTa's
  post-norm blocks with rotary positions (no position table; positions count from 0, so ``max_seq_len`` is
  ``max_position_embeddings``), the embeddings' LayerNorm and token-type table, biased q/k/v/o, a plain MLP
  (``fc1``/``fc2``, biased). transformers' class is the backbone alone: the checkpoint's task LoRA adapters
  (remote code) are not part of it.
- ``gte`` (GteModel, no pooler: ``add_pooling_layer`` defaults to False; Zhang et al. 2024, mGTE,
  arXiv:2407.19669): Jina v3's rotary post-norm blocks with a gated MLP (``act(gate_proj(x)) * up_proj(x)``, gate
  and up unbiased, ``down_proj`` biased: the layer model's ``ffn_bias: false``, ``ffn_out_bias: true``); no
  token-type table when ``type_vocab_size`` is 0.
- ``eurobert`` (EuroBertModel, no pooler, no head; Boizard et al. 2025, arXiv:2503.05500): LLaMA's blocks
  (pre-norm RMSNorm, GQA with ``head_dim``, SwiGLU, RoPE, ``attention_bias`` / ``mlp_bias``) attending both ways,
  and a final RMSNorm.
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.bert import read_bert_like, read_roberta
from embedcalc.sources.hf.families.hybrid import replace_mapped
from embedcalc.sources.hf.mappings import map_activation
from embedcalc.sources.hf.reader import Family, KeyReader

_NO_HEAD = "AutoModel builds the backbone, which has no LM head to tie"


def _read_xlm_roberta_xl(r: KeyReader) -> None:
    read_roberta(r)
    note = (
        "XLMRobertaXLLayer: self_attn_layer_norm and LayerNorm before each sublayer; encoder.LayerNorm last"
    )
    replace_mapped(r, "norm_placement", "pre", "model_type", "family", note)
    replace_mapped(
        r, "embedding_norm", False, "model_type", "family", "XLMRobertaXLEmbeddings has no LayerNorm"
    )


def _read_rotary_bert(r: KeyReader) -> None:
    """BERT's post-norm encoder with rotary positions from 0 (Jina v3, GTE): no position table; ``head_dim`` when
    the file writes it (the attention reads ``getattr(config, "head_dim", hidden_size // heads)``)."""
    read_bert_like(r, positions=False)
    replace_mapped(r, "position", "rope", "model_type", "family", "a rotary embedding: no table")
    r.copy("max_position_embeddings", "max_seq_len", note="RoPE has no table; positions count from 0")
    if r.has("head_dim"):
        r.copy("head_dim", "head_dim")
    r.ignore("rope_parameters", hf_keys.ROPE)


def _read_gte(r: KeyReader) -> None:
    """GteModel: a rotary BERT whose MLP is gated (act(gate) * up) with gate and up unbiased, down_proj biased."""
    _read_rotary_bert(r)
    map_activation(r, "hidden_act", gated=True)  # GteMLP: act_fn(gate_proj(x)) * up_proj(x)
    r.mapped = list({m.field: m for m in r.mapped}.values())  # the gated mapping replaces read_bert_like's
    r.fixed("ffn_bias", False, "GteMLP: gate_proj and up_proj without bias")
    r.fixed("ffn_out_bias", True, "GteMLP: down_proj with a bias")
    replace_mapped(
        r, "pooler", False, "model_type", "family", "GteModel: add_pooling_layer defaults to False"
    )


def _read_eurobert(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    replace_mapped(r, "architecture", "encoder", "model_type", "family", "EuroBertAttention: is_causal False")
    replace_mapped(r, "lm_head", False, "model_type", "family", "EuroBertModel (AutoModel) has no LM head")
    r.fixed("pooler", False, "EuroBertModel has no pooler")
    r.ignored = [i for i in r.ignored if i.key != "tie_word_embeddings"]
    r.mapped = [m for m in r.mapped if m.field != "tie_embeddings"]
    r.data.pop("tie_embeddings", None)
    r.ignore("tie_word_embeddings", _NO_HEAD)
    r.ignore("mask_token_id", hf_keys.TOKEN_ID)
    r.ignore("classifier_pooling", "how a sequence-classification head pools; the backbone has none")
    r.ignore("pretraining_tp", "a tensor-parallel split of the original training; the same matmuls")


_EUROBERT: dict[str, Any] = dict(
    vocab_size=128256, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=8192, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, mlp_bias=False, head_dim=None,
)  # fmt: skip
FAMILIES = (
    Family("xlm-roberta-xl", "XLMRobertaXLConfig", "XLMRobertaXLModel (AutoModel, with pooler)", "bert-base",
           dict(vocab_size=250880, hidden_size=2560, num_hidden_layers=36, num_attention_heads=32,
                intermediate_size=10240, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=514,
                type_vocab_size=1, pad_token_id=1), _read_xlm_roberta_xl),
    Family("jina_embeddings_v3", "JinaEmbeddingsV3Config", "JinaEmbeddingsV3Model (AutoModel, with pooler)",
           "bert-base",
           dict(vocab_size=250002, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                intermediate_size=4096, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=8194,
                type_vocab_size=1, pad_token_id=1), _read_rotary_bert),
    Family("gte", "GteConfig", "GteModel (AutoModel, no pooler)", "bert-base",
           dict(vocab_size=250048, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=8192,
                type_vocab_size=1, pad_token_id=1), _read_gte),
    Family("eurobert", "EuroBertConfig", "EuroBertModel (AutoModel, no pooler)", "bert-base", _EUROBERT,
           _read_eurobert),
)  # fmt: skip
