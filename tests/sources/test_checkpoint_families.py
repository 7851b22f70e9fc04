"""``verify DIR --checkpoint`` on the families whose module names differ from LLaMA's (issue 23, item 5): Apertus
(xIELU's learned scalars, attention_layernorm / feedforward_layernorm), BLOOM (word_embeddings_layernorm), Falcon's
new decoder (ln_attn / ln_mlp), GPT-J and Phi-2 (a biased lm_head), Pythia (GPT-NeoX: embed_in, a parallel block's
post_attention_layernorm), SantaCoder (GPTBigCode's MQA c_attn), ModernBERT (Wqkv / Wi / Wo, the embeddings' norm as
layer 0's), MPNet (attn.q/k/v/o, the shared relative_attention_bias), XLM-RoBERTa, and the encoder-decoders BART and
Marian (opus-mt: one table ``shared``, cross-attention ``encoder_attn``, the tied head); T5 and T5 v1.1 (gated,
untied), DeepSeek-V3.2 (its lightning indexer's wq_b / wk / k_norm / weights_proj).

Each is the published file with its sizes shrunk (tests/sources/hf/test_hf_families.py's SMALL, 2 layers) built by
the counting rule's class and written by ``save_pretrained``: every tensor is placed, its fused QKV checked by shape,
and the stored count equals the analytic one and transformers' trainable numel. A fused QKV, a GPT-2 Conv1D, a T5 or
an indexer tensor stored transposed (the same elements, so every total agrees) exits 3 naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hf_reference import mapped_config, quiet_transformers, raw_fixture, trainable
from sources.hf.test_hf_decoder_families import _small as decoder_small
from sources.hf.test_hf_families import SMALL
from sources.hf.test_hf_sparse import _small as sparse_small
from sources.test_checkpoint_shapes import _verify, placed

pytestmark = pytest.mark.torch

BUFFER = "a buffer, not a parameter"
# family -> hub file in tests/fixtures/hf
FAMILIES = {"apertus": "apertus-8b-2509", "bloom": "bloom-7b1", "falcon-40b": "falcon-40b", "gpt-j": "gpt-j-6b",
            "phi-2": "phi-2", "pythia": "pythia-1.4b", "santacoder": "santacoder", "modernbert": "modernbert-base",
            "mpnet": "mpnet-base", "xlm-roberta": "xlm-roberta-base", "bart": "bart-large",
            "opus-mt": "opus-mt-en-de"}  # fmt: skip
# two more for the fused-QKV shape rules: GPT-2's Conv1D c_attn, Phi-3's qkv_proj with grouped KV heads
_GPT2 = dict(n_embd=64, n_head=4, n_layer=2, n_positions=64, vocab_size=101)
_PHI3 = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=101, pad_token_id=0)  # fmt: skip


@pytest.fixture(scope="module")
def transformers() -> Any:
    return quiet_transformers()


# T5 (t5-small: ReLU wi / wo, tied head) and T5 v1.1 (gated wi_0 / wi_1, untied head), 2 layers per stack
T5 = {"t5": "t5-small", "t5-v1_1": "t5-v1_1-small"}


def _raw(family: str) -> dict[str, Any]:
    if (
        family == "deepseek-v3.2"
    ):  # 4 layers, the first dense, a lightning indexer in each (DeepseekV32Indexer)
        return sparse_small("deepseek-v3.2")
    if family in T5:
        return raw_fixture(T5[family]) | {"num_layers": 2, "num_decoder_layers": 2}
    if family in ("gpt2", "phi-3"):
        return raw_fixture("gpt2") | _GPT2 if family == "gpt2" else raw_fixture("phi-3-mini-4k") | _PHI3
    stem = FAMILIES[family]
    small = decoder_small(raw_fixture(stem)) if family == "apertus" else raw_fixture(stem) | SMALL[stem]
    # 2 layers (the families spelling it n_layer have 2 in SMALL already)
    return small | ({"num_hidden_layers": 2} if "num_hidden_layers" in small else {})


def _save(transformers: Any, family: str, directory: Path) -> Any:
    """The small ``family`` model built as the counting rule says (AutoModel for an encoder, the seq2seq or
    causal LM otherwise) and saved to ``directory``; returns it."""
    import torch

    raw = _raw(family)
    auto = {"encoder": transformers.AutoModel, "decoder": transformers.AutoModelForCausalLM,
            "encoder-decoder": transformers.AutoModelForSeq2SeqLM}[mapped_config(raw).architecture]  # fmt: skip
    torch.manual_seed(0)
    model = auto.from_config(transformers.CONFIG_MAPPING[raw["model_type"]].from_dict(raw))
    model.save_pretrained(directory)
    return model


@pytest.mark.parametrize("family", [*sorted(FAMILIES), "deepseek-v3.2"])
def test_every_tensor_of_the_family_is_placed(
    transformers: Any, cli: Any, tmp_path: Path, family: str
) -> None:
    from safetensors import safe_open

    model = _save(transformers, family, tmp_path)
    check = placed(cli, tmp_path, trainable(model))
    # nothing left over but buffers (xIELU's beta / eps, BART's final_logits_bias)
    buffers = {n for n, _ in model.named_buffers()}
    assert all(e["reason"] == BUFFER and e["tensor"] in buffers for e in check["extra"]), check["extra"]
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
    assert check["stored_tensors"] == len(names - buffers)


# (family, tensor, its stored shape): GPT-NeoX's query_key_value (3 H hd, d), GPTBigCode's MQA c_attn
# (d + 2 hd, d), ModernBERT's Wqkv (3 d, d), GPT-2's Conv1D c_attn (d, 3 d), c_fc (d, 4 d) and mlp.c_proj (4 d, d)
# (its attn.c_proj is square), Phi-3's qkv_proj (H hd + 2 G hd, d), T5's wi (d_ff, d) and relative_attention_bias
# (buckets, H), DeepSeek-V3.2's indexer wq_b (H_I D_I, q_lora_rank) and weights_proj (H_I, d)
FUSED = [
    ("pythia", "gpt_neox.layers.1.attention.query_key_value.weight", [192, 64]),
    ("santacoder", "transformer.h.0.attn.c_attn.weight", [96, 64]),
    ("modernbert", "layers.0.attn.Wqkv.weight", [192, 64]),
    ("gpt2", "transformer.h.1.attn.c_attn.weight", [64, 192]),
    ("phi-3", "model.layers.0.self_attn.qkv_proj.weight", [128, 64]),
    ("gpt2", "transformer.h.0.mlp.c_fc.weight", [64, 256]),
    ("gpt2", "transformer.h.1.mlp.c_proj.weight", [256, 64]),
    ("t5", "decoder.block.1.layer.2.DenseReluDense.wi.weight", [2048, 512]),
    ("deepseek-v3.2", "model.layers.2.self_attn.indexer.wq_b.weight", [32, 24]),
    ("deepseek-v3.2", "model.layers.0.self_attn.indexer.weights_proj.weight", [2, 64]),
    ("t5", "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", [32, 8]),
]


@pytest.mark.parametrize(("family", "tensor", "shape"), FUSED)
def test_a_transposed_tensor_exits_3_naming_it(
    transformers: Any, cli: Any, tmp_path: Path, family: str, tensor: str, shape: list[int]
) -> None:
    from safetensors.torch import load_file, save_file

    _save(transformers, family, tmp_path)
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 0 and check["shape_errors"] == [], stderr
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    assert list(tensors[tensor].shape) == shape
    tensors[tensor] = tensors[tensor].t().contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    code, check, stderr = _verify(cli, tmp_path)
    assert code == 3 and check["missing"] == []
    assert all(c["stored_params"] == c["analytic_params"] for c in check["components"])
    assert [e["tensor"] for e in check["shape_errors"]] == [tensor]
    said = " ".join(stderr.split())  # the console wraps long lines
    assert f"{tensor} has shape {shape[::-1]}: the config gives {shape}" in said


def test_checkpoints_of_other_classes_name_what_differs(transformers: Any, cli: Any, tmp_path: Path) -> None:
    """MarianModel saves its fixed sinusoidal tables (requires_grad False): extra, and the rest agrees;
    XLMRobertaForMaskedLM has a masked-LM head (extra) and no pooler, which AutoModel, the counting rule, has:
    exit 3 naming the pooler alone."""
    raw = raw_fixture("opus-mt-en-de") | SMALL["opus-mt-en-de"]
    transformers.MarianModel(transformers.MarianConfig.from_dict(raw)).save_pretrained(tmp_path / "marian")
    code, check, stderr = _verify(cli, tmp_path / "marian")
    assert code == 0, stderr
    assert sorted(e["tensor"] for e in check["extra"]) == [
        "decoder.embed_positions.weight",
        "encoder.embed_positions.weight",
    ]
    raw = raw_fixture("xlm-roberta-base") | SMALL["xlm-roberta-base"]
    model = transformers.XLMRobertaForMaskedLM(transformers.XLMRobertaConfig.from_dict(raw))
    model.save_pretrained(tmp_path / "mlm")
    code, check, stderr = _verify(cli, tmp_path / "mlm")
    assert code == 3 and check["missing"] == ["pooler"] and check["shape_errors"] == []
    assert {e["tensor"].split(".")[0] for e in check["extra"]} == {"lm_head"}
    assert "pooler: the config has it, the checkpoint holds no tensor of it" in " ".join(stderr.split())


@pytest.mark.parametrize("family", sorted(T5))
def test_every_t5_tensor_is_placed_and_shaped(
    transformers: Any, cli: Any, tmp_path: Path, family: str
) -> None:
    """T5's blocks (``layer.0`` self-attention, the decoder's ``layer.1`` EncDecAttention, the last the FFN, each
    with its ``layer_norm``), the relative_attention_bias of layer 0 of each stack, the one ``shared`` table.
    transformers 5.24's T5Config forces ``tie_word_embeddings`` True (configuration_t5.py; the saved false is
    read as ``scale_decoder_outputs``), so its T5 v1.1 writes no ``lm_head.weight``; the published v1.1
    checkpoints store one, and embedcalc counts the head untied: the test stores it as they do."""
    from safetensors.torch import load_file, save_file

    model = _save(transformers, family, tmp_path)
    numel = trainable(model)
    path = tmp_path / "model.safetensors"
    if family == "t5-v1_1":
        code, check, stderr = _verify(cli, tmp_path)
        assert code == 3 and check["missing"] == ["head/lm"], stderr
        tensors = load_file(path)
        tensors["lm_head.weight"] = tensors["shared.weight"].clone()
        save_file(tensors, path, metadata={"format": "pt"})
        numel += tensors["lm_head.weight"].numel()
    check = placed(cli, tmp_path, numel)
    assert check["extra"] == [] and check["stored_tensors"] == len(load_file(path))
    stored = {c["key"]: c["tensors"] for c in check["components"]}
    # 2 layers: encoder 2 x (q, k, v) and decoder 2 x (q, k, v) + 2 x cross (q, k, v); one bias per stack
    assert (stored["encoder/attention/qkv"], stored["decoder/cross_attention/qkv"]) == (6, 6)
    assert stored["encoder/attention/relative_bias"] == stored["decoder/attention/relative_bias"] == 1
    assert stored["decoder/ffn/in"] == (4 if family == "t5-v1_1" else 2)
