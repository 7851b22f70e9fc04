"""``verify DIR --checkpoint`` on the families issue 31 reads natively: a tiny model of each, built on the CPU from its
transformers configuration class and written by ``save_pretrained`` (safetensors, under the checkpoint's own tensor
names where transformers converts them: GTE's ``attn_ln`` / ``mlp_ln`` / ``mlp.up_gate_proj``, Jina-v3's
``emb_ln`` / ``norm1`` / ``norm2``, XLM-RoBERTa-XL's ``layer.N.LayerNorm`` and ``encoder.LayerNorm``, Laguna's and
Nomic BERT's original layouts, which verify loads through transformers' conversion mapping), places every tensor
under its component with the shape the config gives it, and holds exactly what ``analyze`` counts. Qwen3.5's
unfused gated-DeltaNet projections, Gemma 3n's AltUp and LAuReL tensors included.
Nemotron-H's latent MoE (``fc1_latent_proj`` / ``fc2_latent_proj``) and Kimi Linear's KDA layers (``self_attn``'s
``q_conv1d`` / ``k_conv1d`` / ``v_conv1d``, ``f_a_proj`` ..., ``A_log`` of shape (1, 1, H, 1)) included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hf_reference import quiet_transformers

pytestmark = pytest.mark.torch

_ENC = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96)
_QWEN3_5 = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                linear_value_head_dim=16, max_position_embeddings=512)  # fmt: skip
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mamba": ("AutoModelForCausalLM", dict(hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=8)),
    "falcon_mamba": ("AutoModelForCausalLM", dict(hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=8,
                                                  tie_word_embeddings=False)),
    "mamba2": ("AutoModelForCausalLM", dict(hidden_size=64, num_hidden_layers=2, vocab_size=256, state_size=8,
                                            num_heads=8, head_dim=16, n_groups=2, chunk_size=8)),
    "bamba": ("AutoModelForCausalLM", dict(hidden_size=64, num_hidden_layers=4, vocab_size=256, intermediate_size=96,
                                           num_attention_heads=4, num_key_value_heads=2, mamba_n_heads=8,
                                           mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8,
                                           attn_layer_indices=[1])),
    "nemotron_h": ("AutoModelForCausalLM", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                                head_dim=16, intermediate_size=48, mamba_num_heads=4, mamba_head_dim=16,
                                                ssm_state_size=8, n_groups=2, chunk_size=8, vocab_size=256,
                                                layers_block_type=["mamba", "moe", "attention", "mlp"],
                                                n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                                moe_shared_expert_intermediate_size=24, moe_latent_size=24)),
    # Kimi Linear: the KDA layers' tensors under self_attn by the checkpoint's own names (q/k/v_conv1d, f_a_proj, ...)
    "kimi_linear": ("AutoModelForCausalLM", dict(hidden_size=64, num_hidden_layers=5, num_key_value_heads=4,
                                                 vocab_size=256, intermediate_size=96, moe_intermediate_size=16,
                                                 num_attention_heads=4, kv_lora_rank=16, qk_rope_head_dim=8,
                                                 qk_nope_head_dim=16, v_head_dim=16, linear_head_dim=16,
                                                 linear_num_heads=4, num_experts=4, num_experts_per_token=2,
                                                 pad_token_id=0, bos_token_id=1, eos_token_id=2)),
    # MiniMax-M3: the block indexer's self_attn.indexer.q_proj / k_proj / q_norm / k_norm
    "minimax_m3_vl_text": ("AutoModelForCausalLM", dict(
        vocab_size=256, hidden_size=64, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, dense_intermediate_size=96,
        shared_intermediate_size=24, rotary_dim=8, index_n_heads=2, index_head_dim=16, index_block_size=4,
        index_topk_blocks=2, bos_token_id=1, eos_token_id=2, mlp_layer_types=["dense", "sparse", "sparse"],
        layer_types=["full_attention", "minimax_m3_sparse", "minimax_m3_sparse"])),
    "umt5": ("AutoModelForSeq2SeqLM", dict(vocab_size=256, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4,
                                           relative_attention_num_buckets=8)),
    "gte": ("AutoModel", _ENC | dict(max_position_embeddings=64)),
    "jina_embeddings_v3": ("AutoModel", _ENC | dict(max_position_embeddings=66)),
    "xlm-roberta-xl": ("AutoModel", _ENC | dict(max_position_embeddings=66)),
    "eurobert": ("AutoModel", _ENC | dict(max_position_embeddings=64, pad_token_id=0)),
    # Qwen3.5's gated DeltaNet layers: linear_attn.in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, unfused
    "qwen3_5_text": ("AutoModelForCausalLM", _QWEN3_5 | dict(intermediate_size=96)),
    "qwen3_5_moe_text": ("AutoModelForCausalLM", _QWEN3_5 | dict(moe_intermediate_size=16, num_experts=4,
                                                                 num_experts_per_tok=2,
                                                                 shared_expert_intermediate_size=24)),
    # Laguna: the router's e_score_correction_bias a Parameter (stored as mlp.experts.e_score_correction_bias),
    # per-layer query heads, the per-head gate g_proj
    "laguna": ("AutoModelForCausalLM", dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                                            num_experts_per_tok=2, moe_intermediate_size=32,
                                            shared_expert_intermediate_size=24, sliding_window=8,
                                            num_attention_heads_per_layer=[4, 8, 2, 8])),
    # Gemma 3n: AltUp (altup_projections, altup.modality_router / prediction_coefs / correction_coefs, ...) and
    # LAuReL (laurel.linear_left / linear_right / post_laurel_norm)
    "gemma3n_text": ("AutoModelForCausalLM", dict(vocab_size=256, hidden_size=64, intermediate_size=[96, 96, 128, 96],
                                                  num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                                  head_dim=16, sliding_window=8, hidden_size_per_layer_input=8,
                                                  layer_types=["sliding_attention", "full_attention"] * 2,
                                                  vocab_size_per_layer_input=200, num_kv_shared_layers=2,
                                                  altup_num_inputs=3, laurel_rank=4, max_position_embeddings=64,
                                                  activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0])),
    # Nomic BERT: stored as encoder.layers.N.attn.Wqkv / mlp.fc11 / fc12 / norm2, loaded as transformers' names
    "nomic_bert": ("AutoModel", _ENC | dict(max_position_embeddings=64)),
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_every_tensor_is_placed_and_holds_the_analytic_count(
    cli: Any, tmp_path: Path, model_type: str
) -> None:
    import torch

    transformers = quiet_transformers()
    auto, keys = CASES[model_type]
    torch.manual_seed(0)
    model = getattr(transformers, auto).from_config(transformers.CONFIG_MAPPING[model_type](**keys))
    model.save_pretrained(tmp_path / model_type)
    result = cli("verify", str(tmp_path / model_type), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] and check["missing"] == [] and check["shape_errors"] == []
    # a buffer stored under another name says so: "a buffer, not a parameter (stored as ...)"
    assert all(e["reason"].startswith("a buffer, not a parameter") for e in check["extra"]), check["extra"]
    assert check["stored_params"] == check["analytic_params"] == sum(p.numel() for p in model.parameters())
