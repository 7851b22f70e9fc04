"""Every case issue 33 lists, run as its user runs it, held to the issue's done-when (slow tests).

Each case is one bullet of the issue (its words in ``bullet``) and runs in a fresh process: ``python -m embedcalc
ARGS`` for the command line, ``python -c`` for the Python API, so that what it costs is measured whole, imports
included. A case passes when it gives its documented exit code (DESIGN §6, docs/concepts/bounds.md); on an error,
one line ``embedcalc: error: ...`` on stderr (the JSON envelope on stdout under ``--format json``) holding the
words that name the field and the fix, and nothing else on stdout (no part of a table before the error); on
success, no ``inf``/``nan`` in the output; never a byte of the canary files outside a checkpoint; and bounded work:
at most 5 s of CPU time and 500 MB of peak resident memory, read from the child's own rusage (``os.wait4``). The
wall clock is only a hang guard (the machine is shared): CPU time is the work the case did.

Run ``python -m pytest -m slow tests/regressions/test_issue33_cases.py -s`` for the table of what each case cost.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from checkpoint_trees import (
    CANARY,
    CONFIG,
    INDEX,
    hub_cache,
    llama_tensors,
    make_outside,
    model_dir,
    safetensors,
    write_header,
)
from cli_process import cli_env
from finite_output import non_finite
from paths import HF_FIXTURES

from embedcalc.devices.resolve import hardware_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="rusage of one child (os.wait4), FIFOs, symlinks"),
]

CPU_BOUND_S = 5.0
MEMORY_BOUND_BYTES = 500 * 10**6
HANG_GUARD_S = 120.0
OUTPUT_BOUND_CHARS = 1_000_000  # what a terminal can show: a table of 200 named rows is ~50 kB


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str
    cpu_s: float
    wall_s: float
    peak_bytes: int


# The child's own rusage needs a launcher: on Linux a process's ru_maxrss starts from the resident size of the
# process it was forked from (exec keeps the old image's high-water mark), so a child forked straight from pytest
# (hundreds of MB) would report pytest's size. A small interpreter forks the case, waits for it (wait4) and writes
# its CPU seconds and peak RSS (KiB on Linux) to the file it is given.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as handle:
    handle.write(f"{usage.ru_utime + usage.ru_stime} {usage.ru_maxrss * 1024}")
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def run_measured(argv: list[str], env: dict[str, str], usage_file: Path) -> Ran:
    """Run ``argv`` to its end; its exit code, streams, CPU time (user + system) and peak resident memory."""
    start = time.perf_counter()
    launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(usage_file), *argv]
    with subprocess.Popen(launcher, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env, start_new_session=True) as child:  # fmt: skip
        try:
            stdout, stderr = child.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            raise
    wall = time.perf_counter() - start
    cpu, peak = usage_file.read_text().split()
    return Ran(child.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"),
               float(cpu), wall, int(peak))  # fmt: skip


# --- the cases ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One input of the issue: how to build it in a fresh folder (the command's arguments and environment), the
    exit code it must give and the words its message must hold (the field, the fix)."""

    bullet: str
    build: Callable[[Path], tuple[list[str], dict[str, str]]]
    code: int
    words: tuple[str, ...] = ()
    api: bool = False  # build gives ``python -c`` code rather than embedcalc's arguments
    usage_panel: bool = False  # click's own usage error (a panel, not embedcalc's one line)
    report: bool = False  # a verdict after a report (verify's table, then exit 3 for each disagreement)
    listing: bool = False  # a config's problems listed under one header line, one line each (check's format)
    # CPU allowance: CPU_BOUND_S, except where the refusal judges the file's leftover keys against the installed
    # transformers (sources/hf/accept.py imports it: ~4-5 s of CPU and ~280 MB on its own)
    cpu_s: float = CPU_BOUND_S


CASES: dict[str, Case] = {}


Build = Callable[[Path], tuple[list[str], dict[str, str]]]


def add(name: str, bullet: str, build: Build, code: int, *words: str, **flags: Any) -> None:
    assert name not in CASES, name
    CASES[name] = Case(bullet, build, code, words, **flags)


