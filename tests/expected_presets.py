"""The shipped presets, written out once: the CLI's listing (tests/cli/test_cli.py) and the installed wheel's
(tests/e2e/test_packaging.py) must name exactly these, so a preset that goes missing from the package, or one
added without its tests, fails both. Import as ``from expected_presets import PRESETS`` (tests/ is on
``sys.path``, see tests/paths.py). A new preset adds its name here.
"""

from __future__ import annotations

PRESETS = (
    "albert-base-v2",
    "bart-large",
    "bert-base",
    "bert-large",
    "bloom-7b1",
    "deberta-v3-base",
    "deepseek-v3",
    "deepseek-v3.2",
    "falcon-7b",
    "falcon-h1-34b",
    "gemma-2-9b",
    "gemma-3-27b",
    "gemma-4-31b",
    "gemma-7b",
    "gpt-oss-20b",
    "granite-4.0-h-small",
    "gpt2",
    "gpt2-large",
    "gpt2-medium",
    "gpt2-xl",
    "gpt3-175b",
    "jamba-mini-1.7",
    "llama-2-70b",
    "llama-2-7b",
    "llama-3.1-70b",
    "llama-3.1-8b",
    "llama-3.2-11b-vision",
    "llama-3.3-nemotron-super-49b",
    "minimax-m1-80k",
    "mistral-7b",
    "mixtral-8x7b",
    "modernbert-base",
    "mpnet-base",
    "phi-3-mini",
    "pythia-1.4b",
    "qwen2.5-7b",
    "qwen3-30b-a3b",
    "qwen3-8b",
    "qwen3-next-80b-a3b",
    "t5-base",
    "t5-small",
    "transformer-base",
    "transformer-big",
    "xlm-roberta-base",
)
