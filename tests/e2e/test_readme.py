"""The README, number by number: its tour is real output, and every number outside the tour is accounted for.

Every ``console`` block is one command (``$ embedcalc ...``, optionally ``2>/dev/null`` and ``| jq FILTER``) and
the output it printed; the test runs the command again (in-process, 100 columns, no colour) and compares the whole
output, whitespace-insensitively (the README wraps a long message line). Every other number in the README is listed
in :data:`PROSE_NUMBERS` with the check that holds it, so a number added to the README without a check fails here.
The quick start's two commands are tests/e2e/test_newcomer.py's (CI runs them as written).

When an intended change alters what a tour command prints, ``python tests/e2e/test_readme.py --update`` writes the new
output into the README (long message lines wrapped at 110 columns); review the diff and commit it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from embedcalc.cli.app import app

# run as a script (--update): put tests/ on sys.path, as pytest's root conftest does
if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from paths import ROOT

README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _consoles() -> list[tuple[str, str]]:
    """(command after '$ ', output as printed) of every console block."""
    out = []
    for kind, body in _FENCE.findall(_readme()):
        if kind == "console":
            first, _, printed = body.partition("\n")
            assert first.startswith("$ embedcalc "), f"a console block starts with its command: {first!r}"
            out.append((first[2:], printed))
    return out


CONSOLES = _consoles()


def _jq_path(document: Any, path: str) -> Any:
    """A jq path of fields and indices (``.results[0].flops.forward``) applied to a JSON document."""
    for field, index in re.findall(r"\.(\w+)|\[(\d+)\]", path):
        document = document[field] if field else document[int(index)]
    return document


def _run(command: str) -> tuple[int, str]:
    """Run a README command line in-process; (exit code, the output its console block shows)."""
    pipeline, _, jq = command.partition(" | jq ")
    argv = shlex.split(pipeline)
    quiet = argv[-1] == "2>/dev/null"
    argv = argv[1:-1] if quiet else argv[1:]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "100", "NO_COLOR": "1"})
    if jq:
        (path,) = shlex.split(jq)
        shown = json.dumps(_jq_path(json.loads(result.stdout), path))
        if shutil.which("jq"):
            done = subprocess.run(
                ["jq", path], input=result.stdout, capture_output=True, text=True, check=True
            )
            assert done.stdout.strip() == shown
        return result.exit_code, shown
    return result.exit_code, result.stdout + ("" if quiet else result.stderr)


def _wrapped(output: str) -> str:
    """``output`` as the README shows it: trailing blanks dropped, lines of prose over 110 columns wrapped."""
    lines = []
    for line in output.rstrip().splitlines():
        line = line.rstrip()
        if len(line) <= 110 or any(c in line for c in "│┃━─"):
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        lines += textwrap.wrap(line, 110, initial_indent="", subsequent_indent=indent, break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def update_readme() -> int:
    """Rewrite every console block's output with what its command prints now; the count of blocks changed."""
    text = _readme()
    changed = 0
    for command, printed in CONSOLES:
        _, output = _run(command)
        if output.split() != printed.split():
            text = text.replace(f"$ {command}\n{printed}", f"$ {command}\n{_wrapped(output)}", 1)
            changed += 1
    README.write_text(text, encoding="utf-8")
    return changed


def test_every_code_block_is_checked() -> None:
    """A code block is the quick start (tests/e2e/test_newcomer.py) or a console block re-run here; output pasted
    in any other block would hold numbers no test checks (long output belongs on a docs page that generates it)."""
    kinds = [kind for kind, _ in _FENCE.findall(_readme())]
    assert kinds.count("bash") == 1 and set(kinds) <= {"bash", "console"}, kinds


def test_the_tour_shows_the_main_commands() -> None:
    commands = [c.split()[1] for c, _ in CONSOLES]
    assert {"check", "compare", "analyze"} <= set(commands)
    assert any(c.startswith("embedcalc compare bert-base bert-large transformer-base") for c, _ in CONSOLES)


@pytest.mark.parametrize(("command", "printed"), CONSOLES, ids=[c for c, _ in CONSOLES])
def test_tour_output_is_what_the_command_prints(command: str, printed: str) -> None:
    code, output = _run(command)
    assert code == (3 if command.startswith("embedcalc check bert-base --set num_heads=10") else 0)
    assert output.split() == printed.split(), f"README shows stale output for {command!r}:\n{output}"