def case(name: str, bullet: str, code: int, *words: str, **flags: Any) -> Callable[[Build], Build]:
    def register(build: Build) -> Build:
        add(name, bullet, build, code, *words, **flags)
        return build

    return register


def cli(*args: str, **env: str) -> tuple[list[str], dict[str, str]]:
    return list(args), env


def _verify(model: Path, *extra: str) -> tuple[list[str], dict[str, str]]:
    return cli("verify", str(model), "--checkpoint", *extra)


def _index(model: Path, shard: str) -> None:
    (model / INDEX).write_text(json.dumps({"weight_map": dict.fromkeys(llama_tensors(), shard)}))


# Security: verify DIR --checkpoint reads outside DIR

OUTSIDE = "outside the checkpoint directory"
BESIDE = "an index names files beside itself"


@case("index-absolute", "an index whose weight_map holds an absolute path", 3, INDEX, BESIDE)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    _index(model, str(tmp / "outside" / "canary.safetensors"))
    return _verify(model)


@case("index-dotdot", "an index whose weight_map holds a ../ path", 3, INDEX, BESIDE)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    _index(model, "../outside/canary.safetensors")
    return _verify(model, "--format", "json")


@case("index-passwd", "the error message quotes the first 8 bytes of any file", 3, INDEX)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    _index(model, str(tmp / "outside" / "passwd"))
    return _verify(model)


@case("shard-symlink", "a *.safetensors symlink is followed", 3, "extra.safetensors", OUTSIDE)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model")
    (model / "extra.safetensors").symlink_to(tmp / "outside" / "canary.safetensors")
    return _verify(model)


@case("index-symlink", "an index that is itself a symlink is followed", 3, INDEX, OUTSIDE)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    (model / INDEX).unlink()
    (model / INDEX).symlink_to(tmp / "outside" / INDEX)
    return _verify(model, "--format", "json")


@case("not-safetensors", "the error message quotes the first 8 bytes of any file", 3, "notes.safetensors")
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model")
    (model / "notes.safetensors").write_bytes((tmp / "outside" / "passwd").read_bytes())
    return _verify(model)


def _hub(tmp: Path, files: dict[str, Path]) -> tuple[list[str], dict[str, str]]:
    return cli("verify", "org/tiny", "--checkpoint", HF_HUB_CACHE=str(hub_cache(tmp, files)))


@case("hub-shard-out", "verify ORG/NAME --checkpoint reads weight files wherever the snapshot points", 3,
      "model.safetensors", "outside")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _hub(tmp, {"model.safetensors": tmp / "outside" / "canary.safetensors"})


@case("hub-index-out", "verify ORG/NAME --checkpoint reads the index wherever the snapshot points", 3, INDEX,
      "outside")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _hub(tmp, {INDEX: tmp / "outside" / INDEX})


# Wrong numbers without an error: numpy integers (the Python API)

API_PRELUDE = """
import json, sys
import numpy as np
import embedcalc
def plain(v):
    if isinstance(v, dict):
        [plain(k) or plain(x) for k, x in v.items()]
    elif isinstance(v, list):
        [plain(x) for x in v]
    elif v is not None and type(v) not in (str, int, float, bool):
        raise TypeError(f"{type(v).__name__} in a result")
try:
    result = CALL
except embedcalc.EmbedcalcError as exc:
    sys.stderr.write(f"embedcalc: error: {exc.message}\\n")
    sys.exit(int(exc.exit_code))
data = result.to_json()
plain(data)
print(json.dumps(data, allow_nan=False))
"""


def api(call: str) -> Callable[[Path], tuple[list[str], dict[str, str]]]:
    return lambda tmp: (["-c", API_PRELUDE.replace("CALL", call)], {})


