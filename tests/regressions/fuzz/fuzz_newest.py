"""Generators for the surfaces issue 33 attacked, and the stricter judge they are held to.

Surfaces: ``checkpoint`` (verify --checkpoint over a tree made hostile per case: weight_map entries that are
absolute, climb with ``..`` or name no safetensors file, shards and indexes symlinked out of the directory, headers
with hostile lengths, nesting, integers, names and dtypes), ``plan`` (prices, rates, deadlines, objectives, device
counts at and beyond their bounds), ``local-cache`` (the ``local`` device file missing, a directory, a FIFO, a broken
link, garbage or a mutated device), ``hf-bounds`` (shipped HF configs with a count set at or past a bound),
``api-numeric`` (the Python API with numpy and other numeric types), ``columns`` and ``endpoint`` ($COLUMNS on
help, usage errors and tables; --rdzv-endpoint strings).

The judge (:func:`strict_violations`), on top of :func:`fuzz_cases.violations`: the exit code is one the input's
class documents (each case carries its allowed set), a successful output holds no non-finite number (``inf``,
``nan``, ``Infinity``, ``$inf``), a checkpoint case never prints the canary's tensor names or bytes, and an API
case returns a result whose ``to_json()`` is plain JSON (``json.dumps(allow_nan=False)`` of Python types) or raises
the package's own error.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import struct
import time
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from finite_output import non_finite
from fuzz_cases import IN_PROCESS_TIMEOUT_S, CaseTimeout, Outcome, time_bound, violations
from hypothesis import strategies as st
from paths import HF_FIXTURES

from embedcalc.devices.resolve import hardware_dir

CANARY = "CANARYTENSOR"


# --- the judge ----------------------------------------------------------------------------------------------------


def strict_violations(outcome: Outcome, allowed: frozenset[int]) -> list[str]:
    """fuzz_cases' invariant, plus the documented exit codes of the case's class and finite successful output."""
    problems = violations(outcome)
    if outcome.exit_code not in allowed and not outcome.timed_out:
        problems.append(
            f"exit code {outcome.exit_code}, documented {sorted(allowed)}: {outcome.stderr[-300:]}"
        )
    is_help = "--help" in outcome.args or "-h" in outcome.args  # prose, not results
    wants_json = any(a in ("--format", "-f") and b == "json" for a, b in itertools.pairwise(outcome.args))
    if (
        outcome.exit_code == 0
        and not is_help
        and (found := non_finite(outcome.stdout, wants_json)) is not None
    ):
        problems.append(f"non-finite number in a successful output: {found}")
    if CANARY in outcome.stdout + outcome.stderr or "root:x:0" in outcome.stdout + outcome.stderr:
        problems.append("a byte of a file outside the directory reached the output")
    return problems


def run_api_strict(description: str, call: Callable[[Any], Any]) -> Outcome:
    """An API call: a result must serialise to plain, finite JSON; an error must be the package's own."""
    import embedcalc

    start = time.perf_counter()
    try:
        with time_bound(IN_PROCESS_TIMEOUT_S):
            result = call(embedcalc)
            data = result.to_json() if hasattr(result, "to_json") else result
            text = json.dumps(data, allow_nan=False)
            _plain(data)
    except CaseTimeout as exc:
        return Outcome([description], -1, "", "", exc, time.perf_counter() - start, timed_out=True)
    except embedcalc.EmbedcalcError as exc:
        return Outcome([description], int(exc.exit_code), "", exc.message, None, time.perf_counter() - start)
    except Exception as exc:  # a raw exception, a numpy scalar in the result, a non-finite number
        return Outcome([description], 1, "", repr(exc)[:300], exc, time.perf_counter() - start)
    return Outcome([description], 0, text[:2000], "", None, time.perf_counter() - start)


