"""The general reader (DESIGN §19, issue 31 item 3): transformers' own class on the meta device, placed on embedcalc's
breakdown keys, agrees exactly with the native readers where both read a family; a family without a native mapping
is counted through it (CodeGen, checked against its modeling code's shapes); without torch or
transformers the refusal says which extra brings it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import embedcalc
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError

pytestmark = [pytest.mark.torch]
pytest.importorskip("torch")
pytest.importorskip("transformers")

_SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
              max_position_embeddings=64)  # fmt: skip
# small variants of natively mapped families: dense GQA, MoE (fused experts), MoE with a shared expert and
# dense-first layers (DeepSeek-V3's MLA), GPT-2's Conv1D, BERT (encoder: AutoModel with pooler), T5 (seq2seq)
NATIVE: dict[str, dict[str, Any]] = {
    "llama": _SMALL | dict(num_key_value_heads=2),
    "mixtral": _SMALL | dict(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": _SMALL | dict(num_key_value_heads=2, head_dim=16, moe_intermediate_size=32, num_experts=8,
                               num_experts_per_tok=2),
    "deepseek_v3": _SMALL | dict(num_hidden_layers=3, first_k_dense_replace=1, num_key_value_heads=4,
                                 moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
                                 n_shared_experts=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                                 qk_nope_head_dim=16, v_head_dim=16, n_group=2, topk_group=1),
    # ERNIE-4.5 MoE: its router's correction bias is a frozen nn.Parameter the checkpoint holds, counted by both
    "ernie4_5_moe": _SMALL | dict(num_key_value_heads=2, moe_intermediate_size=32, moe_num_experts=8, moe_k=2,
                                  moe_num_shared_experts=1, moe_layer_start_index=1),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0),
    "bert": _SMALL,
    "t5": dict(d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16, vocab_size=100),
    # Marian: its sinusoidal position tables are frozen nn.Embedding weights, fixed by the config: no parameters
    "marian": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100,
                   max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0),
    "mamba": dict(hidden_size=64, num_hidden_layers=2, vocab_size=100),
    "mamba2": dict(hidden_size=64, num_hidden_layers=2, vocab_size=100, num_heads=8, head_dim=16, n_groups=1,
                   state_size=16, expand=2),
}  # fmt: skip
RUN = Workload(batch_size=2, seq_len=16, gen_tokens=4)


def _core(flops: dict[str, int]) -> dict[str, int]:
    """The native FLOPs breakdown with each attention's scores and context merged into ``attention/core``, and a
    recurrent mixer's own work (conv, dt, scan) left out: FlopCounterMode counts what transformers' reference path
    runs there (its convolution and its scan's einsums), not embedcalc's stated scan convention (DESIGN §16)."""
    out: dict[str, int] = {}
    for key, value in flops.items():
        stem, _, last = key.rpartition("/")
        if stem.endswith("mixer") and last in ("conv", "dt_proj", "ssm"):
            continue
        name = f"{stem}/core" if last in ("scores", "context") else key
        out[name] = out.get(name, 0) + value
    return out


@pytest.mark.parametrize("model_type", NATIVE)
def test_general_reader_equals_the_native_reader(model_type: str) -> None:
    from embedcalc.api.general import read_general

    raw = {"model_type": model_type, **NATIVE[model_type]}
    native = embedcalc.analyze(dict(raw), RUN)
    general = read_general(raw, run=RUN)
    assert general.params.as_dict() == native.params.as_dict()
    assert general.active_params == native.active_params
    assert general.flops is not None, general.flops_error
    placed = {k: v for k, v in general.flops.as_dict().items() if not k.endswith("mixer/core")}
    assert placed == _core(native.flops.breakdown.as_dict())
    if "mamba" not in model_type:
        assert general.flops.total == native.flops.forward
    assert general.kv_cache_bytes == native.memory.kv_cache_bytes
    assert general.recurrent_state_bytes == native.memory.recurrent_state_bytes


def test_moe_experts_are_read_off_the_module_tree() -> None:
    from embedcalc.api.general import read_general

    general = read_general({"model_type": "deepseek_v3", **NATIVE["deepseek_v3"]}, run=RUN)
    assert [(e.num_experts, e.top_k) for e in general.experts] == [
        (8, 2),
        (8, 2),
    ]  # layers 1 and 2; layer 0 dense
    assert general.active_params is not None and general.active_params < general.params.total


def test_a_family_without_a_native_mapping_is_counted_through_transformers() -> None:
    """CodeGen (transformers' CodeGenForCausalLM, no native mapping): fused bias-free qkv_proj and out_proj, biased
    fc_in / fc_out, an untied LM head with a bias; parallel attention and MLP on one ln_1."""
    from embedcalc.api.general import read_general

    d, v, layers = 64, 100, 2
    raw = {"model_type": "codegen", "n_embd": d, "n_layer": layers, "n_head": 4, "vocab_size": v,
           "n_positions": 64, "rotary_dim": 8, "bos_token_id": 0, "eos_token_id": 0}  # fmt: skip
    general = read_general(raw, run=RUN)
    assert general.params.as_dict() == {
        "embedding/token": v * d,
        "decoder/attention/norm": layers * 2 * d,
        "decoder/attention/qkv": layers * 3 * d * d,
        "decoder/attention/out": layers * d * d,
        "decoder/ffn/in": layers * (d * 4 * d + 4 * d),
        "decoder/ffn/out": layers * (4 * d * d + d),
        "decoder/final_norm": 2 * d,
        "head/lm": d * v,
        "head/lm_bias": v,
    }
    assert general.counted_by == "counted by transformers' CodeGenForCausalLM on the meta device"
    tokens = RUN.seq_len + RUN.gen_tokens
    assert general.kv_cache_bytes == layers * 2 * RUN.batch_size * tokens * d * 4  # K and V, fp32
    n = RUN.batch_size * RUN.seq_len
    assert general.flops is not None
    assert general.flops["decoder/attention/qkv"] == layers * 2 * n * d * 3 * d
    assert general.flops["decoder/attention/core"] == layers * 2 * 2 * RUN.batch_size * RUN.seq_len**2 * d
    assert general.flops["head/lm"] == 2 * n * d * v


def test_analyze_says_which_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from embedcalc.cli.app import app
    from embedcalc.sources.hf.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "codegen", raising=False)  # whatever native families exist by then
    codegen = tmp_path / "config.json"
    codegen.write_text(json.dumps({"model_type": "codegen", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                   "vocab_size": 100, "rotary_dim": 8}))  # fmt: skip
    llama = tmp_path / "llama.json"
    llama.write_text(json.dumps({"model_type": "llama", **NATIVE["llama"]}))
    runner = CliRunner()
    general = runner.invoke(app, ["analyze", str(codegen), "--seq-len", "16", "--format", "json"])
    assert general.exit_code == 0, general.output
    entry = json.loads(general.stdout)["results"][0]
    assert entry["reader"] == "transformers-meta"
    assert entry["counted_by"] == "counted by transformers' CodeGenForCausalLM on the meta device"
    native = runner.invoke(app, ["analyze", str(llama), "--seq-len", "16", "--format", "json"])
    assert json.loads(native.stdout)["results"][0]["reader"] == "native"
    table = runner.invoke(app, ["analyze", str(codegen), "--seq-len", "16", "--set", "n_layer=3"])
    assert table.exit_code == 0 and "qkv" in table.stdout and "CodeGenForCausalLM" in table.stdout
    timed = runner.invoke(app, ["analyze", str(codegen), "--hardware", "h100-sxm"])
    assert timed.exit_code == 3 and "layer model" in timed.stderr


def test_without_transformers_the_refusal_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    from embedcalc.analysis.budget import Budget
    from embedcalc.api import general
    from embedcalc.api.analyze import analyze_or_general
    from embedcalc.api.timing import TimeOptions
    from embedcalc.sources.hf.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "codegen", raising=False)
    mamba = tmp_path / "config.json"
    mamba.write_text(json.dumps({"model_type": "codegen", "n_embd": 64}))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a)
    )
    with pytest.raises(embedcalc.ConfigError) as refused:
        analyze_or_general(str(mamba), None, Workload(), TimeOptions(), Budget())
    assert refused.value.code == "hf_unsupported_family"
    assert general.EXTRA in refused.value.message
    assert "With transformers installed" in refused.value.message
    assert general.EXTRA in refused.value.problems[0].message


@pytest.mark.parametrize("nested", [True, False], ids=["qwen2_vl file", "its text_config alone"])
def test_a_multimodal_file_counts_its_text_model(nested: bool) -> None:
    """Qwen2-VL: the outer file's text model, and a ``qwen2_vl_text`` file alone (no causal-LM class of its own: built
    as the Qwen2VLForConditionalGeneration that holds it), both as the native reader counts them, LM head included;
    the vision tower is listed apart, not counted."""
    from embedcalc.api.general import read_general

    text = {
        "model_type": "qwen2_vl_text",
        **_SMALL,
        "hidden_size": 256,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    }  # fmt: skip (head_dim 128: the default M-RoPE sections fill it)
    raw = {"model_type": "qwen2_vl", "text_config": text} if nested else text
    run = Workload(seq_len=16)
    native = embedcalc.analyze(dict(raw), run)
    general = read_general(raw, run=run)
    assert general.class_name == "Qwen2VLForConditionalGeneration"
    assert general.params.as_dict() == native.params.as_dict()
    assert general.flops is not None and general.flops.total == native.flops.forward
    assert general.kv_cache_bytes == native.memory.kv_cache_bytes
    assert general.outside_params > 0


def test_check_reads_a_family_without_a_native_mapping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from embedcalc.cli.app import app
    from embedcalc.sources.hf.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "codegen", raising=False)
    codegen = tmp_path / "config.json"
    codegen.write_text(json.dumps({"model_type": "codegen", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                   "vocab_size": 100, "rotary_dim": 8}))  # fmt: skip
    result = CliRunner().invoke(app, ["check", str(codegen), "--format", "json"])
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["results"][0]
    assert entry["valid"] and entry["reader"] == "transformers-meta" and entry["params"]["total"] == 112_228


@pytest.mark.parametrize(
    "model_type",
    [
        "llama",
        *(pytest.param(t, marks=pytest.mark.slow) for t in ("qwen2", "mistral", "stablelm", "granite")),
    ],
)
def test_a_layer_model_derived_from_the_module_tree_equals_the_native_one(
    model_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its native mapping taken away, a family's file is loaded as the layer model derived from transformers'
    module tree (kept only because its counts equal transformers'), and every analytic number equals the native
    reader's: parameters, FLOPs, memory, time inputs."""
    from embedcalc.sources.hf.registry import FAMILIES

    raw = {"model_type": model_type, **_SMALL, "num_key_value_heads": 2}
    native = embedcalc.analyze(dict(raw), seq_len=16, gen_tokens=8)
    monkeypatch.delitem(FAMILIES, model_type)
    derived = embedcalc.analyze(dict(raw), seq_len=16, gen_tokens=8)
    assert derived.reader == "transformers-meta" and native.reader == "native"
    assert derived.params.as_dict() == native.params.as_dict()
    assert derived.flops.breakdown.as_dict() == native.flops.breakdown.as_dict()
    assert derived.memory.to_json() == native.memory.to_json()
    assert "layer model derived" in derived.to_json()["layer_model"]


def test_xglm_has_no_native_mapping_and_gets_a_derived_layer_model() -> None:
    """XGLM (sinusoidal positions, LayerNorm with biases, GELU FFN with biases, tied head): no native reader, its
    layer model derived and checked against transformers' own count of the same file."""
    from embedcalc.api.general import read_general

    raw = {"model_type": "xglm", "d_model": 64, "ffn_dim": 128, "num_layers": 2, "attention_heads": 4,
           "vocab_size": 100, "max_position_embeddings": 64}  # fmt: skip
    derived = embedcalc.analyze(dict(raw), seq_len=16)
    general = read_general(raw, run=Workload(seq_len=16))
    assert derived.reader == "transformers-meta"
    assert derived.params.as_dict() == general.params.as_dict()
    assert general.flops is not None and derived.flops.forward == general.flops.total


def test_analytic_commands_work_on_a_derived_layer_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from embedcalc.cli.app import app
    from embedcalc.sources.hf.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "qwen2")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen2", **_SMALL, "num_key_value_heads": 2}))
    runner = CliRunner()
    timed = runner.invoke(app, ["analyze", str(path), "--hardware", "h100-sxm", "--format", "json"])
    assert timed.exit_code == 0, timed.output
    entry = json.loads(timed.stdout)["results"][0]
    assert entry["reader"] == "transformers-meta" and "time" in entry
    swept = runner.invoke(app, ["sweep", str(path), "--seq-len", "16,32", "--format", "json"])
    assert swept.exit_code == 0, swept.output


