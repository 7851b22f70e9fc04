"""The JSON of every deterministic command on every preset, as a golden record for refactors (issue 14).

``CASES`` lists argument vectors: each analytic command on each shipped preset under a few workloads (inference,
training with parallelism and a device, generation), every explain topic, diffs between neighbouring presets,
comparisons, sweeps, heads, schema, presets and the hardware catalogue. ``verify`` builds on the meta device and
is deterministic too; it is recorded for every preset by the slow test.

    python tests/golden_json.py            # rewrite tests/golden/json/*.json from the current code
    python tests/golden_json.py --check    # exit 1 and name every case whose JSON differs

The record is one file per command (``{"args joined by spaces": parsed JSON}``), so a diff reads case by case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from paths import GOLDEN_JSON
from typer.testing import CliRunner

from embedcalc.cli.app import app
from embedcalc.sources.presets import preset_names

GOLDEN_JSON_DIR = GOLDEN_JSON

WORKLOADS: list[list[str]] = [
    [],
    [
        "--mode",
        "training",
        "--batch-size",
        "8",
        "--seq-len",
        "512",
        "--hardware",
        "h100-sxm",
        "--dp",
        "8",
        "--zero",
        "2",
        "--recompute",
        "full",
    ],
    ["--gen-tokens", "64", "--hardware", "a100-80gb", "--tp", "2", "--dtype", "float16"],
]
TOPICS = ["heads", "width-depth", "fine-tune", "embed-dim", "cost"]
# fine-tuning moves within a family and a few across (a diff lists every tensor: all 33 x 32 pairs would be 6 MB)
DIFF_PAIRS = [
    ("bert-base", "bert-large"),
    ("bert-base", "xlm-roberta-base"),
    ("gpt2", "gpt2-medium"),
    ("llama-2-7b", "mistral-7b"),
    ("mistral-7b", "mixtral-8x7b"),
    ("qwen3-8b", "qwen3-30b-a3b"),
    ("gemma-2-9b", "gemma-3-27b"),
    ("t5-small", "t5-base"),
    ("transformer-base", "transformer-big"),
    ("llama-3.1-8b", "deepseek-v3"),
    ("gpt-oss-20b", "phi-3-mini"),
]
# the default suite compares the cases of these presets; the slow suite compares every case
QUICK_PRESETS = ("bert-base", "llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "t5-small")


def cases() -> list[list[str]]:
    names = preset_names()
    out: list[list[str]] = [["schema"], ["presets"], ["hardware"], ["heads", "768"], ["heads", "4544"]]
    out += [["hardware", "show", device] for device in ("h100-sxm", "mi300x", "tpu-v5e", "t4")]
    for name in names:
        out.append(["check", name])
        out.append(["check", name, "--mode", "training", "--max-memory", "80GB", "--suggest"])
        out.append(["presets", "show", name])
        out += [["analyze", name, *workload] for workload in WORKLOADS]
        out += [["explain", name, topic] for topic in TOPICS]
        out.append(["verify", name])
    out += [["diff", a, b] for a, b in DIFF_PAIRS]
    out += [["compare", *names[i : i + 3]] for i in range(0, len(names), 3)]
    out += [["compare", *names[i : i + 3], *WORKLOADS[1]] for i in range(0, len(names), 6)]
    out += [
        ["sweep", "gpt2", "--seq-len", "128,512,2048", "--batch-size", "1,8"],
        ["sweep", "bert-base", "--embed-dim", "256:1024:x2", "--num-layers", "4:12:+4", "--mode", "training"],
        ["sweep", "llama-2-7b", "--seq-len", "1024:8192:x2", "--hardware", "h100-sxm", "--gen-tokens", "16"],
        ["sweep", "mixtral-8x7b", "--num-layers", "8:32:+8", "--mode", "training", "--hardware", "h100-sxm"],
    ]
    out += PLAN_CASES
    return out


# plan (issue 21) and analyze's serving memory: the done-when serving plan over the whole catalogue, objectives,
# a rate, a training plan with a deadline
PLAN_CASES: list[list[str]] = [
    ["plan", "llama-3.1-70b", "--seq-len", "2048", "--gen-tokens", "256", "--concurrency", "32"],
    [
        "plan",
        "llama-3.1-8b",
        "--hardware",
        "h100-sxm,l4,t4",
        "--max-ttft",
        "0.2",
        "--max-tpot",
        "0.05",
        "--concurrency",
        "64",
    ],
    ["plan", "llama-3.1-8b", "--hardware", "a100-80gb", "--rate", "4", "--price-per-hour", "a100-80gb=1.5"],
    [
        "plan",
        "llama-3.1-8b",
        "--mode",
        "training",
        "--train-tokens",
        "1T",
        "--deadline",
        "30d",
        "--hardware",
        "h100-sxm,a100-40gb",
        "--max-devices",
        "64",
    ],
    [
        "analyze",
        "llama-3.1-8b",
        "--dtype",
        "bfloat16",
        "--seq-len",
        "1000",
        "--gen-tokens",
        "50",
        "--hardware",
        "l4",
        "--concurrency",
        "64",
    ],
]


def command_of(args: list[str]) -> str:
    return (
        args[0]
        if args[:2] != ["hardware", "show"] and args[:2] != ["presets", "show"]
        else "-".join(args[:2])
    )


def run(args: list[str]) -> dict[str, Any]:
    """The parsed JSON of one case and its exit code (``{"exit": n, "json": ...}``, or the message of a refusal)."""
    # no measured local device: the record must not depend on the machine's ~/.cache
    env = {"COLUMNS": "120", "NO_COLOR": "1", "XDG_CACHE_HOME": "/nonexistent/embedcalc-golden-cache"}
    result = CliRunner().invoke(app, [*args, "--format", "json"], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise RuntimeError(f"{' '.join(args)}: {result.exception!r}") from result.exception
    if not result.stdout.strip():  # refused before any JSON: the message is the record
        return {"exit": result.exit_code, "stderr": result.stderr}
    return {"exit": result.exit_code, "json": json.loads(result.stdout)}


def golden_path(command: str) -> Path:
    return GOLDEN_JSON_DIR / f"{command}.json"


def load_golden(command: str) -> dict[str, Any]:
    return dict(json.loads(golden_path(command).read_text(encoding="utf-8")))


def record(selected: list[list[str]]) -> dict[str, dict[str, Any]]:
    by_command: dict[str, dict[str, Any]] = {}
    for args in selected:
        by_command.setdefault(command_of(args), {})[" ".join(args)] = run(args)
    return by_command


def main(argv: list[str]) -> int:
    recorded = record(cases())
    if "--check" in argv:
        differing = [
            key
            for command, entries in recorded.items()
            for key, value in entries.items()
            if load_golden(command).get(key) != value
        ]
        print("\n".join(differing) or "all cases match")
        return 1 if differing else 0
    GOLDEN_JSON_DIR.mkdir(parents=True, exist_ok=True)
    for command, entries in recorded.items():
        golden_path(command).write_text(
            json.dumps(entries, indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
    print(f"{sum(len(e) for e in recorded.values())} cases in {len(recorded)} files under {GOLDEN_JSON_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
