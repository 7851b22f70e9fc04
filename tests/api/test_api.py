"""The public Python API (DESIGN.md §13): doctests of the package and of the documentation's "Python API" page, the
notebook-style example, cheap import, and the API's JSON equal to the CLI's."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

import embedcalc

API_PAGE = ROOT / "docs" / "api.md"


def _run_doctests(obj: object, name: str) -> doctest.TestResults:
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(obj, name):
        runner.run(test)
    return runner.summarize(verbose=False)


def test_package_and_api_docstrings_run_as_doctests() -> None:
    import importlib

    modules = ("load", "analyze", "sweep", "heads", "schema")
    for name in ("embedcalc", *(f"embedcalc.api.{m}" for m in modules)):
        results = _run_doctests(importlib.import_module(name), name)
        assert results.failed == 0, f"{name}: {results.failed} doctest(s) failed"
        assert results.attempted > 0


def api_page_prose() -> str:
    """docs/api.md up to its generated reference (the mkdocstrings blocks)."""
    text = API_PAGE.read_text(encoding="utf-8")
    assert text.startswith("# Python API\n"), f"{API_PAGE} is not the Python API page"
    return text.split("<!-- generated: api-reference -->", 1)[0]


def test_docs_python_api_examples_run_as_doctests() -> None:
    section = api_page_prose()
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks and all(">>>" in b for b in blocks)
    parser = doctest.DocTestParser()
    test = parser.get_doctest("\n".join(blocks), {}, "docs/api.md", str(API_PAGE), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 5
    assert "semantic version" in section.lower()


def test_done_when_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import embedcalc; r = embedcalc.analyze(embedcalc.load('bert-base')); "
         "print(r.params.total)"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert proc.stdout.strip() == "109482240"


def test_import_is_cheap_and_names_load_lazily() -> None:
    # every subpackage of embedcalc, from the tree: a new one cannot drop out of the check
    package = Path(embedcalc.__file__).parent
    subpackages = tuple(f"embedcalc.{p.parent.name}" for p in sorted(package.glob("*/__init__.py")))
    code = (
        "import sys, embedcalc; heavy = ('torch', 'pydantic', 'numpy', 'yaml', 'rich', 'typer', "
        f"*{subpackages!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy))); "
        "embedcalc.analyze; print('torch' in sys.modules, 'numpy' in sys.modules, embedcalc.__version__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    first, second = out.stdout.splitlines()
    assert first == "[]"
    assert second == f"False False {embedcalc.__version__}"


def test_every_public_name_resolves_and_is_typed() -> None:
    assert (ROOT / "embedcalc" / "py.typed").is_file()
    for name in embedcalc.__all__:
        assert getattr(embedcalc, name) is not None, name
    assert set(dir(embedcalc)) >= set(embedcalc.__all__)
    with pytest.raises(AttributeError):
        embedcalc.no_such_name  # noqa: B018


def test_example_tour_runs_as_a_script() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "api_tour.py")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "params 109,482,240" in proc.stdout
    assert "crossover seq_len: 4608" in proc.stdout


def cli_json(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "embedcalc", *args, "--format", "json"], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_api_json_equals_the_cli_json() -> None:
    analyze = cli_json("analyze", "gpt2", "--seq-len", "256", "--mode", "training", "--set", "num_layers=6")
    api = embedcalc.analyze(
        embedcalc.load("gpt2", overrides={"num_layers": 6}), seq_len=256, mode="training"
    ).to_json()
    assert api == analyze["results"][0]
    compare = cli_json("compare", "bert-base", "t5-small", "--batch-size", "2")
    assert embedcalc.compare(["bert-base", "t5-small"], batch_size=2).to_json() == compare["results"]
    sweep = cli_json("sweep", "bert-base", "--seq-len", "128,1024", "--embed-dim", "512,768")
    assert (
        embedcalc.sweep("bert-base", seq_len=[128, 1024], embed_dim="512,768").to_json()
        == sweep["results"][0]
    )


def test_heads_and_schema_json_equal_the_cli_json() -> None:
    from embedcalc.api.heads import heads
    from embedcalc.api.schema import config_schema

    assert heads(768).to_json() == cli_json("heads", "768")["results"][0]
    proc = subprocess.run([sys.executable, "-m", "embedcalc", "schema"], capture_output=True, text=True,
                          timeout=300, check=True)  # fmt: skip
    assert config_schema() == json.loads(proc.stdout)


def test_heads_note_says_where_a_partial_listing_is_exact() -> None:
    from embedcalc.api.heads import heads

    many = heads(97821761637600)  # 17,280 divisors: the smallest 10,000 are listed
    assert not many.listing.complete and len(many.listing.choices) == 10_000
    assert many.note is not None and "17,280 divisors" in many.note and "below 24,847,200" in many.note
    assert heads(10**18).note is None  # 361 divisors, all listed


def test_errors_are_the_package_errors() -> None:
    with pytest.raises(embedcalc.ConfigError) as info:
        embedcalc.analyze("bert-base", seq_len=4096)
    assert info.value.problems[0].code
    with pytest.raises(embedcalc.EmbedcalcError, match="dtype"):
        embedcalc.analyze("bert-base", dtype="fp3")
    with pytest.raises(embedcalc.EmbedcalcError, match="unknown workload field"):
        embedcalc.analyze("bert-base", seq_length=128)
    with pytest.raises(embedcalc.EmbedcalcError, match="list of configs"):
        embedcalc.compare("bert-base")
    with pytest.raises(embedcalc.ConfigError):
        embedcalc.load({"embed_dim": 768})
    from embedcalc.api.heads import heads

    for bad in (0, 10**30, 768.0, True):
        with pytest.raises(embedcalc.EmbedcalcError, match="embed_dim") as usage:
            heads(bad)  # type: ignore[arg-type]
        assert usage.value.exit_code == 2


def test_workload_object_and_fields_combine() -> None:
    base = embedcalc.Workload(batch_size=4, seq_len=64)
    a = embedcalc.analyze("gpt2", base, dtype="bfloat16", parallel={"tp": 2})
    assert (a.workload.batch_size, a.workload.dtype, a.workload.parallel.tp) == (4, "bf16", 2)
    assert a.to_json() == embedcalc.analyze("gpt2", base, dtype="bf16", parallel={"tp": 2}).to_json()
    loaded = embedcalc.load("gpt2")
    assert embedcalc.analyze(loaded.config).params.total == embedcalc.analyze(loaded).params.total


@pytest.mark.torch
def test_verify_json_equals_the_cli_json() -> None:
    pytest.importorskip("torch")
    cli = cli_json("verify", "transformer-base", "--seq-len", "16", "--set", "num_layers=1")
    result = embedcalc.verify(embedcalc.load("transformer-base", ["num_layers=1"]), seq_len=16)
    assert result.agree
    assert result.to_json() == cli["results"][0]


def test_api_analyze_takes_the_cli_time_options_and_its_json_equals_the_cli_json() -> None:
    # issue 34: the expected time (the README's headline) through analyze(), not only plan()
    serve = cli_json("analyze", "llama-3.1-8b", "--hardware", "h100-sxm", "--seq-len", "1024", "--gen-tokens",
                     "256", "--kv-dtype", "fp8", "--concurrency", "16", "--memory-utilization", "0.85")  # fmt: skip
    api = embedcalc.analyze("llama-3.1-8b", hardware="h100-sxm", seq_len=1024, gen_tokens=256, kv_dtype="fp8",
                            concurrency=16, memory_utilization=0.85)  # fmt: skip
    assert api.to_json() == serve["results"][0]
    assert api.time is not None and api.time.hardware == "h100-sxm"
    assert api.time.prefill_s is not None and api.time.prefill_s > 0
    assert api.serving is not None and api.serving.to_json() == serve["results"][0]["memory"]["serving"]
    train = cli_json("analyze", "pythia-1.4b", "--mode", "training", "--hardware", "h100-sxm", "--train-tokens",
                     "100B", "--dp", "8", "--seq-len", "2048", "-b", "8", "--global-batch", "512",
                     "--price-per-hour", "2.5", "--efficiency", "compute=0.5,memory=0.8")  # fmt: skip
    run = embedcalc.analyze("pythia-1.4b", mode="training", hardware="H100-SXM", train_tokens="100B",
                            parallel={"dp": 8}, seq_len=2048, batch_size=8, global_batch=512, price_per_hour=2.5,
                            efficiency={"compute": 0.5, "memory": 0.8})  # fmt: skip
    assert run.to_json() == train["results"][0]
    assert run.time is not None and run.time.training is not None
    assert run.time.training.tokens == 100 * 10**9 and run.time.training.devices == 8
    limited = cli_json("analyze", "gpt2", "--max-memory", "2GiB", "--concurrency", "8")
    assert embedcalc.analyze("gpt2", max_memory="2GiB", concurrency=8).to_json() == limited["results"][0]
    plain = embedcalc.analyze("gpt2")
    assert plain.time is None and plain.serving is None and "time" not in plain.to_json()


@pytest.mark.parametrize(
    ("kwargs", "path", "words"),
    [
        ({"efficiency": 0.5}, "efficiency", "needs hardware"),
        ({"hardware": "h100-sxm", "efficiency": 1.5}, "efficiency", "1.5"),
        ({"hardware": "h100-sxm", "kv_dtype": "fp3"}, "kv_dtype", "fp3"),
        ({"hardware": "h100-80gb"}, "hardware", "did you mean h100-pcie or h100-sxm"),
        ({"hardware": ["h100-sxm", "a100-80gb"]}, "hardware", "one device"),
        ({"hardware": "h100-sxm", "devices": 8}, "devices", "train_tokens"),
        ({"hardware": "h100-sxm", "mode": "training", "train_tokens": "lots"}, "train_tokens", "not a size"),
        ({"hardware": "h100-sxm", "train_tokens": 10**9, "price_per_hour": -1}, "price_per_hour", "price"),
        ({"hardware": "h100-sxm", "concurrency": 0}, "concurrency", "count"),
        ({"concurrency": 4, "memory_utilization": 0.9}, "memory_utilization", "hardware"),
        ({"hardware": "h100-sxm", "memory_utilization": 1.2}, "memory_utilization", "(0, 1]"),
        ({"hardware": "h100-sxm", "mode": "training", "concurrency": 4}, "concurrency", "mode inference"),
        ({"max_memory": "80 gigs"}, "max_memory", "unknown unit"),
    ],
)
def test_api_time_options_are_refused_by_keyword(kwargs: dict, path: str, words: str) -> None:
    with pytest.raises(embedcalc.EmbedcalcError) as info:
        embedcalc.analyze("gpt2", **kwargs)
    assert info.value.exit_code == 2
    assert info.value.problems[0].path == path
    assert words in info.value.message