def _plain(value: Any) -> None:
    """Raise TypeError for anything in ``value`` that is not a plain JSON type (a numpy scalar, a float subclass)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _plain(key)
            _plain(item)
    elif isinstance(value, list):
        for item in value:
            _plain(item)
    elif value is not None and type(value) not in (str, int, float, bool):
        raise TypeError(f"{type(value).__name__} in a result: not a plain JSON type")
    elif type(value) is float and not math.isfinite(value):
        raise TypeError("a non-finite float in a result")


# --- checkpoint trees ---------------------------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
         "tie_word_embeddings": True}  # fmt: skip
TENSORS = {"model.embed_tokens.weight": [64, 16], "model.norm.weight": [16],
           "model.layers.0.input_layernorm.weight": [16], "model.layers.0.post_attention_layernorm.weight": [16],
           **{f"model.layers.0.self_attn.{p}_proj.weight": [16, 16] for p in "qkvo"},
           "model.layers.0.mlp.gate_proj.weight": [32, 16], "model.layers.0.mlp.up_proj.weight": [32, 16],
           "model.layers.0.mlp.down_proj.weight": [16, 32]}  # fmt: skip


def _header(entries: dict[str, Any]) -> bytes:
    text = json.dumps(entries).encode()
    return struct.pack("<Q", len(text)) + text


def _valid_entries(names: dict[str, list[int]]) -> dict[str, Any]:
    out, offset = {}, 0
    for name, shape in names.items():
        size = 4 * math.prod(shape)
        out[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return out


def make_outside(folder: Path) -> Path:
    """The canary folder: a valid safetensors whose tensors are named CANARY..., a passwd-like file, an index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "canary.safetensors").write_bytes(
        _header(_valid_entries({f"{CANARY}{i}": [2] for i in range(3)}))
    )
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {CANARY: "model.safetensors"}})
    )
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return folder


HEADER_VALUES = st.one_of(
    st.sampled_from([None, True, 1, -1, 2**64, 2**70, "F32", [], {}, [1.5], [-1], [True],
                     "x" * 300, [2**63], [1] * 40, {"dtype": "F32"}]),
    st.integers(-(2**70), 2**70),
    st.text(max_size=20),
)  # fmt: skip
NAMES = st.one_of(
    st.sampled_from(list(TENSORS)),
    st.text(max_size=30),
    st.sampled_from(["\ud800", "x" * 2000, "", "__metadata__", "model.layers.99999999999.x.weight"]),
)


@st.composite
def checkpoint_case(draw: st.DrawFn, workdir: Path, outside: Path) -> list[str]:
    """A model directory made hostile one way; ``verify DIR --checkpoint`` (table or JSON)."""
    index = draw(st.integers(0, 10**9))
    model = workdir / f"ckpt-{index}"
    while model.exists():
        index += 1
        model = workdir / f"ckpt-{index}"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(LLAMA))
    kind = draw(st.sampled_from(["header", "raw-header", "index", "symlink", "config", "files"]))
    entries = _valid_entries(TENSORS)
    if kind == "header":  # one record perturbed
        name = draw(st.sampled_from(list(TENSORS)))
        field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "(record)", "(name)"]))
        if field == "(record)":
            entries[name] = draw(HEADER_VALUES)
        elif field == "(name)":
            entries[draw(NAMES)] = entries.pop(name)
        else:
            entries[name][field] = draw(HEADER_VALUES)
        try:
            data = _header(entries)
        except (UnicodeEncodeError, ValueError):
            data = _header(_valid_entries(TENSORS))
        (model / "model.safetensors").write_bytes(data)
    elif kind == "raw-header":
        length = draw(st.sampled_from([0, 7, 8, 2**63, 100_000_001, 10]))
        body = draw(st.sampled_from([b"[" * 3000 + b"]" * 3000, b'{"a": ' + b"9" * 5000 + b"}", b"{}", b"\xff\xfe",
                                     b'{"\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
                                     b"root:x:0:0"]))  # fmt: skip
        prefix = struct.pack("<Q", length if length else len(body))
        (model / "model.safetensors").write_bytes(draw(st.sampled_from([prefix + body, body[:8], b""])))
    elif kind == "index":
        (model / "model.safetensors").write_bytes(_header(entries))
        climb = "../../" + outside.name + "/canary.safetensors"  # from trees/ckpt-N to the canary
        shard = draw(st.sampled_from([str(outside / "canary.safetensors"), climb, str(outside / "passwd"),
                                      "model.safetensors", "missing.safetensors", "config.json", "a\x00b.safetensors",
                                      "x" * 300 + ".safetensors", "sub/../../x.safetensors",
                                      "C:\\x.safetensors"]))  # fmt: skip
        body = draw(st.sampled_from(["map", "not-json", "list", "huge-nesting"]))
        text = {"map": json.dumps({"weight_map": {n: shard for n in TENSORS}}), "not-json": "{", "list": "[1]",
                "huge-nesting": "[" * 5000 + "]" * 5000}[body]  # fmt: skip
        (model / "model.safetensors.index.json").write_text(text)
    elif kind == "symlink":
        (model / "model.safetensors").write_bytes(_header(entries))
        link, target = draw(st.sampled_from([
            ("extra.safetensors", outside / "canary.safetensors"), ("extra.safetensors", outside / "passwd"),
            ("model.safetensors.index.json", outside / "model.safetensors.index.json"),
            ("loop.safetensors", model / "loop.safetensors"), ("dangling.safetensors", outside / "nothing"),
            ("inside.safetensors", model / "model.safetensors"),
        ]))  # fmt: skip
        (model / link).symlink_to(target)
    elif kind == "config":
        (model / "model.safetensors").write_bytes(_header(entries))
        value = draw(st.sampled_from([["int4"], {"a": 1}, 7, None, "fp8", [{"bits": 3}], 10**29]))
        key = draw(st.sampled_from(["torch_dtype", "dtype", "quantization_config", "num_hidden_layers"]))
        config = LLAMA | {key: {"config_groups": [value]} if key == "quantization_config" else value}
        (model / "config.json").write_text(json.dumps(config))
    else:  # a shard that is a directory or a FIFO, or no safetensors at all
        what = draw(st.sampled_from(["dir", "fifo", "none", "bin"]))
        if what == "dir":
            (model / "model.safetensors").mkdir()
        elif what == "fifo":
            os.mkfifo(model / "model.safetensors")
        elif what == "bin":
            (model / "pytorch_model.bin").write_bytes(b"\x80\x02")
    fmt = draw(st.sampled_from([[], ["--format", "json"]]))
    overrides = draw(st.sampled_from([[], ["--set", f"num_layers={10**29 - 1}"], ["--set", "embed_dim=32"]]))
    return ["verify", str(model), "--checkpoint", *overrides, *fmt]


