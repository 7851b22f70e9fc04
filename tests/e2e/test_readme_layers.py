"""The documentation page "The layer model: describing today's models" (docs/concepts/layer-model.md, once the
README's section of that name), checked number by number.

Every fenced ``yaml`` block of the section is a config whose first line names its file (``# mixtral.yaml``); each
must load through ``load_target``. Every ``$ embedcalc analyze FILE ...`` line of a ``console`` block is run again
with ``--format json``, and each table row shown under it (``│ total │ 46,702,792,704 │ ...``) must be the JSON
value that row renders. The ``sweep`` line's jq output must be what the sweep gives. Where an example is a
published shape with a hub fixture (``tests/fixtures/hf/<name>.json``), the page's total is also what transformers
builds on the meta device, the active count is that total less the routed experts a token does not use, and the
KV cache per token is what transformers' config implies (2 x KV heads x head_dim per layer, or MLA's
kv_lora_rank + qk_rope_head_dim).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hf_reference import ENCODERS, FIXTURES, hf_config, hf_model, numel, raw_fixture
from paths import DOCS
from typer.testing import CliRunner

from embedcalc.cli.app import app
from embedcalc.sources.loading import load_target

PAGE = DOCS / "concepts" / "layer-model.md"
HEADING = "# The layer model: describing today's models"

# table row label -> where `analyze --format json` keeps the number (results[0][group][key])
ROWS = {
    "total": ("params", "total"),
    "active params": ("params", "active"),
    "forward": ("flops", "forward"),
    "attention scores ★ (n²)": ("flops", "attention_scores"),
    "forward, causal/windowed pairs": ("flops", "forward_causal"),
    "weights": ("memory", "weights_bytes"),
    "kv cache": ("memory", "kv_cache_bytes"),
}
_ROW = re.compile(r"^│ (?P<label>.+?)\s+│\s+(?P<value>[\d,]+) │")
_JQ_FILTER = (
    ".results[0].points[-1] | {seq_len, score_share: .flops.attention_score_share, crossover_seq_len}"
)


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert text.startswith(HEADING + "\n"), f"{PAGE} does not start with {HEADING!r}"
    return text


def _fences(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", _section(), flags=re.S | re.M)


def _examples() -> dict[str, str]:
    """File name -> YAML text of every yaml block of the section."""
    out: dict[str, str] = {}
    for block in _fences("yaml"):
        first = block.splitlines()[0]
        assert re.fullmatch(r"# [\w.-]+\.yaml", first), (
            f"a yaml block must start with '# FILE.yaml': {first!r}"
        )
        out[first[2:]] = block
    return out


def _analyze_commands() -> list[tuple[list[str], dict[str, int]]]:
    """(argv after 'embedcalc', {row label: number}) for every analyze line of the section's console blocks."""
    commands: list[tuple[list[str], dict[str, int]]] = []
    for block in _fences("console"):
        for line in block.splitlines():
            if line.startswith("$ embedcalc analyze "):
                commands.append((shlex.split(line[len("$ embedcalc ") :]), {}))
            elif (row := _ROW.match(line)) is not None:
                assert commands, f"a table row before any command: {line!r}"
                commands[-1][1][row["label"]] = int(row["value"].replace(",", ""))
    return commands


