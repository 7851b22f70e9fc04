"""T5Gemma (issue 31): Gemma 2 layers in an encoder and a decoder, each stack with its own token table, read natively
(``decoder_token_table``, the decoder's sliding layers as ``decoder_layout``) and checked against transformers'
T5GemmaForConditionalGeneration and embedcalc's own torch model.

The files are what T5GemmaConfig writes (``to_dict()``): tests/fixtures/hf/t5gemma-2b-2b.v5.json (transformers'
defaults, the Gemma 2 2B shape per stack) and small variants whose stacks differ in depth, window and sliding
pattern, tied and untied. Parameters equal transformers' total and per component (its module names placed on
embedcalc's keys here, independently of ``verify --checkpoint``); forward FLOPs equal ``FlopCounterMode`` on
transformers' eager path (built on the CPU: on the meta device its bidirectional mask asks a tensor for a value);
the KV cache equals the one transformers' forward leaves (cross-attention: every source token of every decoder
layer; self-attention: the global layers every target token, the sliding layers their window, where transformers'
dynamic cache keeps window - 1 after a prefill, the slot the next token takes). An unbalanced file (the 9B-2B shape)
goes to the general reader with the reason.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hf_reference import forward_flops, hf_model, mapped_config, numel, raw_fixture, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory.inference import kv_cache_bytes
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload

_STACK = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, sliding_window=8)  # fmt: skip
_DEEPER = ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]
VARIANTS: dict[str, dict[str, Any]] = {
    "tied": dict(encoder=_STACK, decoder=_STACK | dict(num_hidden_layers=2)),
    # the decoder: deeper, its own window, two global layers in a row
    "untied": dict(
        encoder=_STACK,
        decoder=_STACK | dict(num_hidden_layers=4, sliding_window=5, layer_types=_DEEPER),
        tie_word_embeddings=False,
    ),
}


def _written(transformers: Any, keys: dict[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = transformers.T5GemmaConfig(**keys).to_dict()
    return raw


def _cpu_model(transformers: Any, raw: dict[str, Any]) -> Any:
    import torch

    torch.manual_seed(0)
    config = transformers.T5GemmaConfig.from_dict(raw)
    return transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()


def _component(name: str) -> str:
    """transformers' parameter name -> embedcalc's breakdown key (T5Gemma's module names, modeling_t5gemma.py)."""
    parts = name.split(".")
    if parts[0] == "lm_head":
        return "head/lm"
    stack = parts[1]
    if parts[2] == "embed_tokens":
        return "embedding/token" if stack == "encoder" else "embedding/decoder_token"
    if parts[2] == "norm":
        return f"{stack}/final_norm"
    module, leaf = parts[4], parts[-2]
    if module in ("self_attn", "cross_attn"):
        sub = "attention" if module == "self_attn" else "cross_attention"
        return f"{stack}/{sub}/{'out' if leaf == 'o_proj' else 'qkv'}"
    if module == "mlp":
        return f"{stack}/ffn/{'out' if leaf == 'down_proj' else 'in'}"
    sub = {"self": "attention", "cross": "cross_attention", "feedforward": "ffn"}[module.split("_")[1]]
    return f"{stack}/{sub}/norm"  # pre_/post_{self_attn,cross_attn,feedforward}_layernorm


def _raws(transformers: Any) -> dict[str, dict[str, Any]]:
    return {"2b-2b": raw_fixture("t5gemma-2b-2b.v5")} | {
        name: _written(transformers, keys) for name, keys in VARIANTS.items()
    }


@pytest.mark.torch
@pytest.mark.parametrize("name", ["2b-2b", "tied", "untied"])
def test_params_equal_transformers_per_component(transformers: Any, name: str) -> None:
    raw = _raws(transformers)[name]
    config = mapped_config(raw)
    model = hf_model(transformers, raw, "AutoModelForSeq2SeqLM")
    theirs: Counter[str] = Counter()
    for param_name, param in model.named_parameters():
        theirs[_component(param_name)] += param.numel()
    ours = count_params(config).as_dict()
    assert {k: v for k, v in ours.items() if v} == dict(theirs)
    assert count_params(config).total == numel(model)
    assert unaccounted_keys(raw) == set()


def test_the_published_shape_is_read_natively() -> None:
    """The 2B-2B defaults: 5,596,853,760 parameters (transformers' numel, above), two tables of 256,000 x 2304."""
    config = mapped_config(raw_fixture("t5gemma-2b-2b.v5"))
    assert config.decoder_token_table and config.tie_embeddings
    breakdown = count_params(config)
    assert breakdown.total == 5_596_853_760
    assert breakdown["embedding/token"] == breakdown["embedding/decoder_token"] == 256_000 * 2304
    assert "head/lm" not in breakdown.as_dict()  # tied to the decoder's table
    # 13 of 26 layers slide in each stack (T5GemmaModuleConfig: odd layers global)
    windowed = [config.stack_plan(s).counts() for s in ("encoder", "decoder")]
    for counts in windowed:
        assert sum(n for b, n in counts if b.attention is not None and b.attention.window == 4096) == 13
    derived = config.derived()
    assert derived["windowed_layers"] == derived["decoder_windowed_layers"] == 13


@pytest.mark.torch
@pytest.mark.parametrize(("src", "tgt"), [(9, 5), (16, 16), (20, 3)])
@pytest.mark.parametrize("name", ["tied", "untied"])
def test_forward_flops_equal_transformers(transformers: Any, name: str, src: int, tgt: int) -> None:
    raw = _written(transformers, VARIANTS[name])
    ours = analytic_flops(mapped_config(raw), Workload(batch_size=2, seq_len=src, tgt_len=tgt)).forward
    assert forward_flops(_cpu_model(transformers, raw), batch=2, seq_len=src, tgt_len=tgt) == ours


@pytest.mark.torch
@pytest.mark.parametrize(("src", "tgt"), [(20, 5), (6, 12)])
def test_kv_cache_self_and_cross_equal_transformers(transformers: Any, src: int, tgt: int) -> None:
    """Per layer: the cross-attention cache and the global layers' self-attention cache as transformers' forward
    leaves them; a sliding layer min(tgt, window), which transformers keeps as min(tgt, window - 1)."""
    import torch

    raw = _written(transformers, VARIANTS["untied"])
    model = _cpu_model(transformers, raw)
    with torch.no_grad():
        out = model(input_ids=torch.zeros(2, src, dtype=torch.long),
                    decoder_input_ids=torch.zeros(2, tgt, dtype=torch.long), use_cache=True)  # fmt: skip
    cache = out.past_key_values
    decoder = transformers.T5GemmaConfig.from_dict(raw).decoder
    held = 0
    for layer, kind in zip(cache.self_attention_cache.layers, decoder.layer_types, strict=True):
        tokens = layer.keys.shape[2]
        if kind == "sliding_attention":
            assert tokens == min(tgt, decoder.sliding_window - 1)
            tokens = min(tgt, decoder.sliding_window)
        held += 2 * layer.keys[:, :, :1].numel() * tokens
    cross = sum(layer.keys.numel() + layer.values.numel() for layer in cache.cross_attention_cache.layers)
    assert cross == 2 * 2 * src * 2 * 16 * 4  # K and V, batch, source, KV heads x head_dim, 4 decoder layers
    ours = kv_cache_bytes(mapped_config(raw), Workload(batch_size=2, seq_len=src, tgt_len=tgt, dtype="fp32"))
    assert ours == 4 * (held + cross)


@pytest.mark.torch
def test_verify_agrees(cli: Any, transformers: Any, write_config: Any) -> None:
    """embedcalc's torch model (two tables, the decoder's sliding layers, sandwich norms around cross-attention)
    agrees with the analytic counts, unsharded, over 2 tensor-parallel ranks and over 2 pipeline stages."""
    path = write_config(_written(transformers, VARIANTS["untied"]), "config.json")
    for extra in ((), ("--tp", "2"), ("--pp", "2")):
        result = cli("verify", str(path), "--seq-len", "12", "--format", "json", *extra)
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)["results"][0]
        assert out["agree"] is True and out.get("sharded", {"agree": True})["agree"] is True