RAW = "Python API calls (mostly embedcalc.plan) raise raw TypeError/ValueError/OverflowError/AttributeError"
API_CASES = [  # name, the issue's words, the call, its exit code, the words of its message
    ("numpy-batch", "analyze('gpt2', batch_size=np.int64(2**40)) reports forward FLOPs -9.4e17",
     "embedcalc.analyze('gpt2', batch_size=np.int64(2**40))", 0, '"forward": 17'),
    ("numpy-plan", "to_json() then holds numpy ints and json.dumps fails",
     "embedcalc.plan('gpt2', hardware='l4', concurrency=np.int32(4), gen_tokens=np.uint16(16), "
     "max_ttft=np.float64(2.0), max_num_seqs=np.int64(8))", 0, ""),
    ("api-plan-float", RAW, "embedcalc.plan('gpt2', hardware='l4', concurrency=np.float64(2.5))", 2, "concurrency"),
    ("api-plan-bool", RAW, "embedcalc.plan('gpt2', hardware='l4', max_devices=np.bool_(True))", 2, "max_devices"),
    ("api-plan-huge", RAW, "embedcalc.plan('gpt2', hardware='l4', rate=10**400)", 2, "rate"),
    ("api-plan-price", RAW, "embedcalc.plan('gpt2', hardware='l4', price_per_hour={'l4': 'cheap'})", 2,
     "price_per_hour"),
]  # fmt: skip
for _name, _bullet, _call, _code, _word in API_CASES:
    add(_name, _bullet, api(_call), _code, *filter(None, [_word]), api=True)


# Unbounded memory/time


def _hf_deep(tmp: Path, fixture: str) -> tuple[list[str], dict[str, str]]:
    raw = json.loads((HF_FIXTURES / fixture).read_text())
    for config in (raw, raw.get("text_config")):
        if isinstance(config, dict):
            for key in ("num_hidden_layers", "num_layers", "n_layer"):
                if type(config.get(key)) is int:
                    config[key] = 10**29
    path = tmp / fixture
    path.write_text(json.dumps(raw))
    return cli("check", str(path))


for _fixture in ("gemma-2-9b.json", "gemma-3-27b.json", "deepseek-v3.json", "jamba-mini-1.7.json",
                 "qwen3-next-80b-a3b.json", "gpt-oss-20b.json", "llama-4-scout-17b-16e.json"):  # fmt: skip
    add(f"hf-1e29-layers-{_fixture[:-5]}", "num_hidden_layers = 10^29: the readers build one entry per layer",
        lambda tmp, fixture=_fixture: _hf_deep(tmp, fixture), 3, "num_hidden_layers", "100,000",
    )  # fmt: skip


@case("index-3GiB-sparse", "verify --checkpoint reads an index file whole (3 GiB sparse)", 3, INDEX, "bytes")
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    with (model / INDEX).open("wb") as handle:
        handle.truncate(3 << 30)
    return _verify(model)


@case("verify-1e29-layers", "verify --checkpoint loops per layer on --set num_layers=10^29-1", 3,
      "parameters stored", report=True)  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _verify(model_dir(tmp / "model"), "--set", f"num_layers={10**29 - 1}")


def _many_tensors(tmp: Path, count: int) -> Path:
    """A valid checkpoint plus ``count`` extra one-element tensors (in a second file), as a hostile header."""
    model = model_dir(tmp / "model")
    safetensors(model / "extra.safetensors", {f"extra.{i}.weight": [1] for i in range(count)})
    return model


@case("tensors-300000", "verify --checkpoint prints one line per tensor for 300,000 tensors", 3, "200,000",
      "tensors")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _verify(_many_tensors(tmp, 300_000))


# 199,000 tensors are each parsed and placed in Python: ~3 s of CPU alone, 5.8 s read once under CI's parallel lanes
@case("tensors-199000-extra", "one line per tensor: a table names at most 200 extra tensors", 0, cpu_s=8.0)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _verify(_many_tensors(tmp, 199_000))


@case("dtype-100kB", "verify --checkpoint renders a 100 kB dtype string", 3, "model.safetensors", "dtype")
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model")
    write_header(model / "model.safetensors",
                 b'{"a": {"dtype": "' + b"F" * 100_000 + b'", "shape": [1], "data_offsets": [0, 4]}}', 4)  # fmt: skip
    return _verify(model)