# --- plan ---------------------------------------------------------------------------------------------------------

FLOATS = st.one_of(
    st.sampled_from(["0", "5e-324", "1e-300", "1e308", "1e309", "inf", "nan", "-1", "1e-6", "1e9", "1e15", "2.5",
                     "1e-7", "1e10", "0.5", "x", ""]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)  # fmt: skip
COUNTS = st.sampled_from(
    ["1", "2", "8", "0", "-1", "1048576", "1048577", str(2**63), "1" * 31, "1e3", "2T", "x"]
)
DEADLINES = st.sampled_from(
    ["5e-324s", "1s", "0.5s", "30d", "1e12s", "1e13s", "inf", "nan", "1h", "x", "-1s"]
)


@st.composite
def plan_case(draw: st.DrawFn) -> list[str]:
    model = draw(st.sampled_from(["gpt2", "gpt2", "llama-3.1-8b"]))
    device = draw(st.sampled_from(["h100-sxm", "l4"]))
    args = ["plan", model, "--hardware", device]
    if draw(st.booleans()):
        args += [
            "--mode",
            "training",
            "--train-tokens",
            draw(st.sampled_from(["1e9", "2T", "1" * 31, "0", "1e40"])),
        ]
        if draw(st.booleans()):
            args += ["--deadline", draw(DEADLINES)]
    else:
        flag = draw(
            st.sampled_from(["--rate", "--max-ttft", "--max-tpot", "--min-tokens-per-s", "--concurrency"])
        )
        args += [flag, draw(FLOATS) if flag != "--concurrency" else draw(COUNTS)]
    if draw(st.booleans()):
        args += ["--price-per-hour", f"{device}={draw(FLOATS)}"]
    if draw(st.booleans()):
        args += ["--max-devices", draw(COUNTS)]
    return [
        *args,
        *draw(st.sampled_from([[], ["--format", "json"], ["--format", "csv"], ["--format", "markdown"]])),
    ]


# --- the local device cache ---------------------------------------------------------------------------------------


@st.composite
def local_cache_case(draw: st.DrawFn, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """``analyze gpt2 --hardware local`` with the cache's local.json made hostile; the env names the cache."""
    index = draw(st.integers(0, 10**9))
    cache = workdir / f"xdg-{index}"
    while cache.exists():
        index += 1
        cache = workdir / f"xdg-{index}"
    folder = cache / "embedcalc"
    folder.mkdir(parents=True)
    path = folder / "local.json"
    kind = draw(
        st.sampled_from(["missing", "dir", "fifo", "dangling", "garbage", "empty", "device", "binary"])
    )
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(folder / "nothing")
    elif kind == "garbage":
        path.write_text(draw(st.text(max_size=200)), encoding="utf-8", errors="surrogatepass")
    elif kind == "empty":
        path.write_text("")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)))
    elif kind == "device":
        data = yaml.safe_load((hardware_dir() / "l4.yaml").read_text())
        data["name"] = "local"
        key = draw(
            st.sampled_from(["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops_per_s", "name"])
        )
        data[key] = draw(st.sampled_from([0, -1, 1e308, "x", None, [], 10**40, True]))
        path.write_text(json.dumps(data, default=str))
    mode = draw(st.sampled_from([[], ["--mode", "training", "--train-tokens", "1e9"], ["--format", "json"]]))
    return ["analyze", "gpt2", "--hardware", "local", *mode], {"XDG_CACHE_HOME": str(cache)}


