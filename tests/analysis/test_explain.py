"""``embedcalc explain`` (issue 13, DESIGN.md §12): the numbers of each topic, the message catalogues, the
languages carrying the same numbers, every preset x topic x language without a traceback, no torch import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from paths import ROOT, load_script
from typer.testing import CliRunner

from embedcalc.analysis.explain import TOPICS
from embedcalc.cli.app import build_app
from embedcalc.render.i18n import LANGUAGES, LOCALE_DIR, language_from_env
from embedcalc.sources.presets import preset_names

REPO = ROOT
APP = build_app("explain")
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def explain(*args: str, env: dict[str, str] | None = None) -> Any:
    environment = {"COLUMNS": "1000", "NO_COLOR": "1", "LANG": "C", "LC_ALL": "", "LANGUAGE": ""}
    return CliRunner().invoke(APP, ["explain", *args], env={**environment, **(env or {})})


def explain_json(*args: str) -> dict[str, Any]:
    result = explain(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["command"] == "explain" and data["status"] == "ok" and data["problems"] == []
    return data


# --- the heads topic on an invalid config (the example) ------------------------------------------------


def test_heads_explains_an_indivisible_config_with_its_numbers() -> None:
    data = explain_json("bert-base", "--set", "num_heads=10", "heads")
    (result,) = data["results"]
    answer = result["answer"]
    assert result["topic"] == "heads" and result["valid"] is False
    assert [p["code"] for p in result["config_problems"]] == ["heads_indivisible"]
    assert answer["head_dim"] == 76.8 and answer["divisible"] is False
    assert answer["nearest_valid_heads"] == [8, 12]
    assert answer["nearest_valid_head_dims"] == [96, 64]
    assert answer["nearest_embed_dims"] == [760, 770]
    assert answer["reshape_from"] == [1, 128, 768] and answer["reshape_to"] == [1, 128, 10, 76.8]


def test_heads_text_shows_the_failing_reshape_and_exit_code_0() -> None:
    result = explain("bert-base", "--set", "num_heads=10", "heads")
    assert result.exit_code == 0
    assert "(1, 128, 768) → (1, 128, 10, 76.8)" in result.stdout
    assert "8 or 12" in result.stdout and "760 or 770" in result.stdout
    assert "invalid" in result.stdout


def test_other_topics_on_an_invalid_config_exit_3() -> None:
    result = explain("bert-base", "--set", "num_heads=10", "cost")
    assert result.exit_code == 3
    assert "num_heads" in result.stderr and result.stdout == ""


def test_no_topic_on_an_invalid_config_gives_heads_alone() -> None:
    result = explain("bert-base", "--set", "num_heads=10")
    assert result.exit_code == 0
    assert "only the heads topic applies" in result.stderr
    assert "Q4" in result.stdout and "Q2" not in result.stdout


def test_unrelated_invalid_config_is_not_explained() -> None:
    result = explain("bert-base", "--set", "vocab_size=0", "heads")
    assert result.exit_code == 3


def test_heads_on_a_valid_gqa_decoder() -> None:
    answer = explain_json("llama-2-7b", "heads", "--set", "num_kv_heads=8", "--dtype", "bfloat16")["results"][
        0
    ]
    heads = answer["answer"]
    assert heads["divisible"] and heads["head_dim"] == 128 and heads["kv_groups"] == 4
    assert heads["kv_cache_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    options = {o["head_dim"]: o for o in heads["head_dim_options"]}
    assert options[64]["num_heads"] == 64 and options[128]["num_heads"] == 32
    per_kv_head = {hd: o["kv_cache_bytes_per_token_per_kv_head"] for hd, o in options.items()}
    assert per_kv_head[128] == 2 * per_kv_head[64]


# --- the other topics' numbers -----------------------------------------------------------------------------------


def test_width_depth_numbers_for_bert_base() -> None:
    answer = explain_json("bert-base", "width-depth")["results"][0]["answer"]
    assert answer["params_total"] == 109_482_240
    assert answer["approx_12_l_d2"] == 12 * 12 * 768**2
    assert answer["crossover_seq_len"] == 4608
    assert answer["kv_cache_bytes_per_token"] == 0
    assert answer["chinchilla_tokens"] == 20 * 109_482_240
    assert answer["deeper_than_threshold"] is True and answer["depth_threshold"] == 6.05
    names = [r["name"] for r in answer["references"]]
    assert "bert-base" in names and "gpt2" in names and len(names) == 6  # 5 presets + this config
    assert sum(answer["params_by_category"].values()) == answer["params_total"]


def test_fine_tune_gqa_scenario_loads_everything_but_k_and_v() -> None:
    answer = explain_json("llama-2-7b", "fine-tune")["results"][0]["answer"]
    scenarios = {s["field"]: s for s in answer["scenarios"]}
    assert scenarios["num_kv_heads"]["value_b"] == 8
    assert scenarios["num_kv_heads"]["loadable_params"] == 5_664_673_792
    assert scenarios["embed_dim"]["loadable_params"] == 0
    assert scenarios["num_heads"]["params_to_initialise"] == 0
    assert scenarios["num_layers"]["loadable_params"] == 6_738_415_616


def test_fine_tune_vocabulary_growth_initialises_only_the_new_rows() -> None:
    """128,256 -> 141,120 tokens: the token table and the untied LM head each gain 12,864 rows of 4,096; the old
    rows load (resize_token_embeddings), so 12,864 x 4,096 x 2 parameters are new, not the whole tables."""
    answer = explain_json("llama-3.1-8b", "fine-tune")["results"][0]["answer"]
    vocab = {s["field"]: s for s in answer["scenarios"]}["vocab_size"]
    assert (vocab["value_a"], vocab["value_b"]) == (128_256, 141_120)
    assert vocab["params_to_initialise"] == 12_864 * 4_096 * 2 == 105_381_888
    assert vocab["loadable_params"] == answer["params_total"] == 8_030_261_248


def test_fine_tune_learned_positions_keep_the_trained_rows() -> None:
    answer = explain_json("gpt2", "fine-tune")["results"][0]["answer"]
    longer = {s["field"]: s for s in answer["scenarios"]}["max_seq_len"]
    assert longer["params_to_initialise"] == 1_024 * 768


def test_fine_tune_says_which_method_fits_which_device() -> None:
    """mistral-7b at 2,048 tokens: full fine-tuning fits neither a 24 GB nor an 80 GB device, QLoRA fits both; each
    row's memory is analyze's fine-tune memory at the row's recompute level."""
    from embedcalc.analysis.finetune.adapters import FinetuneSpec, count_finetune
    from embedcalc.analysis.finetune.memory import finetune_memory
    from embedcalc.analysis.workload import Workload
    from embedcalc.sources.loading import load_target

    answer = explain_json("mistral-7b", "fine-tune", "--seq-len", "2048", "--hardware", "rtx-4090,h100-sxm")
    rows = {(m["device"], m["method"]): m for m in answer["results"][0]["answer"]["methods"]}
    assert set(rows) == {
        (d, m) for d in ("rtx-4090", "h100-sxm") for m in ("full", "full + offload", "lora", "qlora")
    }
    assert not rows["rtx-4090", "full"]["fits"] and not rows["h100-sxm", "full"]["fits"]
    assert rows["rtx-4090", "qlora"]["fits"] and rows["rtx-4090", "qlora"]["trainable_params"] == 3_407_872
    qlora = rows["rtx-4090", "qlora"]
    config = load_target("mistral-7b").config
    w = Workload(seq_len=2048, mode="training", dtype="bf16", recompute=qlora["recompute"])
    expected = finetune_memory(config, w, count_finetune(config, FinetuneSpec("qlora")))
    assert qlora["memory_bytes"] == expected.device_bytes_unpaged <= qlora["limit_bytes"]
    text = explain("mistral-7b", "fine-tune", "--seq-len", "2048", "--hardware", "rtx-4090")
    assert text.exit_code == 0 and "qlora needs the least" in text.stdout


