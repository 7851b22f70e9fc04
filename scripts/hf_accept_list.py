"""Regenerate (or with --check, verify) the data embedcalc derives from transformers, for every ``model_type`` it
reads (``embedcalc.sources.hf.registry.FAMILIES``):

- ``embedcalc/sources/hf/accept_list.json``: what each family's configuration class (and each class it nests in
  ``sub_configs``, such as DBRX's ``attn_config``) declares and writes: ``params`` (its ``__init__`` parameters,
  with their ``defaults`` where a default is a JSON value), ``written`` (what ``to_dict()`` writes beyond
  ``PreTrainedConfig``'s keys, ``base``), ``derived`` (written keys that are no parameter, each ``recomputed``,
  ``unread`` or ``read``), ``feeds`` (the other written keys a parameter changes on load) and ``attribute_map``;
- ``embedcalc/sources/hf/modeling_reads.json``: what each family's modeling code, and transformers' shared modules,
  read off a config object (plain reads, and ``getattr`` reads with their literal fallbacks).

Both come from :mod:`embedcalc.sources.hf.derive` (the same code the run-time consult of an installed transformers
uses), and record the transformers version they come from: generate them from the newest release. ``--check``
regenerates both with the installed transformers and fails when either would change beyond the version it
records: a newer transformers that adds a key, a family or a read fails it until the files are regenerated.

    python scripts/hf_accept_list.py            # rewrite both files from the installed transformers
    python scripts/hf_accept_list.py --check    # exit 1 (with a diff) when a file is not what it would write
    python scripts/hf_accept_list.py --version  # the transformers version the files were generated from
"""

from __future__ import annotations

import difflib
import json
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from embedcalc.sources.hf import derive  # noqa: E402

OUTPUT = ROOT / "embedcalc" / "sources" / "hf" / "accept_list.json"
READS = ROOT / "embedcalc" / "sources" / "hf" / "modeling_reads.json"


def _classes() -> dict[str, type]:
    """model_type -> the transformers configuration class of every supported family that has one."""
    transformers = derive.quiet_import()
    from embedcalc.sources.hf.registry import CONFIG_TYPE, FAMILIES, REMOTE_CODE

    mapping = transformers.CONFIG_MAPPING
    return {t: mapping[CONFIG_TYPE.get(t, t)] for t in sorted(set(FAMILIES) - REMOTE_CODE)}


def generate_reads() -> dict[str, Any]:
    """modeling_reads.json as the installed transformers' source defines it."""
    transformers = derive.quiet_import()
    return {
        "transformers_version": transformers.__version__,
        "generated_by": "scripts/hf_accept_list.py",
        "shared": derive.shared_reads(),
        "families": {t: derive.modeling_reads(cls) for t, cls in _classes().items()},
    }


def generate(reads: dict[str, Any] | None = None) -> dict[str, Any]:
    """accept_list.json as the installed transformers' configuration classes define it."""
    transformers = derive.quiet_import()
    reads = reads if reads is not None else generate_reads()
    base_params = derive.params(transformers.PretrainedConfig)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base_written = set(transformers.PretrainedConfig().to_dict())
    shared = derive.all_reads(reads["shared"])
    families = {t: derive.class_entry(cls, base_written, shared | derive.all_reads(reads["families"][t]["modeling"]))
                for t, cls in _classes().items()}  # fmt: skip
    return {
        "transformers_version": transformers.__version__,
        "generated_by": "scripts/hf_accept_list.py",
        "base": {"class": transformers.PretrainedConfig.__name__, "params": sorted(base_params),
                 "written": sorted(base_written)},
        "families": families,
        # older names of layer types every configuration class renames on load (configuration_utils'
        # remap_legacy_layer_types: "deepseek_sparse_attention" is "indexed_attention")
        "layer_type_renames": dict(getattr(transformers.configuration_utils, "_LEGACY_LAYER_TYPE_REMAP", {})),
        # the model types and classes whose checkpoints transformers renames or converts on load
        # (conversion_mapping.py; every model also gets the "legacy" renamings): verify --checkpoint applies them
        "weight_conversions": derive.weight_conversions(),
    }  # fmt: skip


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _recorded() -> str:
    return str(json.loads(OUTPUT.read_text(encoding="utf-8"))["transformers_version"])


def _stale(path: Path, data: dict[str, Any]) -> bool:
    """Whether ``path`` differs from ``data`` in anything but the transformers version it records (a newer release
    that changes nothing the files hold leaves them current); prints the diff."""
    current = path.read_text(encoding="utf-8") if path.is_file() else ""
    recorded = json.loads(current)["transformers_version"] if current else data["transformers_version"]
    text = render(data | {"transformers_version": recorded})
    if current == text:
        return False
    diff = difflib.unified_diff(
        current.splitlines(), text.splitlines(), str(path), "regenerated", lineterm=""
    )
    print("\n".join(list(diff)[:200]))
    print(f"{path.relative_to(ROOT)} is stale: run `python scripts/hf_accept_list.py`", file=sys.stderr)
    return True


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(_recorded())
        return 0
    if argv not in ([], ["--check"]):
        print("usage: python scripts/hf_accept_list.py [--check | --version]", file=sys.stderr)
        return 2
    from packaging.version import Version

    installed = derive.quiet_import().__version__
    if Version(installed) < Version(_recorded()):
        print(f"transformers {installed} is older than {_recorded()}, which the files were generated from: "
              f"{'check' if argv else 'generate'} them with {_recorded()} or newer", file=sys.stderr)  # fmt: skip
        return 1
    reads = generate_reads()
    data = generate(reads)
    if argv == ["--check"]:
        stale = [_stale(path, d) for path, d in ((OUTPUT, data), (READS, reads))]
        return 1 if any(stale) else 0
    OUTPUT.write_text(render(data), encoding="utf-8")
    READS.write_text(render(reads), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