# --- HF configs at the bounds -------------------------------------------------------------------------------------

HF_FILES = sorted(HF_FIXTURES.glob("*.json"))
BOUND_VALUES = (
    0,
    1,
    -1,
    2,
    100_000,
    100_001,
    10**29,
    10**30 - 1,
    10**30,
    2**63,
    2**64 + 1,
    True,
    1.5,
    None,
    "12",
)


# any value at any depth of a config (a layer list's entry, a rope_parameters field) set to one of these
NESTED_VALUES = (0, -1, 10**30, 1.5, float("nan"), None, "12", [], {})


def _leaf_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Where a value sits in a config: every key at every depth, a list's first and last entries."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [(*path, k), *_leaf_paths(v, (*path, k))]]
    if isinstance(value, list) and value:
        return [p for i in {0, len(value) - 1} for p in [(*path, i), *_leaf_paths(value[i], (*path, i))]]
    return []


@st.composite
def hf_bounds_case(draw: st.DrawFn, workdir: Path) -> list[str]:
    """A shipped HF config with one count set at or past a bound, or one value at any depth set to a hostile one
    (a zero, a list where a name is, NaN)."""
    fixture = draw(st.sampled_from(HF_FILES))
    raw = json.loads(fixture.read_text())
    target = raw["text_config"] if isinstance(raw.get("text_config"), dict) and draw(st.booleans()) else raw
    ints = sorted(k for k, v in target.items() if type(v) is int)
    change = ""
    if draw(st.integers(0, 3)) == 0:
        where = draw(st.sampled_from(_leaf_paths(raw)))
        value = draw(st.sampled_from(NESTED_VALUES))
        parent: Any = raw
        for step in where[:-1]:
            parent = parent[step]
        parent[where[-1]] = value
        change = re.sub(r"[^A-Za-z0-9_.-]", "_", f"-{'.'.join(map(str, where))}-{value!r}")[:80]
    elif ints:
        key, value = draw(st.sampled_from(ints)), draw(st.sampled_from(BOUND_VALUES))
        target[key] = value
        change = re.sub(r"[^A-Za-z0-9_.-]", "_", f"-{key}-{value!r}")[:80]
    path = workdir / f"hf-{fixture.stem}{change}.json"  # the name says what changed (the report shows it)
    path.write_text(json.dumps(raw))
    command = draw(st.sampled_from(["check", "analyze"]))
    return [command, str(path), *draw(st.sampled_from([[], ["--format", "json"]]))]


# --- the Python API with numeric types ----------------------------------------------------------------------------

NUMERIC = st.one_of(
    st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64]).flatmap(
        lambda kind: st.integers(0, int(np.iinfo(kind).max)).map(kind)
    ),
    st.integers(-5, 2**70),
    st.sampled_from([np.bool_(True), True, False, np.float64(2.0), np.float32(0.5), Fraction(3, 1), Decimal("2"),
                     Decimal("nan"), float("inf"), float("nan"), 2.0, 10**30, np.int64(2**40), np.uint64(2**64 - 1),
                     np.int64(-1), "8", None]),
)  # fmt: skip
TINY = {"name": "tiny", "architecture": "decoder", "vocab_size": 1000, "max_seq_len": 256, "embed_dim": 64,
        "num_heads": 4, "num_layers": 2}  # fmt: skip