def test_fine_tune_names_a_method_it_cannot_count() -> None:
    answer = explain_json("jamba-mini-1.7", "fine-tune", "--hardware", "h100-sxm")["results"][0]["answer"]
    lora = next(m for m in answer["methods"] if m["method"] == "lora")
    assert lora["memory_bytes"] is None and "recurrent token mixer" in lora["reason"]


def test_embed_dim_components_sum_to_the_total() -> None:
    answer = explain_json("gpt2", "embed-dim")["results"][0]["answer"]
    assert answer["params_total"] == 124_439_808
    assert sum(c["params"] for c in answer["components"]) == answer["params_total"]
    assert answer["hidden_state_shape"] == [1, 128, 768]


def test_cost_numbers_match_analyze() -> None:
    answer = explain_json("bert-base", "cost")["results"][0]["answer"]
    assert answer["forward_flops"] == 22_348_431_360
    assert sum(answer["flops_by_category"].values()) == answer["forward_flops"]
    assert answer["crossover_seq_len"] == 4608 and answer["doubled_seq_len"] == 256


# --- languages ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("bert-base", "--set", "num_heads=10", "heads"),
        ("llama-2-7b",),
        ("t5-small",),
        ("gpt2", "--seq-len", "1024"),
    ],
)
def test_english_and_chinese_carry_the_same_numbers(args: tuple[str, ...]) -> None:
    outputs = {lang: explain(*args, "--lang", lang) for lang in LANGUAGES}
    for result in outputs.values():
        assert result.exit_code == 0, result.output
    numbers = {lang: Counter(NUMBER.findall(r.stdout)) for lang, r in outputs.items()}
    assert numbers["en"] == numbers["zh"]
    assert re.search("[\u4e00-\u9fff]", outputs["zh"].stdout)


