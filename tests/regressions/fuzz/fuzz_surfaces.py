"""Generators for the surfaces issue 24 attacked (the invariant is fuzz_cases.violations, unchanged):

- ``layer-model``: a valid config with layers as data (attention/ffn specs, block variants, layer runs) with one
  field perturbed: a field of another kind, a hostile number, a wrong type, an unknown name;
- ``nested-set``: ``--set`` with dotted keys into the specs (``ffn.num_experts=...``, ``blocks.x.attention.kind=...``)
  and whole specs or layer runs as YAML flow values;
- ``hub-cache``: hub ids with hostile revisions read from a Hugging Face cache built hostile once (refs holding
  ``..`` or absolute paths, a sparse 3 GiB ref, a snapshot symlinked out of the cache, a config.json that is a
  directory or a FIFO, ids with ``--`` and ``..``);
- ``time-flags``: --hardware / --efficiency / --train-tokens / --devices / --price-per-hour / --kv-dtype values;
- ``device-file``: device YAML files with a figure perturbed, used as --hardware FILE;
- ``api``: Python API calls with arguments of the wrong type or size; the invariant there is "returns, or raises
  the package's own EmbedcalcError", checked by :func:`run_api`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from fuzz_cases import HOSTILE_NUMBERS, IN_PROCESS_TIMEOUT_S, SMALL, CaseTimeout, Outcome, time_bound
from hypothesis import strategies as st
from paths import HF_FIXTURES, ROOT

FIXTURES = HF_FIXTURES

# --- layer model ------------------------------------------------------------------------------------------------

LAYERED = {
    **SMALL,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "norm_placement": "pre",
    "position": "rope",
    "ffn": {"kind": "moe", "num_experts": 4, "top_k": 2, "expert_dim": 32},
    "attention": {"qk_norm": "head"},
    "blocks": {"dense": {"ffn": {"kind": "dense"}}, "local": {"attention": {"sliding_window": 16}}},
    "layers": [{"pattern": ["dense"], "repeat": 1}, {"pattern": ["local", "default"], "repeat": 1}],
    "num_layers": 3,
}
MLA = {"kind": "mla", "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
       "v_head_dim": 16}  # fmt: skip
FFN_FIELDS = ("kind", "ffn_dim", "num_experts", "top_k", "expert_dim", "num_shared_experts", "shared_expert_dim",
              "shared_expert_gate", "router_bias", "expert_bias", "nonsense")  # fmt: skip
ATTENTION_FIELDS = ("kind", *[k for k in MLA if k != "kind"], "qk_head_dim", "qk_norm", "sinks", "sliding_window",
                    "chunk_size", "nonsense")  # fmt: skip
# One valid token mixer of each recurrent kind (issue 23), for a block "ssm" the layer model may place among the
# attention blocks; the fuzz then perturbs one of its fields like the attention's and the FFN's.
MIXERS = (
    {"kind": "mamba2", "state_size": 16, "num_heads": 4, "head_dim": 16, "groups": 1, "conv_kernel": 4,
     "chunk_size": 8},
    {"kind": "mamba", "state_size": 8, "inner_dim": 128, "dt_rank": 4, "conv_kernel": 4},
    {"kind": "gated_deltanet", "num_heads": 2, "head_dim": 16, "num_k_heads": 2, "head_k_dim": 8, "conv_kernel": 4},
    {"kind": "short_conv", "inner_dim": 64, "conv_kernel": 3},
    {"kind": "lightning", "num_heads": 4, "head_dim": 16, "chunk_size": 8},
    {"kind": "none"},
)  # fmt: skip
MIXER_FIELDS = ("kind", "state_size", "num_heads", "head_dim", "inner_dim", "dt_rank", "bc_norms", "num_k_heads",
                "head_k_dim", "groups", "conv_kernel", "chunk_size", "conv_bias", "bias", "norm_before_gate",
                "nonsense")  # fmt: skip
SPEC_VALUES = st.one_of(
    st.sampled_from(HOSTILE_NUMBERS).map(lambda t: _value(t)),
    st.sampled_from(
        ["moe", "dense", "mla", "standard", "head", "full", "none", True, False, None, [], {}, 0, 3]
    ),
)


def _value(text: str) -> Any:
    """``text`` as YAML reads it, or the text itself where YAML cannot (a 4,301-digit integer, a bad tag) or where
    JSON could not hold the value."""
    try:
        value = yaml.safe_load(text) if text.strip() else text
        json.dumps(value)  # the config is written as JSON too: bytes (!!binary) or dates stay text
    except (yaml.YAMLError, ValueError, RecursionError, TypeError):
        return text
    return value


@st.composite
def layer_model_configs(draw: st.DrawFn) -> dict[str, Any]:
    """LAYERED (or its MLA variant, or either with a recurrent-mixer block among its layers) with one field of the
    layer model perturbed."""
    data = json.loads(json.dumps(LAYERED))
    if draw(st.booleans()):
        data["attention"] = dict(MLA)
    places = [
        "ffn",
        "attention",
        "blocks.dense.ffn",
        "blocks.local.attention",
        "layers",
        "num_layers",
        "blocks",
    ]
    mixer = draw(st.one_of(st.none(), st.sampled_from(MIXERS)))
    if mixer is not None:
        data["blocks"]["ssm"] = {"mixer": dict(mixer)}
        data["layers"] = [{"pattern": ["dense"], "repeat": 1}, {"pattern": ["ssm", "default"], "repeat": 1}]
        places.append("blocks.ssm.mixer")
    where = draw(st.sampled_from(places))
    if where == "layers":
        data["layers"] = draw(st.sampled_from([
            [], [{"pattern": ["default"], "repeat": 3}], [{"pattern": ["nope"], "repeat": 3}],
            [{"pattern": [], "repeat": 3}], [{"pattern": ["default"], "repeat": 10**40}], "default", None,
            [{"pattern": ["dense"], "repeat": 2}, {"pattern": ["default"], "repeat": 1, "extra": 1}],
        ]))  # fmt: skip
    elif where == "num_layers":
        data["num_layers"] = draw(SPEC_VALUES)
    elif where == "blocks":
        data["blocks"] = draw(st.sampled_from([{}, {"default": {}}, {"x": None}, {"x": {"ffn": 5}}, [], "x"]))
    else:
        spec = data
        for part in where.split("."):
            spec = spec[part]
        fields = (
            FFN_FIELDS
            if where.endswith("ffn")
            else MIXER_FIELDS
            if where.endswith("mixer")
            else ATTENTION_FIELDS
        )
        spec[draw(st.sampled_from(fields))] = draw(SPEC_VALUES)
    return data


@st.composite
def nested_set_args(draw: st.DrawFn) -> list[str]:
    out: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([
            "ffn.kind", "ffn.num_experts", "ffn.top_k", "ffn.expert_dim", "ffn.router_bias", "ffn.ffn_dim",
            "attention.kind", "attention.kv_lora_rank", "attention.sliding_window", "attention.qk_norm",
            "blocks.x.ffn.kind", "blocks.x.attention.sliding_window", "blocks.default.ffn.kind", "ffn", "attention",
            "layers", "blocks", "ffn..kind", "ffn.", ".kind", "ffn.kind.x", "a" * 200 + ".b",
        ]))  # fmt: skip
        value = draw(st.one_of(
            st.sampled_from(HOSTILE_NUMBERS),
            st.sampled_from(["moe", "dense", "mla", "{kind: moe, num_experts: 8, top_k: 2}", "{num_experts: 8}",
                             "[{pattern: [default], repeat: 12}]", "[{pattern: [x], repeat: 1}]", "{x: {ffn: 1}}",
                             "[" * 200, "{a: " * 50]),
        ))  # fmt: skip
        out += ["--set", f"{key}={value}"]
    return out


# --- hub cache --------------------------------------------------------------------------------------------------

COMMIT = "0123abcd" * 5
HUB_IDS = ("org/good", "org/dotdot-ref", "org/abs-ref", "org/huge-ref", "org/symlink-out", "org/dir-config",
           "org/fifo-config", "org/loop-config", "org/missing", "org/a--b", "org/a..b", "-org/x",
           "org/x.git")  # fmt: skip
REVISIONS = ("", "@main", "@" + COMMIT, "@../../../etc", "@/etc/passwd", "@..", "@a//b", "@.hidden", "@x.lock",
             "@refs/pr/1", "@" + "x" * 300, "@a b", "@a\x00b", "@main@{1}", "@~1", "@" + COMMIT[:39])  # fmt: skip


def make_hub_cache(root: Path, outside: Path) -> Path:
    """A Hugging Face cache holding every hostile shape once (idempotent); returns the cache path."""
    cache = root / "hub"
    if cache.exists():
        return cache
    config = (FIXTURES / "phi-2.json").read_text()
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "config.json").write_text(config)

    def repo(name: str, ref: str | None = COMMIT) -> Path:
        base = cache / f"models--org--{name}"
        snapshot = base / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        (base / "refs").mkdir()
        if ref is not None:
            (base / "refs" / "main").write_text(ref)
        return snapshot

    (repo("good") / "config.json").write_text(config)
    (repo("dotdot-ref", "../../../" + str(outside)) / "config.json").write_text(config)
    (repo("abs-ref", str(outside)) / "config.json").write_text(config)
    huge = repo("huge-ref", None)
    with (huge.parent.parent / "refs" / "main").open("wb") as f:
        f.truncate(3 << 30)  # sparse
    (huge / "config.json").write_text(config)
    (repo("symlink-out") / "config.json").symlink_to(outside / "config.json")
    (repo("dir-config") / "config.json").mkdir()
    os.mkfifo(repo("fifo-config") / "config.json")
    loop = repo("loop-config") / "config.json"
    loop.symlink_to(loop)
    return cache


@st.composite
def hub_args(draw: st.DrawFn) -> list[str]:
    target = draw(st.sampled_from(HUB_IDS)) + draw(st.sampled_from(REVISIONS))
    command = draw(
        st.sampled_from([["check"], ["analyze"], ["compare", "gpt2"], ["analyze", "--format", "json"]])
    )
    revision = draw(
        st.sampled_from([[], ["--revision", "main"], ["--revision", "../x"], ["--revision", COMMIT]])
    )
    return [*revision, *command, target]


# --- time flags and device files --------------------------------------------------------------------------------

TIME_VALUES = {
    "--hardware": (
        "h100-sxm",
        "a100-80gb",
        "tpu-v5e",
        "local",
        "nope",
        "",
        "../hardware/h100-sxm.yaml",
        "/dev/zero",
    ),
    "--efficiency": ("0.5", "1", "1e-320", "1e-4", "0", "-1", "inf", "nan", "measured", "1.5", "x", ""),
    "--train-tokens": ("1e9", "2T", "1", "0", "-1", "inf", "nan", "9" * 31, "1e400", "x"),
    "--devices": ("1", "8", "0", "-1", "9" * 30, "9" * 400, "x"),
    "--price-per-hour": ("2.5", "0", "-1", "inf", "nan", "1e10", "1e-320", "x"),
    "--kv-dtype": ("fp8", "int8", "bf16", "fp16", "fp32", "fp4", ""),
    "--mode": ("inference", "training"),
    "--gen-tokens": ("0", "16", "100000"),
}


@st.composite
def time_flag_args(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(["analyze", "compare", "sweep"]))
    positional = (
        ["gpt2", "llama-2-7b"] if command == "compare" else [draw(st.sampled_from(["gpt2", "llama-2-7b"]))]
    )
    out = [command, *positional] + (["--seq-len", "128,256"] if command == "sweep" else [])
    for flag in draw(st.lists(st.sampled_from(sorted(TIME_VALUES)), max_size=5, unique=True)):
        out += [flag, draw(st.sampled_from(TIME_VALUES[flag]))]
    return [*out, *draw(st.sampled_from([[], ["--format", "json"]]))]


DEVICE = yaml.safe_load((ROOT / "hardware" / "h100-sxm.yaml").read_text())
DEVICE_FIGURES = ("peak_flops_per_s.fp32", "peak_flops_per_s.bf16", "memory_bytes", "memory_bandwidth_bytes_per_s",
                  "interconnect.per_direction_bytes_per_s")  # fmt: skip


@st.composite
def device_files(draw: st.DrawFn) -> str:
    """The h100-sxm file with one figure (or the name, or a key) perturbed, as YAML text."""
    data = json.loads(json.dumps(DEVICE))
    action = draw(st.sampled_from(["figure", "figure", "name", "drop", "unknown"]))
    if action == "figure":
        spec = data
        *path, last = draw(st.sampled_from(DEVICE_FIGURES)).split(".")
        for part in path:
            spec = spec.setdefault(part, {})
        value = draw(
            st.sampled_from([1.0e-300, 0.0, -1.0, 1e300, 312.0, 1e6, 1e25, "1e12", True, None, [], 2**70])
        )
        if isinstance(spec.get(last), dict):
            spec[last]["value"] = value
        else:
            spec[last] = value
    elif action == "name":
        data["name"] = draw(st.sampled_from(["", "UPPER", "../x", "x" * 100, 5]))
    elif action == "drop":
        data.pop(draw(st.sampled_from(sorted(data))))
    else:
        data[draw(st.sampled_from(["peak", "memory", "x"]))] = 1
    return yaml.safe_dump(data)


# --- the Python API ---------------------------------------------------------------------------------------------

WRONG = (None, 5, -1, 0, 1.5, float("inf"), float("nan"), True, "", "x", b"gpt2", [], [5], {}, {"foo": 2},
         {5: 1}, 10**40, 10**1000, object(), ("gpt2",), iter(int, 1))  # fmt: skip


@st.composite
def api_calls(draw: st.DrawFn) -> tuple[str, Callable[[Any], Any]]:
    """(a description, a call taking the embedcalc module) with one argument of a wrong type or size."""
    verb = draw(st.sampled_from(["load", "analyze", "compare", "sweep"]))
    bad = draw(st.sampled_from(WRONG))
    arg = draw(st.sampled_from({
        "load": ["target", "overrides"],
        "analyze": ["config", "workload", "batch_size", "seq_len", "tgt_len", "dtype", "mode", "parallel",
                    "gen_tokens", "optimizer", "recompute", "attention", "nonsense"],
        "compare": ["configs", "seq_len"],
        "sweep": ["seq_len", "batch_size", "embed_dim", "num_heads", "num_layers", "ffn_dim", "workload"],
    }[verb]))  # fmt: skip
    if bad is WRONG[-1]:  # an endless iterator: a fresh one per call
        bad = iter(int, 1)
    if verb == "load":
        if arg == "target":
            return f"load({bad!r:.40})", lambda e: e.load(bad)
        return f"load(gpt2, overrides={bad!r:.40})", lambda e: e.load("gpt2", overrides=bad)
    if verb == "compare":
        if arg == "configs":
            return f"compare({bad!r:.40})", lambda e: e.compare(bad)
        return f"compare(seq_len={bad!r:.40})", lambda e: e.compare(["gpt2", "bert-base"], seq_len=bad)
    if arg in ("config",):
        return f"analyze({bad!r:.40})", lambda e: e.analyze(bad)
    return f"{verb}(gpt2, {arg}={bad!r:.40})", lambda e: getattr(e, verb)("gpt2", **{arg: bad})


def run_api(description: str, call: Callable[[Any], Any]) -> Outcome:
    """The API's invariant as an Outcome: a return is exit 0, the package's error its exit code, anything else an
    uncaught exception (a violation)."""
    import embedcalc

    start = time.perf_counter()
    try:
        with time_bound(IN_PROCESS_TIMEOUT_S):
            call(embedcalc)
    except CaseTimeout as exc:
        return Outcome([description], -1, "", "", exc, time.perf_counter() - start, timed_out=True)
    except embedcalc.EmbedcalcError as exc:
        return Outcome([description], int(exc.exit_code), "", exc.message, None, time.perf_counter() - start)
    except Exception as exc:  # the violation: a raw TypeError, AttributeError, ...
        return Outcome([description], 1, "", repr(exc), exc, time.perf_counter() - start)
    return Outcome([description], 0, "", "", None, time.perf_counter() - start)