@pytest.mark.parametrize("remote", [False, True])
def test_a_family_transformers_lacks_is_named_with_what_would_build_it(remote: bool) -> None:
    """kimi_k3 (Kimi-K3): neither mapped nor a transformers class. The refusal names the family, says whether the
    file's own remote code (``auto_map``, so trust_remote_code) is what would build it, and lists the related types
    this transformers has (kimi_k25, kimi_linear), read off its CONFIG_MAPPING_NAMES."""
    from embedcalc.api.general import read_general
    from embedcalc.errors import ConfigError

    raw: dict[str, Any] = {"model_type": "kimi_k3", **_SMALL}
    if remote:
        raw["auto_map"] = {"AutoModelForCausalLM": "modeling_kimi.KimiK3ForCausalLM"}
    with pytest.raises(ConfigError) as info:
        read_general(raw, run=RUN)
    message = info.value.message
    assert info.value.code == "hf_no_class" and "'kimi_k3'" in message and "'kimi_k25'" in message
    assert ("trust_remote_code=True" in message) is remote
    assert ("modeling_kimi.KimiK3ForCausalLM" in message) is remote


def test_t5gemma_is_counted_whole_with_its_forward_and_caches() -> None:
    """T5Gemma (T5GemmaForConditionalGeneration; read natively too, and by the general reader when its stacks differ
    in shape, tests/sources/hf/test_hf_t5gemma.py): an encoder-decoder of two sub-configs whose
    ``get_text_config()`` is its decoder half, counted as the whole seq2seq model the outer config builds. Its
    encoder builds a padding mask from the token ids and asks it ``.all()``, which a meta tensor cannot answer: the
    forward runs on FakeTensors, where transformers skips that check. Every count from modeling_t5gemma.py's
    shapes: separate encoder and decoder token tables (the head tied to the decoder's), sandwich RMSNorms, GQA
    self-attention, cross-attention over the encoder's tokens, the decoder's sliding layers caching
    ``sliding_window - 1`` tokens (transformers' sliding cache layer)."""
    from embedcalc.api.general import read_general

    d, f, h, kv, hd, v, window = 64, 128, 4, 2, 16, 100, 8
    half = dict(hidden_size=d, intermediate_size=f, num_hidden_layers=2, num_attention_heads=h,
                num_key_value_heads=kv, head_dim=hd, vocab_size=v, sliding_window=window)  # fmt: skip
    raw = {"model_type": "t5gemma", "encoder": half, "decoder": half, "vocab_size": v}
    general = read_general(raw, run=RUN)
    assert general.class_name == "T5GemmaForConditionalGeneration"
    assert general.architecture == "encoder-decoder"
    attention = d * (h + 2 * kv) * hd + h * hd * d
    encoder_layer, decoder_layer = attention + 3 * d * f + 4 * d, 2 * attention + 3 * d * f + 6 * d
    assert general.params.total == 2 * v * d + 2 * (encoder_layer + decoder_layer) + 2 * d
    # the decoder's table placed as the native reader's embedding/decoder_token
    assert general.params["embedding/token"] == general.params["embedding/decoder_token"] == v * d
    n, s, b = RUN.batch_size * RUN.seq_len, RUN.seq_len, RUN.batch_size
    core = 2 * 2 * b * h * s * s * hd  # scores and context, every query against every key (eager)
    projections = 2 * n * (d * (h + 2 * kv) * hd + h * hd * d)
    ffn = 2 * n * 3 * d * f
    encoder, decoder = projections + core + ffn, 2 * (projections + core) + ffn
    assert general.flops is not None, general.flops_error
    assert general.flops.total == 2 * (encoder + decoder) + 2 * n * d * v
    per_token = 2 * b * kv * hd * 4  # K and V, fp32
    tokens = RUN.seq_len + RUN.gen_tokens  # the encoder's tokens the cross-attention caches
    assert general.cache is not None
    assert [(c.stack, c.kv_bytes) for c in general.cache] == [
        ("self", per_token * (window - 1)), ("self", per_token * RUN.seq_len),
        ("cross", per_token * tokens), ("cross", per_token * tokens),
    ]  # fmt: skip


