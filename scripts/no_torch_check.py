"""Run every analytic command (the ones that need no torch) in one interpreter and check that none imports torch.

DESIGN.md §7: ``check``, ``analyze`` (with ``--tp/--pp/--dp/--ep``, training and ``--hardware``), ``compare``,
``sweep``, ``heads``, ``presets``, ``schema``, ``hardware``, ``explain`` and ``plan`` answer from arithmetic alone,
so they work in the documented ``pip install -e .`` install without torch. ``.ci/run`` runs this script in a virtual
environment without torch; ``tests/cli/test_cli.py`` runs it with ``--block-torch`` (every ``import torch`` raises, as
it does where torch is not installed, and is recorded).

Each command must exit 0 and no ``torch`` module may be loaded (or, with ``--block-torch``, even asked for). The
commands that build the model (``verify``, ``diff``) must exit 4 with the install hint when torch is absent.
Output goes to stdout (send it to /dev/null); the verdict, one line per failure and a summary, to stderr. Exit 0
when every check holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.abc
import io
import sys
from collections.abc import Sequence
from contextlib import redirect_stderr
from typing import Any

ANALYTIC_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("check", "bert-base", "gpt2"),
    ("check", "bert-base", "--tp", "4", "--format", "json"),
    ("check", "bert-base", "--set", "num_heads=10", "--suggest"),  # exit 3 by design: see EXPECTED_CODES
    ("analyze", "gpt2"),
    ("analyze", "gpt2", "--format", "json"),
    ("analyze", "gpt2", "--tp", "2"),
    ("analyze", "gpt2", "--pp", "2"),
    ("analyze", "gpt2", "--dp", "2", "--zero", "3", "--mode", "training"),
    ("analyze", "mixtral-8x7b", "--ep", "2", "--dp", "2", "--mode", "training", "--format", "json"),
    ("analyze", "llama-2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--mode", "training"),
    ("analyze", "gpt2", "--mode", "training", "--optimizer", "adamw", "--recompute", "full"),
    ("analyze", "llama-2-7b", "--hardware", "h100-sxm"),
    (
        "analyze",
        "llama-2-7b",
        "--hardware",
        "a100-80gb",
        "--mode",
        "training",
        "--train-tokens",
        "1e9",
        "--devices",
        "8",
        "--price-per-hour",
        "2.5",
        "--format",
        "json",
    ),
    ("compare", "bert-base", "bert-large", "transformer-base"),
    ("compare", "bert-base", "gpt2", "--format", "csv"),
    ("sweep", "gpt2", "--seq-len", "128,256,512"),
    ("sweep", "bert-base", "--embed-dim", "512,768", "--num-heads", "8,12", "--format", "json"),
    ("heads", "768"),
    ("presets",),
    ("presets", "show", "gpt2"),
    ("schema",),
    ("hardware",),
    ("hardware", "show", "h100-sxm"),
    ("explain", "gpt2"),
    ("explain", "llama-2-7b", "cost", "--format", "json"),
    ("plan", "llama-2-7b"),
    ("plan", "gpt2", "--hardware", "h100-sxm", "--format", "json"),
    ("plan", "gpt2", "--mode", "training", "--train-tokens", "1e9", "--hardware", "a100-80gb"),
)
# the commands whose documented answer is not 0 (check --suggest on an invalid config is exit 3)
EXPECTED_CODES = {("check", "bert-base", "--set", "num_heads=10", "--suggest"): 3}
TORCH_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("verify", "gpt2"),
    ("diff", "gpt2", "gpt2-medium"),
)


class TorchBlocker(importlib.abc.MetaPathFinder):
    """Makes ``import torch`` fail as it does where torch is not installed, and remembers who asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname.split(".")[0] == "torch":
            self.asked.append(fullname)
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _run(argv: Sequence[str]) -> tuple[int, str]:
    """One command line through the console script's application: (exit code, what it wrote on stderr)."""
    from embedcalc.cli.app import build_app

    app = build_app()
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            app(list(argv), prog_name="embedcalc")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return code, err.getvalue()
    except Exception as exc:  # what the console script would die of (a traceback, exit 1)
        return 1, f"{err.getvalue()}uncaught {type(exc).__name__}: {exc}"
    return 0, err.getvalue()


def _torch_loaded() -> list[str]:
    return sorted(m for m, module in sys.modules.items() if m.split(".")[0] == "torch" and module is not None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--block-torch", action="store_true", help="make `import torch` fail, as without torch"
    )
    args = parser.parse_args(argv)
    blocker = TorchBlocker() if args.block_torch else None
    if blocker is not None:
        sys.meta_path.insert(0, blocker)
        for name in [m for m in sys.modules if m.split(".")[0] == "torch"]:
            del sys.modules[name]
    failures = []
    for command in ANALYTIC_COMMANDS:
        code, err = _run(command)
        expected = EXPECTED_CODES.get(command, 0)
        if code != expected:
            failures.append(f"{' '.join(command)}: exit {code}, expected {expected}: {err.strip()[-400:]}")
        loaded = _torch_loaded() + (blocker.asked if blocker is not None else [])
        if loaded:
            failures.append(f"{' '.join(command)}: imported torch ({', '.join(sorted(set(loaded))[:3])})")
            break  # later commands would be blamed for this one's import
    torch_missing = blocker is not None or _torch_missing()
    if torch_missing:  # the torch commands refuse with the install hint, exit 4 (DESIGN.md §6)
        for command in TORCH_COMMANDS:
            code, err = _run(command)
            if code != 4 or "pip install" not in err:
                failures.append(
                    f"{' '.join(command)}: exit {code} without torch, expected 4: {err.strip()[-400:]}"
                )
    for line in failures:
        sys.stderr.write(f"no-torch check: FAIL {line}\n")
    checked = len(ANALYTIC_COMMANDS) + (len(TORCH_COMMANDS) if torch_missing else 0)
    sys.stderr.write(f"no-torch check: {checked} command lines, {len(failures)} failures\n")
    return 1 if failures else 0


def _torch_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is None


if __name__ == "__main__":
    sys.exit(main())