@case("plan-quadratic", "plan's pipeline search when nothing fits and --max-devices is 2^20 (gpt3-175b)", 0)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli("plan", "gpt3-175b", "--max-devices", str(2**20))


# Found by the long fuzz profile (the same classes: work growing with a 30-digit count)

THIRTY = 10**29


def _hf_with(tmp: Path, fixture: str, **values: Any) -> tuple[list[str], dict[str, str]]:
    raw = json.loads((HF_FIXTURES / fixture).read_text()) | values
    (tmp / fixture).write_text(json.dumps(raw))
    return cli("analyze", str(tmp / fixture))


add("hf-mamba-heads-30-digits", "an HF config's mamba_num_heads of 30 digits (a divisor search up to it)",
    lambda tmp: _hf_with(tmp, "nemotron-h-8b-base-8k.json", mamba_num_heads=10**30 - 1), 3, "groups",
    listing=True)  # fmt: skip
add("hf-gpt-neo-repeat-1e29", "gpt-neo's attention_types repeated 10^29 times (expanded layer by layer)",
    lambda tmp: _hf_with(tmp, "gpt-neo-1.3b.json", attention_types=[[["global", "local"], THIRTY]]), 3,
    "attention_types", cpu_s=8.0)  # fmt: skip
add("tp-on-1e29-heads", "--tp that does not divide 10^29 heads (every degree up to the heads tried)",
    lambda tmp: cli("analyze", "gpt2", "--set", f"embed_dim={2 * THIRTY}", "--set", f"num_heads={THIRTY}",
                    "--tp", "3", "--mode", "training"), 3, "--tp 3", "1, 2, 4", listing=True)  # fmt: skip
add("ep-on-1e29-experts", "--ep that does not divide 10^29 + 1 experts (every degree up to the experts tried)",
    lambda tmp: cli("analyze", "mixtral-8x7b", "--set", f"ffn.num_experts={THIRTY + 1}", "--ep", "2", "--dp", "2",
                    "--mode", "training"), 3, "--ep 2", "1, 11, 59", listing=True)  # fmt: skip
# Found by CI's long fuzz profile (phi-4-mini) and a scan of the 115 shipped HF configs with each value at any depth
# (a list's first and last entries too) set to 0, -1, 1, 2, 10^30, True, 0.0, -0.5, 1.5, NaN, null, "12", [] and {}
# (51,282 cases; 0 uncaught after these fixes): a division by a zero head count before the schema names it, layer 0
# of no layers, an unhashable entry of a layer list
add("hf-zero-heads", "phi-4-mini with num_attention_heads 0 (head_dim divided before the schema judged it)",
    lambda tmp: _hf_with(tmp, "phi-4-mini.v5.json", num_attention_heads=0), 3, "num_attention_heads",
    "greater than 0", listing=True)  # fmt: skip
add("hf-no-layers-indexer", "GLM-5 with num_hidden_layers 0 (the indexer's pattern read at layer 0)",
    lambda tmp: _hf_with(tmp, "glm-5.json", num_hidden_layers=0), 3, "num_hidden_layers", listing=True)  # fmt: skip
add("hf-list-in-layer-types", "a layer_types entry that is a list (set() of the entries raised TypeError)",
    lambda tmp: _hf_with(tmp, "gemma-3-1b.json", layer_types=[[]] * 26), 3, "layer_types", listing=True)  # fmt: skip
for _how in (["--peft", "lora"], ["--freeze", "embedding"]):
    add(f"finetune-1e29-layers{_how[0]}", "a fine-tune of 10^29 layers (counted module by module)",
        lambda tmp, how=_how: cli("analyze", "gpt2", "--set", f"num_layers={THIRTY}", "--mode", "training", *how),
        3, "num_layers", "10,000 layers")  # fmt: skip


# Tracebacks


@case("deadline-5e-324", "plan --deadline 5e-324s (OverflowError)", 2, "--deadline", "30d")
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli("plan", "gpt2", "--hardware", "l4", "--mode", "training", "--train-tokens", "1e9",
               "--deadline", "5e-324s")  # fmt: skip