@pytest.mark.torch
@pytest.mark.parametrize("name", ["tied", "untied"])
def test_checkpoint_tensors_are_placed(cli: Any, transformers: Any, tmp_path: Path, name: str) -> None:
    """verify --checkpoint on what save_pretrained writes: every tensor on its component (the decoder's
    embed_tokens on embedding/decoder_token, cross_attn and its two norms on cross_attention)."""
    raw = _written(transformers, VARIANTS[name])
    _cpu_model(transformers, raw).save_pretrained(tmp_path)
    result = cli("verify", str(tmp_path), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["agree"] is True and check["missing"] == [] and check["extra"] == []
    keys = {c["key"] for c in check["components"]}
    assert {"embedding/decoder_token", "decoder/cross_attention/qkv", "decoder/cross_attention/norm"} <= keys
    assert ("head/lm" in keys) is (name == "untied")


@pytest.mark.torch
def test_an_unbalanced_file_goes_to_the_general_reader(cli: Any, transformers: Any) -> None:
    """9B encoder, 2B decoder (gemma-2-9b.json's shape over T5GemmaModuleConfig's): embedcalc's encoder-decoder
    has one width, so transformers' class counts it, and the output says why."""
    from hf_reference import fixture_path

    path = fixture_path("t5gemma-9b-2b.v5")
    result = cli("analyze", str(path), "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)["results"][0]
    assert out["reader"] == "transformers-meta"
    assert out["params"]["total"] == numel(hf_model(transformers, raw_fixture("t5gemma-9b-2b.v5"),
                                                     "AutoModelForSeq2SeqLM"))  # fmt: skip
    why = " ".join(out["notes"])
    assert (
        "not read natively" in why
        and "decoder.hidden_size (2304) differs from encoder.hidden_size (3584)" in why
        and "counted instead by the general reader: transformers" in why
    )
    assert why.count("general reader") == 1 and "refused" not in why
    text = cli("analyze", str(path))
    assert "unbalanced T5Gemma" in " ".join(text.stderr.split())


def test_a_stack_key_embedcalc_does_not_model_is_named_with_its_stack(cli: Any, write_config: Any) -> None:
    """T5GemmaConfig sets is_decoder per stack (ignored); pruned heads would remove rows (refused, named)."""
    stacks = {"encoder": _STACK | {"is_decoder": True}, "decoder": _STACK | {"pruned_heads": {"0": [1]}}}
    raw = {"model_type": "t5gemma", **stacks}
    result = cli("check", str(write_config(raw, "config.json")))
    assert result.exit_code == 3
    said = " ".join(result.stderr.split())
    assert "decoder.pruned_heads" in said and "encoder.is_decoder" not in said


def test_decoder_layout_and_table_need_an_encoder_decoder(cli: Any, write_config: Any) -> None:
    base = "architecture: decoder\nvocab_size: 256\nmax_seq_len: 64\nembed_dim: 64\nnum_heads: 4\nnum_layers: 2\n"
    for extra, field in (("decoder_token_table: true\n", "decoder_token_table"),
                         ("decoder_layout: [{pattern: [default], repeat: 2}]\n", "decoder_layout")):  # fmt: skip
        result = cli("check", str(write_config(base + extra)))
        assert result.exit_code == 3 and field in result.stderr
    encdec = base.replace("decoder\n", "encoder-decoder\n", 1) + "num_decoder_layers: 3\n"
    result = cli("check", str(write_config(encdec + "decoder_layout: [{pattern: [default], repeat: 2}]\n")))
    assert result.exit_code == 3
    assert "decoder_layout add up to 2 layers but num_decoder_layers is 3" in " ".join(result.stderr.split())