def test_t5gemma2_counts_its_text_encoder_decoder_and_head() -> None:
    """T5Gemma 2 (T5Gemma2ForConditionalGeneration, an image-text-to-text class): a SigLIP vision tower and its
    projector inside the encoder of an encoder-decoder. The text model is the encoder's text tower, the decoder and
    the head (the whole encoder-decoder, which the language-model rule of the decoder-only multimodal classes would
    leave out), and its forward takes decoder tokens. From modeling_t5gemma2.py's shapes: one token table for both
    stacks and the tied head, with its end-of-image row eoi_embedding (d); Gemma 3's layers (q/k RMSNorms of
    head_dim, sandwich norms); the decoder's merged attention projects its own tokens and the encoder's outputs with
    one q/k/v and attends over both."""
    from embedcalc.api.general import read_general

    d, f, h, kv, hd, v = 64, 96, 4, 2, 16, 128
    text = dict(hidden_size=d, intermediate_size=f, num_hidden_layers=2, num_attention_heads=h,
                num_key_value_heads=kv, head_dim=hd, vocab_size=v, sliding_window=8)  # fmt: skip
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)  # fmt: skip
    raw = {"model_type": "t5gemma2", "decoder": text | {"num_hidden_layers": 3},
           "encoder": {"text_config": text, "vision_config": vision, "mm_tokens_per_image": 4}}  # fmt: skip
    general = read_general(raw, run=RUN)
    assert general.architecture == "encoder-decoder"
    attention = d * (h + 2 * kv) * hd + h * hd * d
    layer = attention + 2 * hd + 3 * d * f + 4 * d
    assert general.params.total == v * d + d + (2 + 3) * layer + 2 * d
    assert general.outside_params > 0  # the vision tower and projector, apart
    n, b = RUN.batch_size * RUN.seq_len, RUN.batch_size
    s = m = RUN.seq_len  # source and target tokens of the forward
    encoder = 2 * n * attention + 2 * 2 * b * h * s * s * hd + 2 * n * 3 * d * f
    # merged: q/k/v on the target, k/v on the source, scores and context over source + target keys
    decoder = (
        2 * n * attention + 2 * n * d * 2 * kv * hd + 2 * 2 * b * h * m * (m + s) * hd + 2 * n * 3 * d * f
    )
    assert general.flops is not None, general.flops_error
    assert general.flops.total == 2 * encoder + 3 * decoder + 2 * n * d * v
    assert general.cache is not None and {c.stack for c in general.cache} == {"self", "cross"}