HEADERS = {
    "nested": b"[" * 5000 + b"]" * 5000,
    "digits-5000": b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}',
    "lone-surrogate": b'{"\\ud800x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
}
for _name, _header in HEADERS.items():
    add(f"header-{_name}", "hostile checkpoint headers (RecursionError at ~990 levels, ValueError on > 4,300-digit "
        "integers, UnicodeEncodeError on a lone-surrogate tensor name after part of the table is printed)",
        lambda tmp, header=_header: _hostile_header(tmp, header), 3, "zz.safetensors",
    )  # fmt: skip


def _hostile_header(tmp: Path, header: bytes) -> tuple[list[str], dict[str, str]]:
    """The valid tensors in one file, the hostile header in a second one read after (so a table could begin)."""
    model = model_dir(tmp / "model")
    write_header(model / "zz.safetensors", header, 4)
    return _verify(model)


@case("index-nested", "hostile checkpoint index (RecursionError at ~990 levels)", 3, INDEX)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model", shards=True)
    (model / INDEX).write_text("[" * 5000 + "]" * 5000)
    return _verify(model)


@case("config-nested", "hostile checkpoint config (RecursionError at ~990 levels)", 3, "config.json")
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model")
    (model / "config.json").write_text('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
    return _verify(model)


for _key, _value in (("quantization_config", {"config_groups": ["int4"]}), ("torch_dtype", ["bfloat16"])):
    add(f"config-list-{_key}", "AttributeError/TypeError on list-valued config_groups/torch_dtype",
        lambda tmp, key=_key, value=_value: _config_with(tmp, key, value), 0,
    )  # fmt: skip


def _config_with(tmp: Path, key: str, value: Any) -> tuple[list[str], dict[str, str]]:
    model = model_dir(tmp / "model")
    (model / "config.json").write_text(json.dumps(CONFIG | {key: value}))
    return _verify(model)


@case("pattern-5000-groups", "cuda_name_pattern of 5,000 nested groups in a device file", 3,
      "cuda_name_pattern", "256")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    data = yaml.safe_load((hardware_dir() / "h100-sxm.yaml").read_text())
    path = tmp / "device.yaml"
    path.write_text(
        yaml.safe_dump(data | {"name": "mine", "cuda_name_pattern": "(" * 5000 + "x" + ")" * 5000})
    )
    return cli("analyze", "gpt2", "--hardware", str(path))


@case("experts-2e16", ">= ~2e16 MoE experts with --hardware (ZeroDivisionError in experts_reached)", 0)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli(
        "analyze", "mixtral-8x7b", "--set", "ffn.num_experts=20000000000000000", "--hardware", "h100-sxm"
    )


for _columns in ("10001", "100000", "99999999999999999999"):
    add(f"columns-{_columns[:8]}-help", "COLUMNS above 10,000 on --help (OverflowError/MemoryError; a 5.3 MB help)",
        lambda tmp, c=_columns: cli("plan", "--help", COLUMNS=c), 0,
    )  # fmt: skip
    add(f"columns-{_columns[:8]}-usage", "COLUMNS above 10,000 on usage errors",
        lambda tmp, c=_columns: cli("analyze", "--bogus", COLUMNS=c), 2, "--bogus", usage_panel=True,
    )  # fmt: skip


add("columns-1e20-table", "COLUMNS above 10,000 (a table laid out that wide)",
    lambda tmp: cli("analyze", "gpt2", COLUMNS="99999999999999999999"), 0)  # fmt: skip


def _bench_endpoint(endpoint: str) -> Callable[[Path], tuple[list[str], dict[str, str]]]:
    return lambda tmp: cli("bench", "gpt2", "--nproc", "1", "--nnodes", "2", "--node-rank", "1",
                           "--rdzv-endpoint", endpoint)  # fmt: skip


for _label, _endpoint in (("port-superscript", "h:²"), ("port-5000-digits", "h:" + "9" * 5000),
                          ("host-5000-chars", "a" * 5000 + ":1"), ("unclosed-bracket", "[::1"),
                          ("two-ports", "127.0.0.1:29400:1")):  # fmt: skip
    add(f"endpoint-{_label}", "--rdzv-endpoint with port ², a 5,000-digit port or a 5,000-character host; "
        "[::1 and 127.0.0.1:29400:1 accepted as endpoints", _bench_endpoint(_endpoint), 2, "--rdzv-endpoint",
        "HOST:PORT",
    )  # fmt: skip


# Wrong exit codes / non-finite output

for _fmt in ("table", "csv", "markdown", "json"):
    add(f"price-1e308-{_fmt}", "plan --price-per-hour DEVICE=1e308 prints $inf with exit 0 (exit 3 in JSON, with "
        "advice about flags plan does not have)",
        lambda tmp, f=_fmt: cli("plan", "gpt2", "--hardware", "l4", "--price-per-hour", "l4=1e308", "--format", f),
        2, "--price-per-hour", "2.5",
    )  # fmt: skip
    add(f"rate-5e-324-{_fmt}", "plan --rate 5e-324 prints $inf with exit 0",
        lambda tmp, f=_fmt: cli("plan", "gpt2", "--hardware", "l4", "--rate", "5e-324", "--format", f), 2,
        "--rate", "2.5",
    )  # fmt: skip


@case("price-0-plan", "price 0 refused by plan, accepted by analyze", 0)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli("plan", "gpt2", "--hardware", "l4", "--price-per-hour", "l4=0", "--format", "json")


@case("hardware-256-chars", "a 256-character --hardware name is exit 1 'File name too long' (documented: 3)", 2,
      "--hardware")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli("analyze", "gpt2", "--hardware", "a" * 256, "--format", "json")


@case("checkpoint-path-256-chars", "a 256-character checkpoint path is exit 1 'File name too long'", 3)
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return _verify(tmp / ("a" * 256))


@case("train-tokens-31-digits", "--train-tokens beyond 30 digits is 3 where other sizes are 2", 2,
      "--train-tokens", "30 digits")  # fmt: skip
def _(tmp: Path) -> tuple[list[str], dict[str, str]]:
    return cli("plan", "gpt2", "--hardware", "l4", "--mode", "training", "--train-tokens", "1" * 31)


for _kind in ("fifo", "directory"):
    add(f"local-cache-{_kind}", "a FIFO or directory as the local cache file: 'not measured yet (does not exist)'",
        lambda tmp, kind=_kind: _local_cache(tmp, kind), 4, "local.json", "not a regular file",
    )  # fmt: skip


def _local_cache(tmp: Path, kind: str) -> tuple[list[str], dict[str, str]]:
    path = tmp / "xdg" / "embedcalc" / "local.json"
    path.parent.mkdir(parents=True)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    return cli("analyze", "gpt2", "--hardware", "local", XDG_CACHE_HOME=str(tmp / "xdg"))


# --online: a hub standing in on this machine


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if "/silent/" in self.path:  # accepts, never answers
            time.sleep(HANG_GUARD_S)
            return
        self.send_response(200)
        self.send_header("X-Repo-Commit", "89abcdef" * 5)
        self.end_headers()
        try:
            for _ in range(300 * 16):  # 300 MB, no length
                self.wfile.write(b" " * 65536)
        except OSError:
            pass  # the client hung up: what it should do

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hub_endpoint() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


ONLINE = {"online-silent": ("org/silent", "a server that never answers waits 389 s"),
          "online-300MB": ("org/huge", "a 300 MB response leaves 629 MB in the cache")}  # fmt: skip


# --- the checks ---------------------------------------------------------------------------------------------------

MEASURED: dict[str, Ran] = {}


def _check(name: str, case: Case, ran: Ran, argv: list[str]) -> None:
    text = ran.stdout + ran.stderr
    assert "Traceback" not in text, ran.stderr[-2000:]
    assert ran.code == case.code, (name, ran.code, ran.stdout[-500:], ran.stderr[-500:])
    assert CANARY not in text and "root:x" not in text, "a byte of a file outside the checkpoint was shown"
    wants_json = "json" in argv and argv[argv.index("json") - 1] == "--format"
    if ran.code == 0:
        assert "--help" in argv or non_finite(ran.stdout, wants_json) is None, ran.stdout[
            :500
        ]  # (help: prose)
        if wants_json:
            json.loads(ran.stdout)
    elif wants_json:
        envelope = json.loads(ran.stdout)
        assert envelope["status"] == "error" and envelope["problems"], envelope
        message = " ".join(p["message"] for p in envelope["problems"])
        for word in case.words:
            assert word in message, (name, word, message)
    elif case.report:  # the report is the output; each disagreement one line on stderr
        assert ran.stdout and all(line.startswith("embedcalc: ") for line in ran.stderr.splitlines()), (
            ran.stderr
        )
    else:
        assert ran.stdout == "", f"{name}: output before the error: {ran.stdout[:300]!r}"
        if not case.usage_panel:
            errors = [line for line in ran.stderr.splitlines() if line.startswith("embedcalc: error:")]
            others = [line for line in ran.stderr.splitlines() if not line.startswith(("embedcalc: ", "  "))]
            listed = [line for line in ran.stderr.splitlines() if line.startswith("  ")]
            assert len(errors) == 1 and not others and (case.listing or not listed), (
                name,
                ran.stderr[-1000:],
            )
        message = " ".join(ran.stderr.split())
        for word in case.words:
            assert word in message, (name, word, ran.stderr[-1000:])
    assert len(ran.stdout) + len(ran.stderr) < OUTPUT_BOUND_CHARS, (
        f"{name}: {len(text):,} characters of output"
    )
    assert ran.cpu_s <= case.cpu_s, f"{name}: {ran.cpu_s:.1f} s of CPU"
    assert ran.peak_bytes <= MEMORY_BOUND_BYTES, f"{name}: peak RSS {ran.peak_bytes / 1e6:.0f} MB"


@pytest.mark.parametrize("name", list(CASES))
def test_issue_case(name: str, tmp_path: Path) -> None:
    case = CASES[name]
    make_outside(tmp_path / "outside")
    args, extra = case.build(tmp_path)
    argv = [sys.executable, *args] if case.api else [sys.executable, "-m", "embedcalc", *args]
    ran = run_measured(argv, cli_env(**({"COLUMNS": "120"} | extra)), tmp_path / "usage")
    MEASURED[name] = ran
    _check(name, case, ran, args)


@pytest.mark.parametrize("name", list(ONLINE))
def test_online_case(name: str, tmp_path: Path, hub_endpoint: str) -> None:
    """exit 4 naming the repository and the fetch, nothing left in the cache, bounded CPU and memory; the wall
    time is the network bound (docs/concepts/bounds.md)."""
    repo, bullet = ONLINE[name]
    env = cli_env(
        COLUMNS="120", HF_ENDPOINT=hub_endpoint, HF_HUB_CACHE=str(tmp_path / "hub"), EMBEDCALC_ONLINE="1"
    )
    env.pop("HF_HUB_OFFLINE", None)
    args = ["check", repo]
    ran = run_measured([sys.executable, "-m", "embedcalc", *args], env, tmp_path / "usage")
    MEASURED[name] = ran
    _check(name, Case(bullet, lambda tmp: (args, {}), 4, (repo, "fetching config.json")), ran, args)
    left = [p for p in (tmp_path / "hub").rglob("*") if p.is_file()] if (tmp_path / "hub").exists() else []
    assert left == [], left


def test_zz_report() -> None:
    """The table of what each case cost (printed with -s), worst first."""
    if not MEASURED:
        pytest.skip("no case ran")
    rows = sorted(MEASURED.items(), key=lambda item: -item[1].cpu_s)
    print(f"\n{'case':<34} {'exit':>4} {'cpu s':>6} {'wall s':>7} {'peak MB':>8}")
    for name, ran in rows:
        print(f"{name:<34} {ran.code:>4} {ran.cpu_s:>6.2f} {ran.wall_s:>7.2f} {ran.peak_bytes / 1e6:>8.0f}")