@st.composite
def api_numeric_case(draw: st.DrawFn) -> tuple[str, Callable[[Any], Any]]:
    value = draw(NUMERIC)
    form = draw(st.sampled_from(["analyze", "parallel", "plan", "plan-float", "sweep", "compare", "mapping",
                                 "price", "endpoint"]))  # fmt: skip
    field = draw(st.sampled_from(["batch_size", "seq_len", "gen_tokens", "tgt_len"]))
    description = f"{form} {field}={value!r}"
    if form == "analyze":
        return description, lambda e: e.analyze("gpt2", **{field: value})
    if form == "parallel":
        part = draw(st.sampled_from(["tp", "pp", "dp", "zero", "ep"]))
        return f"parallel {part}={value!r}", lambda e: e.analyze(
            "gpt2", parallel={part: value}, mode="training"
        )
    if form == "plan":
        arg = draw(st.sampled_from(["seq_len", "gen_tokens", "concurrency", "max_devices", "batch_size",
                                    "max_num_seqs", "max_num_batched_tokens", "seed"]))  # fmt: skip
        return f"plan {arg}={value!r}", lambda e: e.plan("gpt2", hardware="l4", **{arg: value})
    if form == "plan-float":
        arg = draw(
            st.sampled_from(
                ["rate", "max_ttft", "max_tpot", "min_tokens_per_s", "memory_utilization", "prefix_hit"]
            )
        )
        return f"plan {arg}={value!r}", lambda e: e.plan("gpt2", hardware="l4", **{arg: value})
    if form == "price":
        return f"price {value!r}", lambda e: e.plan("gpt2", hardware="l4", price_per_hour={"l4": value})
    if form == "sweep":
        return f"sweep seq_len=[{value!r}]", lambda e: e.sweep("gpt2", seq_len=[value, 128])
    if form == "compare":
        return description, lambda e: e.compare(["gpt2", "bert-base"], **{field: value})
    if form == "endpoint":
        text = draw(ENDPOINTS)
        return f"endpoint {text!r}", lambda e: _endpoint(text)
    key = draw(st.sampled_from(["vocab_size", "embed_dim", "num_heads", "num_layers", "max_seq_len", "bias"]))
    return f"mapping {key}={value!r}", lambda e: e.analyze(TINY | {key: value})


def _endpoint(text: str) -> Any:
    from embedcalc.api.distributed import Nodes

    return {"endpoint": Nodes(2, 1, text).endpoint}


ENDPOINTS = st.one_of(
    st.sampled_from(["[::1", "127.0.0.1:29400:1", "h:²", "h:" + "9" * 5000, "a" * 5000 + ":1", "[::1]:29400",
                     "10.0.0.1:29400", "node0", ":1", "h:0", "[fe80::1%eth0]:1", "h:65536", "x.y.z:80"]),
    st.text(max_size=40),
    st.tuples(st.text(max_size=20), st.integers(-5, 10**6)).map(lambda t: f"{t[0]}:{t[1]}"),
)  # fmt: skip


# --- $COLUMNS -----------------------------------------------------------------------------------------------------

COLUMN_VALUES = st.one_of(
    st.sampled_from(["0", "1", "10", "80", "10000", "10001", "100000", "9" * 30, "²", "-5", "x", "", " 120 ", "١٢٠"]),
    st.integers(0, 10**25).map(str),
)  # fmt: skip


@st.composite
def columns_case(draw: st.DrawFn) -> tuple[list[str], dict[str, str], frozenset[int]]:
    columns = draw(COLUMN_VALUES)
    args, allowed = draw(st.sampled_from([
        (["--help"], frozenset({0})), (["analyze", "--bogus"], frozenset({2})), (["plan", "-h"], frozenset({0})),
        (["analyze", "gpt2"], frozenset({0})), (["heads", "768"], frozenset({0})),
        (["check", "nope-x"], frozenset({3})),
    ]))  # fmt: skip
    return args, {"COLUMNS": columns}, allowed