def test_zamba2_shared_blocks_count_once_and_run_at_every_use() -> None:
    """Zamba2 (Zamba2ForCausalLM) through the general reader (also read natively since: sources/hf/families/zamba2.py,
    tests/sources/hf/test_hf_zamba2.py): Mamba-2 layers, and at the ``hybrid`` layers a transformer block
    shared by every use (``num_mem_blocks`` 1: tied) that reads the layer's input beside the original embeddings
    (2 x hidden_size wide), with LoRA adapters of ``adapter_rank`` per use on q, k, v and the MLP's gate_up, then
    an unshared Linear(d, d) into the layer's Mamba-2 input. Counted from modeling_zamba2.py's shapes: the shared
    block's weights once (every use's adapters live in it), its FLOPs at every use with that use's adapters; each
    hybrid layer caches its own keys and values (head_dim 2d / heads), each layer its conv window and scan state."""
    from embedcalc.api.general import read_general

    d, v, h, heads, state, rank = 64, 100, 4, 8, 16, 8
    raw = dict(model_type="zamba2", hidden_size=d, num_hidden_layers=4, vocab_size=v, num_attention_heads=h,
               n_mamba_heads=heads, mamba_d_state=state, mamba_ngroups=1, chunk_size=8, adapter_rank=rank,
               use_shared_attention_adapter=True, num_mem_blocks=1, use_mem_rope=True,
               layers_block_type=["mamba", "hybrid", "mamba", "hybrid"], max_position_embeddings=64)  # fmt: skip
    general = read_general(raw, run=RUN)
    inner, wide, ffn, uses = 2 * d, 2 * d, 4 * d, 2  # mamba_expand 2; the attention reads 2d; intermediate 4d
    conv_dim = inner + 2 * state  # one group's B and C
    mamba = d * (inner + conv_dim + heads) + conv_dim * 4 + conv_dim + 3 * heads + inner + inner * d + d
    adapters = uses * (3 * (wide * rank + rank * wide) + d * rank + rank * 2 * ffn)
    shared = wide + d + 3 * wide * wide + wide * d + d * 2 * ffn + ffn * d + adapters
    assert general.params.total == v * d + 4 * mamba + shared + uses * d * d + d
    n, b, s = RUN.batch_size * RUN.seq_len, RUN.batch_size, RUN.seq_len
    use = 2 * n * wide * 3 * wide + 2 * 2 * b * h * s * s * (wide // h) + 2 * n * wide * d  # q/k/v, core, o
    use += (
        2 * n * d * 2 * ffn + 2 * n * ffn * d + 2 * n * d * d
    )  # the MLP and the Linear into the Mamba input
    use += 3 * 2 * n * 2 * wide * rank + 2 * n * rank * (d + 2 * ffn)  # this use's adapters
    layer = 2 * n * d * (inner + conv_dim + heads) + 2 * n * inner * d  # in_proj, out_proj
    assert general.flops is not None, general.flops_error
    scan = general.flops["decoder/mixer/core"]  # the conv and SSD as transformers' torch path runs them
    assert general.flops.total - scan == 4 * layer + uses * use + 2 * n * d * v
    tokens = RUN.seq_len + RUN.gen_tokens
    assert general.kv_cache_bytes == uses * 2 * b * tokens * wide * 4  # K and V of every head, fp32
    assert general.recurrent_state_bytes == 4 * b * (conv_dim * 4 + heads * (inner // heads) * state) * 4


@pytest.mark.parametrize("ordered", [False, True], ids=["lm head", "centroid-masked head"])
def test_gemma4_assistant_is_counted_whole_by_both_readers(ordered: bool) -> None:
    """Gemma 4's assistant (Gemma4AssistantForCausalLM): its config makes every text layer share keys and values
    (the target model's: no k/v projections, no key norm) and its class adds pre_projection (2 x
    backbone_hidden_size -> hidden_size), post_projection and, with use_ordered_embeddings, the centroids of its
    masked head. The native reader (sources/hf/families/gemma4_assistant.py) and the general reader, which builds
    the outer class, count the same, every count from modeling_gemma4_assistant.py's shapes. The general reader's
    forward needs the target's hidden states and keys and values, which a token-id forward does not have: no FLOPs
    there, said why (the native count's FLOPs: tests/sources/hf/test_hf_gemma4_assistant.py)."""
    from embedcalc.analysis.params import count_params
    from embedcalc.api.general import read_general

    d, f, v, h, hd, full_hd, backbone, centroids = 64, 128, 128, 4, 16, 32, 96, 8
    text = dict(model_type="gemma4_text", hidden_size=d, intermediate_size=f, num_hidden_layers=4,
                num_attention_heads=h, num_key_value_heads=2, head_dim=hd, global_head_dim=full_hd, vocab_size=v,
                hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, sliding_window=8)  # fmt: skip
    raw = dict(model_type="gemma4_assistant", text_config=text, backbone_hidden_size=backbone,
               use_ordered_embeddings=ordered, num_centroids=centroids, centroid_intermediate_top_k=2)  # fmt: skip
    native = embedcalc.load(dict(raw)).config
    general = read_general(raw, run=RUN)
    assert general.class_name == "Gemma4AssistantForCausalLM"
    sliding, full = 3, 1  # Gemma4TextConfig: five sliding to one full, the last layer full
    queries = sliding * (d * h * hd + h * hd * d + hd) + full * (d * h * full_hd + h * full_hd * d + full_hd)
    layers = queries + 4 * (3 * d * f + 4 * d)  # q, o, q_norm; the MLP; four norms per layer
    projections = 2 * backbone * d + d * backbone + (d * centroids if ordered else 0)
    assert general.params.total == v * d + layers + d + projections  # the head tied to the token table
    assert count_params(native).total == general.params.total
    assert general.flops is None and "shared_kv_states" in (general.flops_error or "")


def test_a_config_with_per_layer_attributes_is_counted() -> None:
    """EmbeddingGemma 2's text model: transformers' heterogeneous config (``per_layer_config``: its full layer's own
    head_dim and key/value heads) raises on reading a per-layer attribute globally; the general reader's attributes
    for a derived layer model are then absent, and the count is transformers' own, FLOPs and all."""
    import torch
    from transformers import AutoConfig, AutoModel

    from embedcalc.api.general import read_general

    keys = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=100)  # fmt: skip
    raw = AutoConfig.for_model("embedding_gemma2_text", **keys).to_dict()
    general = read_general(raw, run=RUN)
    with torch.device("meta"):
        model = AutoModel.from_config(AutoConfig.for_model("embedding_gemma2_text", **keys))
    assert general.params.total == sum(p.numel() for p in model.parameters())
    assert general.flops is not None, general.flops_error


def test_a_flat_multimodal_file_is_refused_not_counted_as_the_default_text_model(
    cli: Any, tmp_path: Path
) -> None:
    """A LLaVA file with its text model's keys at the top level (as a trimmed Step-3.7-Flash config.json has them):
    LlavaConfig keeps them as plain attributes and builds its default LLaMA, 32 layers; counting that would be a
    miscount of the file, so it is refused naming the keys and the fix."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llava", "num_hidden_layers": 3}), encoding="utf-8")
    result = cli("check", str(path))
    assert result.exit_code == 3
    message = " ".join(result.stderr.split())
    assert "num_hidden_layers = 3 (built: 32)" in message and 'Move them under "text_config"' in message


def test_a_derived_layer_model_is_checked_past_a_window_the_short_forward_cannot_see(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A window of 64 tokens on every layer (Qwen2 without its native reader): an 8-token forward caches the same
    8 tokens either way, so the windowless derived layer model agreed there and was kept — and at 256 tokens
    reported 135,168 B of KV cache against transformers' 32,256. The second check at the config's maximum length
    refuses the derivation; the file is counted by transformers alone, its KV cache as transformers keeps it."""
    from typer.testing import CliRunner

    from embedcalc.cli.app import app
    from embedcalc.sources.hf.registry import FAMILIES

    monkeypatch.delitem(FAMILIES, "qwen2")
    raw = {"model_type": "qwen2", **_SMALL, "num_key_value_heads": 2, "max_position_embeddings": 256,
           "sliding_window": 64, "use_sliding_window": True, "max_window_layers": 0}  # fmt: skip
    with pytest.raises(ConfigError):
        embedcalc.analyze(dict(raw), seq_len=256)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    result = CliRunner().invoke(app, ["analyze", str(path), "--seq-len", "256", "--gen-tokens", "1", "--format",
                                      "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    entry = json.loads(result.stdout)["results"][0]
    assert entry["reader"] == "transformers-meta" and "layer_model" not in entry
    assert entry["memory"]["kv_cache_bytes"] == 32_256
    raw.pop("sliding_window"), raw.pop("use_sliding_window"), raw.pop("max_window_layers")
    kept = embedcalc.analyze(dict(raw), seq_len=256)
    assert "at 8 tokens and at 256" in kept.to_json()["layer_model"]


def test_a_derived_layer_model_of_a_handed_over_file_says_why_not_no_native_mapping() -> None:
    """A file a native reader hands over (``hf_refused_family``) and whose layer model is then derived: the note
    gives the key and why the native reader did not read it, not "no native mapping" (its family has one)."""
    from embedcalc.api.derived import derived_load
    from embedcalc.errors import Problem

    raw = {"model_type": "qwen2", **_SMALL, "num_key_value_heads": 2}
    advice = "model_type 'qwen2': refused rather than miscounted. Describe the model in embedcalc's own YAML"
    refusal = ConfigError(advice, [Problem("odd_key", advice, "hf_refused_family", reason="odd_key = 3 is unmapped")],
                          "hf_refused_family")  # fmt: skip
    note = derived_load(refusal, "config.json", "config.json", raw, None).notes[-1]
    assert note.startswith("not read natively: odd_key = 3 is unmapped: embedcalc's layer model derived")
    assert "no native mapping" not in note and "YAML" not in note


def test_a_handed_over_file_is_noted_with_why_not_the_refusals_advice() -> None:
    """The general reader's note for a file a native reader handed over (``hf_refused_family``) names the key and why
    (the problem's reason), not the refusal's advice to describe the model in YAML, and the class that counted it.
    (Gemma 4's assistant, which checked this before, is now read natively.)"""
    from embedcalc.api.general import read_general, with_refusal_note
    from embedcalc.errors import Problem

    raw = {"model_type": "qwen2", **_SMALL, "num_key_value_heads": 2}
    advice = "model_type 'qwen2': refused rather than miscounted. Describe the model in embedcalc's own YAML"
    refusal = ConfigError(advice, [Problem("odd_key", advice, "hf_refused_family", reason="odd_key = 3 is unmapped")],
                          "hf_refused_family")  # fmt: skip
    note = with_refusal_note(read_general(raw, run=RUN), refusal).notes[-1]
    assert note.startswith(
        "not read natively: odd_key = 3 is unmapped; counted instead by the general reader"
    )
    assert "refused" not in note and "YAML" not in note
    assert note.endswith("Qwen2ForCausalLM (AutoModelForCausalLM) on the meta device")


def test_an_image_to_text_encoder_decoder_without_a_text_encoder_counts_its_decoder() -> None:
    """Pix2Struct: an encoder-decoder whose encoder is a vision tower alone. Its text model is the decoder with
    its head (inside ``decoder``), as a decoder-only multimodal class's is — not a refusal for want of the text
    encoder T5Gemma 2 has. The forward needs image patches, so FLOPs and cache are not counted."""
    import torch
    import transformers

    from embedcalc.api.general import read_general

    config = transformers.Pix2StructConfig(
        text_config=dict(vocab_size=100, hidden_size=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4),
        vision_config=dict(hidden_size=32, patch_embed_hidden_size=48, d_ff=64, d_kv=8, num_hidden_layers=2,
                           num_attention_heads=4),
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.Pix2StructForConditionalGeneration(config)
    decoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith("decoder."))
    count = read_general(json.loads(config.to_json_string()), run=RUN)
    assert count.params.total == decoder
    assert count.architecture == "decoder" and count.flops is None


def test_rwkv_channel_mixing_is_the_ffn_not_attention() -> None:
    """RWKV's feed_forward (RwkvFeedForward) names its two matmuls ``key`` (d -> f) and ``value`` (f -> d), as its
    time mixing (RwkvSelfAttention) names attention's: under an FFN block they are ``ffn/in`` and ``ffn/out``."""
    from embedcalc.api.general import read_general

    d, a, f, layers = 64, 64, 128, 2
    raw = {"model_type": "rwkv", "hidden_size": d, "attention_hidden_size": a, "intermediate_size": f,
           "num_hidden_layers": layers, "vocab_size": 100, "context_length": 64}  # fmt: skip
    params = read_general(raw, run=Workload(seq_len=8)).params
    assert params["decoder/ffn/in"] == layers * d * f
    assert params["decoder/ffn/out"] == layers * f * d
    assert params["decoder/attention/qkv"] == layers * 2 * d * a  # key and value; receptance is its own
