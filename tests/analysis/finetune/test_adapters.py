"""Trainable and total parameters of LoRA / DoRA fine-tunes equal peft's ``get_nb_trainable_parameters`` on the
models transformers builds on the meta device (nothing allocated), family by family; the module list of
``analysis/finetune/modules.py`` equals transformers' own linear modules, name by name and shape by shape.

peft is in the dev extra (the parity tests skip without it, ``pip install peft``); they are slow tests: each
builds the model and peft's wrapper of it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hf_reference import hf_model, published_sizes, raw_fixture
from paths import HF_FIXTURES, ROOT

from embedcalc.analysis.finetune.adapters import FinetuneSpec, count_finetune
from embedcalc.analysis.finetune.modules import model_modules
from embedcalc.analysis.params import count_params
from embedcalc.errors import WorkloadError
from embedcalc.sources.loading import load_target

# one hub file per family with a naming table (tests/fixtures/hf), and the auto class it is counted as
FAMILIES = {
    "llama-2-7b": "AutoModelForCausalLM",
    "mistral-7b-v0.1": "AutoModelForCausalLM",
    "mixtral-8x7b": "AutoModelForCausalLM",
    "qwen2-0.5b": "AutoModelForCausalLM",
    "qwen3-8b": "AutoModelForCausalLM",
    "qwen3-30b-a3b": "AutoModelForCausalLM",
    "gemma-7b": "AutoModelForCausalLM",
    "gemma-2-9b": "AutoModelForCausalLM",
    "gemma-3-1b": "AutoModelForCausalLM",
    "phi-3-mini-4k": "AutoModelForCausalLM",
    "gpt2": "AutoModelForCausalLM",
    "pythia-1.4b": "AutoModelForCausalLM",
    "falcon-7b": "AutoModelForCausalLM",
    "bloom-7b1": "AutoModelForCausalLM",
    "deepseek-v3": "AutoModelForCausalLM",
    "gpt-oss-20b": "AutoModelForCausalLM",
    "bert-base-uncased": "AutoModel",
    "xlm-roberta-base": "AutoModel",
    "roberta-base": "AutoModel",
    "mpnet-base": "AutoModel",
    "deberta-v3-base": "AutoModel",
    "modernbert-base": "AutoModel",
    "albert-base-v2": "AutoModel",
    "t5-small": "AutoModelForSeq2SeqLM",
    "t5-v1_1-small": "AutoModelForSeq2SeqLM",
    "t5gemma-2b-2b.v5": "AutoModelForSeq2SeqLM",
    "bart-large": "AutoModelForSeq2SeqLM",
}


def _loaded(stem: str) -> Any:
    return load_target(str(HF_FIXTURES / f"{stem}.json")).config


def test_llama_2_7b_lora_q_v_is_peft_s_published_count() -> None:
    """peft's README: ``trainable params: 4,194,304 || all params: 6,742,609,920`` (LoRA r=8 on q_proj, v_proj)."""
    counts = count_finetune(
        load_target("llama-2-7b").config, FinetuneSpec("lora", 8, targets=("q_proj", "v_proj"))
    )
    assert (counts.trainable_total, counts.all_total) == (4_194_304, 6_742_609_920)


def test_modules_sum_to_their_breakdown_keys() -> None:
    """The modules' weights and biases add up to the analytic count of the keys they split."""
    for preset in ("llama-2-7b", "gpt2", "bert-base", "t5-base", "phi-3-mini", "deepseek-v3", "bart-large"):
        config = load_target(preset).config
        mods = model_modules(config)
        table = count_params(config).as_dict()
        sums: dict[str, int] = {}
        for m in mods.linears:
            sums[m.key] = sums.get(m.key, 0) + m.params
        for p in mods.experts:
            sums[p.key] = sums.get(p.key, 0) + p.params
        for key, value in sums.items():
            expected = table.get(key, 0) or (table["embedding/token"] if key == "head/lm" else 0)
            if key.endswith(("moe/experts",)):  # expert biases (gpt-oss) are parameters of their own
                assert value <= expected
            else:
                assert value == expected, (preset, key)


def test_freeze_leaves_the_rest_trainable() -> None:
    config = load_target("llama-2-7b").config
    counts = count_finetune(config, FinetuneSpec(freeze=("embedding", "layers:0-15")))
    total = count_params(config).total
    per_layer = (total - 2 * 32000 * 4096 - 4096) // 32
    assert counts.trainable_total == total - 32000 * 4096 - 16 * per_layer
    assert counts.all_total == total


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        (FinetuneSpec("lora", targets=("nope_proj",)), "finetune_target_not_found"),
        (FinetuneSpec("lora", modules_to_save=("classifier",)), "finetune_save_not_found"),
        (FinetuneSpec(freeze=("layers:0-99",)), "finetune_bad_layer_range"),
        (FinetuneSpec(freeze=("bogus",)), "finetune_freeze_not_found"),
    ],
)
def test_bad_specs_say_what_to_name(spec: FinetuneSpec, code: str) -> None:
    with pytest.raises(WorkloadError) as err:
        count_finetune(load_target("llama-2-7b").config, spec)
    assert err.value.code == code