def test_language_follows_the_locale() -> None:
    assert language_from_env({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert language_from_env({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}) == "en"
    assert language_from_env({"LC_ALL": "zh_TW.UTF-8"}) == "zh"
    assert language_from_env({"LANGUAGE": "fr:zh_CN", "LANG": "en_US.UTF-8"}) == "zh"
    assert language_from_env({"LANGUAGE": "fr", "LANG": "zh_CN.UTF-8"}) == "zh"
    assert language_from_env({}) == "en"
    result = explain("bert-base", "heads", env={"LANG": "zh_CN.UTF-8"})
    assert "为什么" in result.stdout
    assert json.loads(explain("bert-base", "heads", "--format", "json", env={"LANG": "zh_CN.UTF-8"}).stdout)[
        "results"][0]["lang"] == "zh"  # fmt: skip


def _catalogue(lang: str) -> dict[str, str]:
    module = load_script("compile_messages")
    po = LOCALE_DIR / lang / "LC_MESSAGES" / "embedcalc.po"
    mo = po.with_suffix(".mo")
    entries: dict[str, str] = module.parse_po(po.read_text(encoding="utf-8"))
    assert mo.read_bytes() == module.mo_bytes(entries), (
        f"{mo} is stale: run python scripts/compile_messages.py"
    )
    return {k: v for k, v in entries.items() if k}


def test_catalogues_agree_key_by_key_and_placeholder_by_placeholder() -> None:
    english, chinese = _catalogue("en"), _catalogue("zh")
    assert english.keys() == chinese.keys()
    for key, text in english.items():
        assert set(PLACEHOLDER.findall(text)) == set(PLACEHOLDER.findall(chinese[key])), key
        assert text.count("`") % 2 == 0 and chinese[key].count("`") % 2 == 0, key
    source = (REPO / "embedcalc" / "render" / "explain.py").read_text(encoding="utf-8")
    used = set(re.findall(r'"((?:heads|wd|ft|ed|cost|col|word)\.[a-z_]+)"', source))
    assert used and used <= english.keys(), used - english.keys()


# --- every preset, topic and language ---------------------------------------------------------------------------

RAW_KEY = re.compile(r"\b(?:heads|wd|ft|ed|cost|col|word|cat|flops|memory|mode|role)\.[a-z_]+\b")


# the default suite renders these (each kind of layer); the slow suite every preset
QUICK_PRESETS = frozenset({"bert-base", "gpt2", "t5-small", "llama-3.1-8b", "deepseek-v3", "gemma-3-27b",
                           "qwen3-30b-a3b"})  # fmt: skip


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=() if n in QUICK_PRESETS else pytest.mark.slow) for n in preset_names()]
)
def test_every_preset_topic_and_language_renders(name: str) -> None:
    for lang in LANGUAGES:
        for topic in TOPICS:
            result = explain(name, topic, "--lang", lang)
            assert result.exception is None or isinstance(result.exception, SystemExit), (name, topic, lang)
            assert result.exit_code == 0, (name, topic, lang, result.output)
            assert not RAW_KEY.search(result.stdout), (name, topic, lang, RAW_KEY.findall(result.stdout))


def test_explain_never_imports_torch() -> None:
    code = (
        "import sys\nfrom embedcalc.cli.app import main\n"
        "sys.argv = ['embedcalc', 'explain', 'gpt2', '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
