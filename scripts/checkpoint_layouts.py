"""``verify --checkpoint`` on every family embedcalc reads natively whose checkpoints transformers converts on load
(the model types of ``accept_list.json``'s ``weight_conversions``), each in its original layout at its default
shape: the checkpoints such families publish.

For each model type: its configuration class's default config, the class the general reader picks for it built on
the meta device, its state dict turned back into the original layout by transformers' own
``revert_weight_conversion`` (what ``save_pretrained`` writes: renamed, experts split per expert, ...), written as a
header-only safetensors file (``verify`` reads headers alone) beside the config, and verified in a fresh process.
One line per type: whether it agrees, the parameters stored and counted, whether transformers' mapping was applied,
and what disagrees. Needs torch and transformers; writes under a temporary folder.

    python scripts/checkpoint_layouts.py                 # every such family
    python scripts/checkpoint_layouts.py laguna step3p7  # these model types (a wrapper such as step3p7 too)
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# multimodal wrappers whose text model embedcalc reads natively and whose checkpoints transformers converts
WRAPPERS = ("mistral_large4", "step3p7", "qwen3_vl_moe", "glm4v_moe")
_BYTES = {"float32": ("F32", 4), "bfloat16": ("BF16", 2), "float16": ("F16", 2)}


def model_types() -> list[str]:
    """The natively read model types transformers converts on load, and the wrappers above."""
    from embedcalc.sources.hf.accept import weight_conversions
    from embedcalc.sources.hf.registry import FAMILIES

    return sorted(weight_conversions() & set(FAMILIES)) + list(WRAPPERS)


def write_original(model_type: str, directory: Path) -> tuple[str, int]:
    """The default model of ``model_type`` written to ``directory`` in its original layout, headers only; returns
    its class and how many stored names differ from the names transformers loads."""
    import transformers
    from transformers.core_model_loading import revert_weight_conversion

    from embedcalc.modeling.hf_classes import build_meta_class, choose_class, quiet

    with quiet():
        config = transformers.CONFIG_MAPPING[model_type]()
        name = choose_class(config)[0]
        model: Any = build_meta_class(name, config)  # a PreTrainedModel
        loaded = model.state_dict()
        stored = revert_weight_conversion(model, loaded)
    header: dict[str, Any] = {}
    offset = 0
    for key, tensor in stored.items():
        dtype, size = _BYTES.get(str(tensor.dtype).removeprefix("torch."), ("F32", 4))
        end = offset + size * tensor.numel()
        header[key] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, end]}
        offset = end
    directory.mkdir(parents=True, exist_ok=True)
    data = json.dumps(header).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(data)) + data)
    (directory / "config.json").write_text(json.dumps(config.to_dict() | {"architectures": [name]}))
    return name, sum(1 for key in stored if key not in loaded)


def verify(directory: Path) -> dict[str, Any]:
    """``embedcalc verify DIR --checkpoint --format json`` in a fresh process, summarised."""
    command = [
        sys.executable,
        "-m",
        "embedcalc",
        "verify",
        str(directory),
        "--checkpoint",
        "--format",
        "json",
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    try:
        check = json.loads(proc.stdout)["results"][0]
    except (ValueError, KeyError, IndexError):
        return {"exit": proc.returncode, "error": " ".join(proc.stderr.split())[:300]}
    unplaced = [e["tensor"] for e in check["extra"] if e["reason"].startswith("no component")]
    return {"exit": proc.returncode, "agree": check["agree"], "stored": check["stored_params"],
            "counted": check["analytic_params"],
            "converted": any("conversion mapping" in note for note in check["notes"]),
            "missing": check["missing"][:3], "shape_errors": [e["tensor"] for e in check["shape_errors"]][:3],
            "unplaced": unplaced[:3]}  # fmt: skip


def main(argv: list[str]) -> int:
    types = argv or model_types()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for model_type in types:
            try:
                name, renamed = write_original(model_type, Path(tmp) / model_type)
            except Exception as exc:  # transformers' own default config or class failing: said, not fatal
                print(f"{model_type}: not built ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
                continue
            result = verify(Path(tmp) / model_type)
            failed += not result.get("agree", False)
            print(f"{model_type} ({name}, {renamed} names stored otherwise): {result}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