def test_a_block_indexer_is_refused_not_undercounted() -> None:
    """MiniMax-M3's block indexer has its own q_proj / k_proj, which peft's q_proj / k_proj targets match too:
    refused with the reason rather than counted without them."""
    raw = {
        "model_type": "minimax_m3_vl_text",
        "vocab_size": 256,
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "index_n_heads": 2,
        "index_head_dim": 16,
        "index_block_size": 4,
        "index_topk_blocks": 2,
        "layer_types": ["full_attention", "minimax_m3_sparse"],
    }
    from embedcalc.config.schema import ModelConfig
    from embedcalc.sources.hf import map_hf_config

    config = ModelConfig.model_validate(dict(map_hf_config(raw, "test").data))
    with pytest.raises(WorkloadError) as err:
        count_finetune(config, FinetuneSpec("lora", targets=("q_proj", "v_proj")))
    assert err.value.code == "finetune_unsupported_layer"


def test_spec_refuses_mixed_methods() -> None:
    with pytest.raises(WorkloadError, match="freeze"):
        FinetuneSpec("lora", freeze=("embedding",))
    with pytest.raises(WorkloadError, match="lora_targets"):
        FinetuneSpec("full", targets=("q_proj",))


# --- parity with transformers and peft ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformers() -> Any:
    return pytest.importorskip("transformers")


def _hf(transformers: Any, stem: str) -> Any:
    return hf_model(transformers, raw_fixture(stem), FAMILIES[stem])


@pytest.mark.torch
@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_module_names_and_shapes_equal_transformers(transformers: Any, stem: str) -> None:
    import torch
    from transformers.pytorch_utils import Conv1D

    model = _hf(transformers, stem)
    theirs = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            theirs[name] = (module.in_features, module.out_features, module.bias is not None)
        elif isinstance(module, Conv1D):  # weight in x out
            theirs[name] = (*module.weight.shape, module.bias is not None)
    mods = model_modules(_loaded(stem))
    ours = {m.name: (m.in_features, m.out_features, m.bias) for m in mods.linears}
    assert ours == theirs
    params = dict(model.named_parameters())
    for p in mods.experts:
        assert params[p.name].numel() == p.params, p.name


def _peft_counts(transformers: Any, stem: str, **lora: Any) -> tuple[int, int]:
    peft = pytest.importorskip("peft")
    model = _hf(transformers, stem)
    peft_model = peft.get_peft_model(model, peft.LoraConfig(**lora))
    trainable, total = peft_model.get_nb_trainable_parameters()
    return int(trainable), int(total)


def _ours(stem: str, method: str = "lora", **kw: Any) -> tuple[int, int]:
    counts = count_finetune(_loaded(stem), FinetuneSpec(method, **kw))  # type: ignore[arg-type]
    return counts.trainable_total, counts.all_total


@pytest.mark.torch
@pytest.mark.slow  # builds the model and peft's wrapper of it, family by family
@pytest.mark.parametrize("stem", sorted(FAMILIES))
def test_all_linear_lora_equals_peft(transformers: Any, stem: str) -> None:
    assert _ours(stem, rank=16, targets=("all-linear",)) == _peft_counts(
        transformers, stem, r=16, target_modules="all-linear"
    )


# peft has no default for the others (and for mixtral its MoE conversion leaves no target: NoMatchingPeftModuleError)
DEFAULTS = [
    s
    for s in FAMILIES
    if s
    not in (
        "mixtral-8x7b",
        "qwen3-30b-a3b",
        "phi-3-mini-4k",
        "deepseek-v3",
        "gpt-oss-20b",
        "mpnet-base",
        "modernbert-base",
        "albert-base-v2",
        "t5gemma-2b-2b.v5",
    )
]


@pytest.mark.torch
@pytest.mark.slow  # builds the model and peft's wrapper of it, family by family
@pytest.mark.parametrize("stem", DEFAULTS)
def test_family_default_targets_equal_peft(transformers: Any, stem: str) -> None:
    """No target_modules: peft's per-family default (its constants table), here and there."""
    assert _ours(stem, rank=8) == _peft_counts(transformers, stem, r=8)


