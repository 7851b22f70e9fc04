"""How much of the installed transformers embedcalc reads, and by which path (issue 31, DESIGN §19).

    python scripts/hf_coverage.py                  # summary: native / general reader / refused, per kind
    python scripts/hf_coverage.py --json OUT.json  # and every file's row (path, class, params, reason)
    python scripts/hf_coverage.py --cross-check    # also count natively read files through transformers: miscounts
    python scripts/hf_coverage.py --only llama,mamba
    python scripts/hf_coverage.py --shard 1/2 --json a.json & python scripts/hf_coverage.py --shard 2/2 --json b.json
    python scripts/hf_coverage.py --rows a.json b.json   # the summary of rows written before
    python scripts/hf_coverage.py --files DIR --cross-check   # config.json files of your own (published ones)
    python scripts/hf_coverage.py --counter-check --only rwkv,xlstm --seq-len 128   # FLOP counters side by side

The files are transformers' own default configs: for every ``model_type`` of ``CONFIG_MAPPING``, the ``to_dict()``
of its config class (what ``save_pretrained`` writes). In scope are the text models and text backbones:

- **text**: a model_type with a causal-LM, masked-LM or seq2seq-LM class (``AutoModelForCausalLM``,
  ``AutoModelForMaskedLM``, ``AutoModelForSeq2SeqLM`` mappings), or a base model (``AutoModel``) whose default
  config has a ``vocab_size`` (a text backbone: embedding encoders, ``*_text`` sub-configs);
- **multimodal**: a model_type whose config class has a ``text_config`` sub-config: the outer file and its
  ``text_config`` alone are two files (both are what people point embedcalc at).

Each file is read natively (``embedcalc.load``: a native family) or else by the general reader (transformers' own
class on the meta device, a forward of batch 1 x ``--seq-len`` tokens); a file neither reads is refused, with the
reason. ``--cross-check`` builds every natively read file with transformers too and compares the total parameters
(text model only, as the counting rule says): a difference is a miscount of one of the two paths.

``--files`` reads given ``config.json`` files (or every ``*.json`` of a folder) instead of transformers' defaults:
published files a reader was never shown (docs/concepts/huggingface.md: aiconfigurator's model list). A native read
is the API's (``embedcalc.load``); where it refuses, the general reader's count is what ``analyze`` would give.

``--counter-check`` also runs each file's meta forward (transformers' class, batch 1 x ``--seq-len`` tokens) under
torch's ``FlopCounterMode`` and under the general reader's ``MetaFlopCounter`` (embedcalc/modeling/meta_flops.py),
one after the other in this process: whether their per-module counts are equal, and each one's seconds.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _scope() -> list[tuple[str, str, str]]:
    """(model_type, kind, which file: ``default`` or ``text_config``) for every file in scope."""
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto as m
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    text = set(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) | set(m.MODEL_FOR_MASKED_LM_MAPPING_NAMES)
    text |= set(m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    out = []
    for model_type in CONFIG_MAPPING_NAMES:
        try:
            cls = CONFIG_MAPPING[model_type]
        except (KeyError, ImportError):
            continue
        if "text_config" in getattr(cls, "sub_configs", {}):
            out += [(model_type, "multimodal", "default"), (model_type, "multimodal", "text_config")]
        elif model_type in text:
            out.append((model_type, "text", "default"))
        elif model_type in m.MODEL_MAPPING_NAMES:  # a base model only: in scope when it reads tokens
            try:
                vocab = getattr(AutoConfig.for_model(model_type), "vocab_size", None)
            except Exception:  # a default config transformers itself cannot build
                vocab = None
            if isinstance(vocab, int) and vocab > 0:
                out.append((model_type, "text", "default"))
    return out


def _given(paths: list[Path]) -> list[tuple[str, str, str]]:
    """(model_type, ``given``, path) for each config.json named, a folder standing for its ``*.json`` files."""
    files = sorted(f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p]))
    out = []
    for f in files:
        raw = json.loads(f.read_text(encoding="utf-8"))
        out.append((str(raw.get("model_type")) if isinstance(raw, dict) else "?", "given", str(f)))
    return out


def _file(model_type: str, which: str) -> dict[str, Any] | None:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    data = config.to_dict()
    if which == "text_config":
        text = data.get("text_config")
        if not isinstance(text, dict) or not isinstance(text.get("model_type"), str):
            return None
        return dict(text)
    return dict(data)


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def _read(raw: dict[str, Any], seq_len: int, cross_check: bool) -> dict[str, Any]:
    import embedcalc
    from embedcalc.analysis.workload import Workload
    from embedcalc.api.general import read_general

    row: dict[str, Any] = {}
    run = Workload(seq_len=seq_len)
    try:
        loaded = embedcalc.load(dict(raw))
        row |= {"path": "native", "params": embedcalc.analyze(loaded, run).params.total}
        if not cross_check:
            return row
    except embedcalc.ConfigError as exc:
        row |= {"native_refusal": exc.code, "native_message": exc.message.splitlines()[0][:300]}
    try:
        general = read_general(dict(raw), run=run)
    except embedcalc.EmbedcalcError as exc:
        return (
            row
            | ({} if "path" in row else {"path": "refused"})
            | {"general_refusal": exc.code, "general_message": exc.message[:300]}
        )
    counted = {"general_params": general.params.total, "class": general.class_name,
               "flops": general.flops is not None, "cache": general.cache is not None,
               "flops_error": general.flops_error}  # fmt: skip
    if "path" in row:  # native, cross-checked
        return row | counted | {"agree": row["params"] == general.params.total}
    return row | counted | {"path": "general", "params": general.params.total}


def _counter_check(raw: dict[str, Any], seq_len: int) -> dict[str, Any]:
    """The file's meta forward under FlopCounterMode and under MetaFlopCounter: equal counts, and each one's time."""
    from torch.utils.flop_counter import FlopCounterMode

    from embedcalc.modeling.hf_classes import build_meta_class, choose_class, hf_config, quiet
    from embedcalc.modeling.hf_forward import forward_inputs
    from embedcalc.modeling.meta_flops import MetaFlopCounter

    try:
        with quiet():
            config = hf_config(raw)
        class_name, _, architecture, build_from, _ = choose_class(config)
        model = build_meta_class(class_name, build_from).eval()
    except Exception:  # a file transformers does not build: no forward to compare
        return {"counter": "no forward"}
    counts, seconds = [], []
    for counter in (FlopCounterMode(display=False), MetaFlopCounter()):
        started = time.perf_counter()
        try:
            with counter, quiet():  # no no_grad: the reader runs without it (hf_meta)
                model(**forward_inputs(architecture, 1, seq_len, seq_len))
        except (
            Exception
        ):  # a forward that wants more than token ids, or values (the reader's FakeTensor path)
            return {"counter": "no forward"}
        seconds.append(time.perf_counter() - started)
        counts.append(counter.get_flop_counts())
    return {"counter": "equal" if counts[0] == counts[1] else "differ", "flop_counter_mode_s": seconds[0],
            "meta_flop_counter_s": seconds[1]}  # fmt: skip


def _counter_summary(rows: list[dict[str, Any]]) -> None:
    checked = [r for r in rows if "counter" in r]
    if not checked:
        return
    verdicts = Counter(r["counter"] for r in checked)
    print(
        "  counters: "
        + ", ".join(f"{k} {v}" for k, v in verdicts.most_common())
        + "".join(
            f"\n    differ: {r['model_type']} ({r['file']})" for r in checked if r["counter"] == "differ"
        )
    )
    timed = sorted(
        (r for r in checked if "meta_flop_counter_s" in r), key=lambda r: -r["flop_counter_mode_s"]
    )
    for r in timed[:5]:  # the slowest forwards: where the memo matters
        print(
            f"    {r['model_type']} ({r['file']}): FlopCounterMode {r['flop_counter_mode_s']:.2f} s, "
            f"MetaFlopCounter {r['meta_flop_counter_s']:.2f} s"
        )


def _cause(message: str) -> str:
    """A refusal's cause without the file it is about: the exception transformers raised, or the message's head."""
    tail = message.split("config: ", 1)[-1] if "refuses to build" in message else message
    return tail.split("(", 1)[0].split(": ", 1)[-1][:60] or "?"


def _summary(rows: list[dict[str, Any]], version: str, cross_check: bool) -> None:
    paths = Counter(r["path"] for r in rows)
    kinds = Counter((r["kind"], r["path"]) for r in rows)
    full = sum(1 for r in rows if r["path"] == "general" and r.get("flops") and r.get("cache"))
    read = paths["native"] + paths["general"]
    types = len({r["model_type"] for r in rows})
    print(f"transformers {version}: {len(rows)} files in scope ({types} model_types)")
    print(
        f"  read: {read} ({read / max(1, len(rows)):.1%}): native {paths['native']}, general reader "
        f"{paths['general']} (FLOPs and cache too: {full}); refused {paths['refused']}"
    )
    for kind in ("text", "multimodal", "given"):
        print(f"  {kind}: " + ", ".join(f"{p} {kinds[(kind, p)]}" for p in ("native", "general", "refused")))
    # a model_type is read when each of its files is (its default config and, multimodal, its text_config);
    # complete when each is native or the general reader counted FLOPs and cache too
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_type.setdefault(r["model_type"], []).append(r)
    read_types = sum(all(r["path"] != "refused" for r in rs) for rs in by_type.values())
    complete = sum(all(r["path"] == "native" or (r["path"] == "general" and r.get("flops") and r.get("cache"))
                       for r in rs) for rs in by_type.values())  # fmt: skip
    print(f"  model_types read: {read_types} of {types} ({read_types / max(1, types):.1%}); with FLOPs and cache "
          f"too: {complete} ({complete / max(1, types):.1%})")  # fmt: skip
    reasons = Counter(r.get("general_refusal") for r in rows if r["path"] == "refused")
    print("  refusals: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    causes = Counter(_cause(r.get("general_message") or "") for r in rows if r["path"] == "refused")
    print("  refusal causes: " + "; ".join(f"{k} ({v})" for k, v in causes.most_common(8)))
    failed = Counter((r.get("flops_error") or "").split(":")[0] for r in rows if r["path"] == "general")
    print(
        "  general reader without FLOPs/cache: " + ", ".join(f"{k} {v}" for k, v in failed.most_common() if k)
    )
    if cross_check:
        checked = [r for r in rows if r["path"] == "native" and "agree" in r]
        bad = [r for r in checked if not r["agree"]]
        print(f"  cross-check: {len(checked)} natively read files built by transformers too; {len(bad)} differ"
              + "".join(f"\n    {r['model_type']} ({r['file']}): native {r['params']:,}, transformers "
                        f"{r['general_params']:,}" for r in bad))  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every file's row here")
    parser.add_argument(
        "--cross-check", action="store_true", help="natively read files through transformers too"
    )
    parser.add_argument("--only", help="comma-separated model_types")
    parser.add_argument("--shard", help="K/N: every N-th file from the K-th (parallel runs)")
    parser.add_argument("--rows", type=Path, nargs="+", help="summarise rows written by --json instead")
    parser.add_argument(
        "--files", type=Path, nargs="+", help="config.json files or folders of them, not defaults"
    )
    parser.add_argument(
        "--counter-check", action="store_true", help="time and compare the two FLOP counters per file"
    )
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per file")
    args = parser.parse_args(argv)
    import transformers

    if args.rows:
        rows = [row for path in args.rows for row in json.loads(path.read_text(encoding="utf-8"))]
        _summary(rows, transformers.__version__, any("agree" in r for r in rows))
        return 0
    scope = _scope() if not args.files else _given(args.files)
    if args.only:
        wanted = set(args.only.split(","))
        scope = [s for s in scope if s[0] in wanted]
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        scope = scope[k - 1 :: n]
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    start = time.monotonic()
    for model_type, kind, which in scope:
        row: dict[str, Any] = {"model_type": model_type, "kind": kind, "file": which}
        signal.alarm(args.timeout)
        try:
            raw = _file(model_type, which) if kind != "given" else json.loads(Path(which).read_text("utf-8"))
            if raw is None:
                continue
            row |= _read(raw, args.seq_len, args.cross_check)
            if args.counter_check:
                row |= _counter_check(raw, args.seq_len)
        except _Timeout:
            row |= {"path": "refused", "general_refusal": "timeout"}
        except Exception as exc:  # transformers' default config itself fails: out of reach of both paths
            row |= {
                "path": "refused",
                "general_refusal": "no_default_config",
                "general_message": repr(exc)[:300],
            }
        finally:
            signal.alarm(0)
        rows.append(row)
        print(f"{model_type:40s} {which:12s} {row['path']:8s} {row.get('params', '')}", file=sys.stderr)
        if args.json:  # as it goes: a run cut short keeps what it read
            args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    _summary(rows, transformers.__version__, args.cross_check)
    _counter_summary(rows)
    print(f"  ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