def _run(*args: str) -> Any:
    """The CLI in-process (click keeps stdout and stderr apart)."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "120", "NO_COLOR": "1"})


EXAMPLES = _examples()
COMMANDS = _analyze_commands()


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readme_layers")
    for name, text in EXAMPLES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def analyzed(example_dir: Path) -> dict[str, dict[str, Any]]:
    """`analyze --format json` of every command on the page, keyed by the command as written."""
    out = {}
    for argv, _ in COMMANDS:
        args = [str(example_dir / a) if a in EXAMPLES else a for a in argv]
        result = _run(*args, "--format", "json")
        assert result.exit_code == 0, (argv, result.stderr)
        out[shlex.join(argv)] = json.loads(result.stdout)["results"][0]
    return out


def _stated(name: str, label: str) -> int:
    """The number a row ``label`` shows for example ``name`` (its first command showing that row)."""
    for argv, rows in COMMANDS:
        if name in argv and label in rows:
            return rows[label]
    raise AssertionError(f"the page shows no {label!r} row for {name}")


def test_the_section_has_an_example_per_capability() -> None:
    assert set(EXAMPLES) == {"mixtral.yaml", "deepseek.yaml", "gemma3.yaml", "albert.yaml", "phi2.yaml"}
    used = {a for argv, _ in COMMANDS for a in argv}
    assert set(EXAMPLES) <= used, "every example is followed by its command"
    assert all(rows for _, rows in COMMANDS), "every command shows at least one number"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_is_a_valid_config(example_dir: Path, name: str) -> None:
    loaded = load_target(str(example_dir / name))
    assert loaded.config.name == yaml.safe_load(EXAMPLES[name])["name"]


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[shlex.join(argv) for argv, _ in COMMANDS])
def test_numbers_shown_are_what_analyze_gives(analyzed: dict[str, dict[str, Any]], index: int) -> None:
    argv, rows = COMMANDS[index]
    result = analyzed[shlex.join(argv)]
    for label, value in rows.items():
        assert label in ROWS, f"row {label!r} has no JSON counterpart in this test"
        group, key = ROWS[label]
        assert result[group][key] == value, (label, result[group][key], value)


def test_sweep_line_is_what_sweep_gives() -> None:
    block = next(b for b in _fences("console") if "$ embedcalc sweep" in b)
    command, printed = block.strip().splitlines()
    pipeline = command[len("$ embedcalc ") :]
    sweep, jq = pipeline.split(" | ", 1)
    assert shlex.split(jq) == ["jq", "-c", _JQ_FILTER]
    result = _run(*shlex.split(sweep))
    assert result.exit_code == 0, result.stderr
    point = json.loads(result.stdout)["results"][0]["points"][-1]
    expected = {
        "seq_len": point["seq_len"],
        "score_share": point["flops"]["attention_score_share"],
        "crossover_seq_len": point["crossover_seq_len"],
    }
    assert json.loads(printed) == expected
    if shutil.which("jq"):
        done = subprocess.run(
            ["jq", "-c", _JQ_FILTER], input=result.stdout, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == printed


# --- against transformers ----------------------------------------------------------------------------------------

HUB = sorted(n for n in EXAMPLES if (FIXTURES / f"{yaml.safe_load(EXAMPLES[n])['name']}.json").exists())


@pytest.fixture(scope="module")
def transformers() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("transformers")


def _fixture_name(name: str) -> str:
    return str(yaml.safe_load(EXAMPLES[name])["name"])


def _kv_values_per_token(config: Any) -> int:
    """Values cached per token over all layers, from transformers' config object (DeepSeek-V2 §2.1 for MLA)."""
    if getattr(config, "kv_lora_rank", None):
        return int(config.num_hidden_layers * (config.kv_lora_rank + config.qk_rope_head_dim))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return int(config.num_hidden_layers * 2 * kv_heads * head_dim)


def test_every_example_has_a_hub_fixture() -> None:
    assert len(HUB) == len(EXAMPLES)


@pytest.mark.torch
@pytest.mark.parametrize("name", HUB)
def test_totals_are_what_transformers_builds(transformers: Any, name: str) -> None:
    model = hf_model(transformers, raw_fixture(_fixture_name(name)))
    total = numel(model)
    assert _stated(name, "total") == total
    top_k = getattr(model.config, "num_experts_per_tok", None)
    if top_k:
        # transformers 5 fuses each layer's experts into (num_experts, out, in) tensors; a token uses top_k
        experts = [p for key, p in model.named_parameters() if ".experts." in key]
        assert experts and all(p.ndim == 3 for p in experts), "expected fused expert tensors"
        unused = sum(p.numel() * (p.shape[0] - top_k) // p.shape[0] for p in experts)
        assert _stated(name, "active params") == total - unused


def _per_token_kv(name: str) -> list[int]:
    """KV cache rows the page shows for ``name`` at one token in bf16."""
    return [
        rows["kv cache"]
        for argv, rows in COMMANDS
        if name in argv and "kv cache" in rows and " --seq-len 1 --dtype bf16" in f" {shlex.join(argv)}"
    ]


@pytest.mark.torch
@pytest.mark.parametrize("name", HUB)
def test_kv_cache_per_token_is_transformers_config(transformers: Any, name: str) -> None:
    config = hf_config(transformers, raw_fixture(_fixture_name(name)))
    if config.model_type in ENCODERS:
        assert not _per_token_kv(name), "an encoder has no KV cache"
        return
    shown = _per_token_kv(name)
    assert shown, f"the page shows {name}'s KV cache per token (--seq-len 1 --dtype bf16)"
    assert shown[0] == 2 * _kv_values_per_token(config)  # 2 bytes a value