@pytest.mark.torch
@pytest.mark.slow  # builds the model and peft's wrapper of it, family by family
@pytest.mark.parametrize("stem", ["llama-2-7b", "gpt2", "bert-base-uncased", "t5-small", "phi-3-mini-4k"])
def test_dora_and_modules_to_save_equal_peft(transformers: Any, stem: str) -> None:
    save = {"gpt2": "lm_head", "bert-base-uncased": "pooler.dense", "t5-small": "lm_head"}.get(
        stem, "lm_head"
    )
    ours = _ours(stem, "dora", rank=4, targets=("all-linear",), modules_to_save=(save,))
    assert ours == _peft_counts(
        transformers, stem, r=4, target_modules="all-linear", use_dora=True, modules_to_save=[save]
    )


@pytest.mark.torch
@pytest.mark.slow  # builds the model and peft's wrapper of it, family by family
@pytest.mark.parametrize("stem", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_experts_as_target_parameters_equal_peft(transformers: Any, stem: str) -> None:
    names = ("q_proj", "experts.gate_up_proj", "experts.down_proj")
    ours = _ours(stem, rank=8, targets=names)
    theirs = _peft_counts(
        transformers,
        stem,
        r=8,
        target_modules=["q_proj"],
        target_parameters=["experts.gate_up_proj", "experts.down_proj"],
    )
    assert ours == theirs


def test_layer_indexed_targets() -> None:
    config = load_target("llama-2-7b").config
    counts = count_finetune(config, FinetuneSpec("lora", 8, targets=("layers.0.self_attn.q_proj",)))
    assert counts.trainable_total == 8 * (4096 + 4096)
    assert re.search(r"layers\.0\.", counts.modules[0].name)


# --- every shipped preset that transcribes a hub file --------------------------------------------------------------

# the preset -> the hub config.json it transcribes (tests/fixtures/hf), where the names differ
PRESET_FILES = {
    "bert-base": "bert-base-uncased",
    "mistral-7b": "mistral-7b-v0.1",
    "phi-3-mini": "phi-3-mini-4k",
    "gpt2-medium": "gpt2-medium.v5",
    "llama-3.3-nemotron-super-49b": "llama-3.3-nemotron-super-49b-v1",
    "falcon-h1-34b": "falcon-h1-34b-instruct",
}
# presets with no hub file here: what transformers would build is not at hand (a GPT-3 was never published as one)
WITHOUT_FILE = {"bert-large", "gpt2-large", "gpt2-xl", "gpt3-175b", "qwen2.5-7b", "transformer-base",
                "transformer-big"}  # fmt: skip


def _preset_file(preset: str) -> str | None:
    stem = PRESET_FILES.get(preset, preset)
    return stem if (HF_FIXTURES / f"{stem}.json").exists() else None


def test_every_preset_has_its_hub_file_or_says_why() -> None:
    from embedcalc.sources.presets import preset_names

    assert {p for p in preset_names() if _preset_file(p) is None} == WITHOUT_FILE


# presets transformers does not build (remote code: the hub file's auto_map names modeling_decilm.py)
REMOTE_CODE = {"llama-3.3-nemotron-super-49b"}
# presets with layers whose module names embedcalc does not map for adapters yet: refused with a clear code
UNMAPPED = {"deepseek-v3.2", "falcon-h1-34b", "granite-4.0-h-small", "jamba-mini-1.7", "minimax-m1-80k",
            "qwen3-next-80b-a3b"}  # fmt: skip
PRESETS = sorted(
    p.stem for p in (ROOT / "presets").glob("*.yaml") if p.stem not in WITHOUT_FILE | REMOTE_CODE
)


def _auto_class(stem: str) -> str | None:
    """The auto class of the counting rule: the families' table above, the published sizes', else (None) the
    causal LM; T5 is counted as its seq2seq LM."""
    row = published_sizes().get(stem)
    return (
        FAMILIES.get(stem)
        or (row.auto_class if row else None)
        or ("AutoModelForSeq2SeqLM" if stem == "t5-base" else None)
    )


@pytest.mark.torch
@pytest.mark.slow  # builds every preset's family in transformers and wraps it with peft
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_counts_as_peft(transformers: Any, preset: str) -> None:
    """analyze PRESET --peft lora --lora-targets all-linear (r=16) counts what peft counts on transformers' model of
    the hub file the preset transcribes, built on the meta device."""
    stem = _preset_file(preset)
    assert stem is not None
    spec = FinetuneSpec("lora", 16, targets=("all-linear",))
    if preset in UNMAPPED:
        with pytest.raises(WorkloadError) as err:
            count_finetune(load_target(preset).config, spec)
        assert err.value.code == "finetune_unsupported_layer"
        return
    counts = count_finetune(load_target(preset).config, spec)
    peft = pytest.importorskip("peft")
    model = hf_model(transformers, raw_fixture(stem), _auto_class(stem))
    theirs = peft.get_peft_model(model, peft.LoraConfig(r=16, target_modules="all-linear"))
    assert (counts.trainable_total, counts.all_total) == tuple(
        int(n) for n in theirs.get_nb_trainable_parameters()
    )