def _prose() -> str:
    """The README outside its code blocks and inline code (console output is checked above, the quick start by
    test_newcomer; inline code is commands and names, the presets among them checked below), except a code span that
    is only a number: that is a number of the prose."""
    return re.sub(r"`([^`]+)`", lambda m: m[1] if _NUMBER.fullmatch(m[1]) else "", _FENCE.sub("", _readme()))


def _quick_start_torch_pin() -> str:
    block = _readme().split("## Quick start", 1)[1]
    match = re.search(r"pip install (torch==[\d.]+) --index-url https://download.pytorch.org/whl/cpu", block)
    assert match
    return match.group(1)


# every number of the README's prose -> why it holds
PROSE_NUMBERS = {
    "3.11": "Python >= 3.11 is pyproject's requires-python",
    "3": "exit 3 for the invalid config of the tour (checked above)",
    "0.9": "plan's default --memory-utilization, vLLM's gpu_memory_utilization",
    "16": "the KV cache's block size in tokens, vLLM's --block-size",
    "5.24": "the oldest transformers the dev extra allows (pyproject)",
    "6": "the transformers major version the dev extra stops below (pyproject)",
}


def test_every_prose_number_is_accounted_for() -> None:
    found = set(_NUMBER.findall(_prose()))
    unchecked = sorted(found - set(PROSE_NUMBERS))
    assert not unchecked, f"numbers in the README without a check here: {unchecked}"


def test_prose_numbers_hold() -> None:
    prose = _prose()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "Python ≥ 3.11" in prose and project["requires-python"] == ">=3.11"
    pin = _quick_start_torch_pin()
    assert f"`pip install {pin} --index-url https://download.pytorch.org/whl/cu130`" in _readme()
    assert "(exit 3)" in prose
    from embedcalc.analysis.memory.serving import BLOCK_TOKENS, DEFAULT_UTILIZATION

    assert f"default `{DEFAULT_UTILIZATION}`" in _readme()
    assert f"blocks of `{BLOCK_TOKENS}` tokens" in _readme()
    dev = project["optional-dependencies"]["dev"]
    assert "transformers>=5.24,<6" in dev and "**5.24 up to (not including) 6**" in prose


def test_presets_named_in_the_introduction_exist() -> None:
    from embedcalc.sources.presets import preset_names

    intro = _readme().split("## Quick start", 1)[0]
    named = re.findall(r"`([a-z][\w.-]*)`", intro.split("a shipped preset", 1)[1].split("your own", 1)[0])
    assert len(named) >= 5
    assert set(named) <= set(preset_names())


def _compare_params_row() -> dict[str, int]:
    """The tour's compare table: target -> its `params` row."""
    command, printed = next(c for c in CONSOLES if c[0].startswith("embedcalc compare "))
    targets = command.split()[2:]
    row = next(line for line in printed.splitlines() if re.match(r"│ params\s+│", line))
    values = [int(v.replace(",", "")) for v in re.findall(r"[\d,]+", row)]
    return dict(zip(targets, values, strict=True))


@pytest.mark.torch
def test_compare_totals_are_what_transformers_builds() -> None:
    """The tour says each total equals what transformers builds for the shape (Marian: trainable parameters; its
    sinusoidal tables are frozen)."""
    torch = pytest.importorskip("torch")
    hf = pytest.importorskip("transformers")
    marian = hf.MarianConfig(vocab_size=37000, d_model=512, encoder_layers=6, decoder_layers=6,
                             encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                             decoder_ffn_dim=2048, max_position_embeddings=512, pad_token_id=0,
                             decoder_start_token_id=0)  # fmt: skip
    large = hf.BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    )
    with torch.device("meta"):
        models = {"bert-base": hf.BertModel(hf.BertConfig()), "bert-large": hf.BertModel(large),
                  "transformer-base": hf.MarianModel(marian)}  # fmt: skip
    built = {name: sum(p.numel() for p in m.parameters() if p.requires_grad) for name, m in models.items()}
    assert _compare_params_row() == built


def test_links_reach_files_of_the_checkout() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _readme())
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if "://" not in link and not (ROOT / link).is_file()]
    assert not missing, f"README links to files that do not exist: {missing}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/e2e/test_readme.py --update")
    print(f"README: {update_readme()} console block(s) re-recorded")
