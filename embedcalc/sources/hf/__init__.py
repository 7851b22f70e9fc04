"""Hugging Face ``config.json`` -> embedcalc config, family by family, with a report of every key's fate.

A file is a Hugging Face config when it has a ``model_type`` (embedcalc's own schema has no such key). Each
supported family maps the keys that decide the cost onto embedcalc fields, fills the keys the file leaves out
with the defaults of transformers' own config class (``LlamaConfig`` ...), and classifies every other key as
harmless with a reason (:mod:`embedcalc.sources.hf.keys`). A key that is neither mapped nor known to be harmless
is an error: it might change the model.

What an imported config counts as (the counting rule): encoders as transformers' ``AutoModel`` (the backbone with
its default pooler: ``BertModel``, ``RobertaModel``, ``DistilBertModel``); decoders as ``AutoModelForCausalLM``
(``GPT2LMHeadModel``, ``OPTForCausalLM``, ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``)
and encoder-decoders as ``AutoModelForSeq2SeqLM`` (``T5ForConditionalGeneration``), LM head included and tied as
``tie_word_embeddings`` says. Every mapping here was checked against transformers' modeling code, and
``tests/sources/hf/test_hf.py`` checks the counts against models transformers builds from the same files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedcalc.config.dtypes import ALIASES
from embedcalc.config.limits import MAX_HF_LAYERS
from embedcalc.errors import ConfigError, Problem
from embedcalc.sources.hf.quantization import read_quantization
from embedcalc.sources.hf.reader import Family, HFReport, IgnoredKey, KeyReader, MappedKey
from embedcalc.sources.hf.registry import (
    FAMILIES,
    FORWARDED,
    MULTIMODAL_TEXT,
    OUTER_TIE,
    REFUSED,
    TEXT_WITHOUT_POOLER,
)
from embedcalc.sources.hf.unsupported import flat_text_config, unsupported_family

__all__ = ["FAMILIES", "HFMapping", "HFReport", "IgnoredKey", "MappedKey", "is_hf_config", "map_hf_config"]


@dataclass(frozen=True)
class HFMapping:
    """The canonical embedcalc mapping of a Hugging Face config, ready for validation."""

    data: dict[str, Any]
    user_keys: dict[str, str]  # field -> the Hugging Face key it came from (error messages name it)
    report: HFReport


# Keys only Hugging Face files have (embedcalc's schema needs `architecture`, which they never have).
_HF_ONLY = frozenset({"architectures", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
                      "type_vocab_size", "n_layer", "n_embd", "n_positions", "d_kv", "d_ff", "hidden_act",
                      "n_layers", "hidden_dim", "transformers_version", "torch_dtype", "layer_norm_eps"})  # fmt: skip


def is_hf_config(raw: Mapping[Any, Any]) -> bool:
    """Whether a parsed file is a Hugging Face ``config.json``: it has a ``model_type``, or (older uploads such as
    bert-tiny) no ``architecture`` and at least two keys only Hugging Face files have."""
    if "model_type" in raw:
        return True
    return "architecture" not in raw and len(_HF_ONLY & {k for k in raw if isinstance(k, str)}) >= 2


def _guess_family(raw: Mapping[str, Any]) -> str:
    """The family a file without model_type looks like: its architectures' class names, else its key set."""
    classes = raw.get("architectures")
    if isinstance(classes, list):
        for cls in classes:
            for model_type, family in FAMILIES.items():
                prefix = family.config_class.removesuffix("Config")
                if (
                    isinstance(cls, str)
                    and cls.startswith(prefix)
                    and cls[len(prefix) : len(prefix) + 1].isupper()
                ):
                    return model_type
    keys = set(raw)
    rules = (({"n_embd", "n_layer"}, "gpt2"), ({"d_kv", "d_ff"}, "t5"), ({"dim", "n_layers", "hidden_dim"},
             "distilbert"), ({"word_embed_proj_dim"}, "opt"), ({"num_key_value_heads"}, "llama"),
             ({"rms_norm_eps"}, "llama"), ({"type_vocab_size"}, "bert"))  # fmt: skip
    for needed, model_type in rules:
        if needed <= keys:
            if model_type == "bert" and raw.get("pad_token_id") == 1:
                return "roberta"
            return model_type
    return "bert" if "hidden_size" in keys else "llama"


def _no_model_type(raw: Mapping[str, Any], origin: str) -> ConfigError:
    guess = _guess_family(raw)
    message = (
        f"{origin}: this looks like a Hugging Face config.json without a model_type (older uploads such as "
        f'bert-tiny have none); it looks like {guess}: add "model_type": "{guess}" to a copy of the file '
        f"(families embedcalc reads: {', '.join(FAMILIES)})"
    )
    return ConfigError(message, [Problem("model_type", message, "hf_no_model_type")], "hf_no_model_type")


def _unsupported(model_type: Any, origin: str, raw: Mapping[str, Any]) -> ConfigError:
    return unsupported_family(model_type, origin, raw)


def _name(raw: Mapping[str, Any], path: Path | None) -> str | None:
    name = raw.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip()
    if path is None:
        return None
    if path.parent.parent.name == "snapshots" and path.parents[2].name.startswith("models--"):
        return path.parents[2].name.removeprefix("models--").replace("--", "/", 1)  # the hub cache: ORG/NAME
    return path.parent.name if path.name == "config.json" and path.parent.name else path.stem


def map_hf_config(raw: Mapping[str, Any], origin: str, path: Path | None = None) -> HFMapping:
    """Map a Hugging Face config onto embedcalc's fields; raise ConfigError listing every problem."""
    if "model_type" not in raw:
        raise _no_model_type(raw, origin)
    model_type = raw.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    text = raw.get("text_config")
    # a model_type that is not a string (an array, a number: a hand-edited or fuzzed file) is no family's, outer or
    # inner: it reaches unsupported_family, which names the field, instead of a dict lookup of an unhashable value
    inner_type = text.get("model_type") if isinstance(text, Mapping) else None
    if (
        family is None
        and isinstance(model_type, str)
        and model_type not in REFUSED  # a wrapper that changes its text model (Gemma 4's assistant)
        and isinstance(inner_type, str)
        and inner_type in FAMILIES
    ):
        assert isinstance(text, Mapping)  # inner_type is a str only when text is a mapping
        return _map_text_model(raw, text, origin, path)
    if family is None and isinstance(model_type, str) and model_type in MULTIMODAL_TEXT and text is None:
        inner = flat_text_config(raw, MULTIMODAL_TEXT[model_type])
        return _map_text_model(raw, inner, origin, path, frozenset(inner))
    if family is None:
        raise _unsupported(model_type, origin, raw)
    _refuse_deep_stacks(raw, family, origin)
    reader = KeyReader(raw, family)
    family.read(reader)
    _read_dtype(reader, raw)
    name = _name(raw, path)
    if name is not None:
        reader.consumed.add("_name_or_path")
        reader.put("name", name, "_name_or_path" if "_name_or_path" in raw else "(file name)", "file")
    reader.classify_rest()
    if reader.problems:  # only problems the general reader takes over (an unbalanced T5Gemma, a key only
        # transformers' shared modules read: MiMo-V2-Flash's attention_chunk_size): its code
        handed = all(p.code in ("hf_refused_family", "hf_shared_read_key") for p in reader.problems)
        raise _refusal(
            origin, family.model_type, reader.problems, "hf_refused_family" if handed else "invalid_config"
        )
    head = ""
    if reader.data.get("lm_head"):
        head = ", LM head tied" if reader.data.get("tie_embeddings", True) else ", LM head untied"
    report = HFReport(
        family.model_type, family.counted_as + head, reader.mapped, reader.ignored, reader.notes
    )
    return HFMapping(reader.data, reader.user_keys, report)


_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_decoder_layers", "decoder_layers",
               "encoder_layers", "num_encoder_layers")  # fmt: skip


def _refuse_deep_stacks(raw: Mapping[str, Any], family: Family, origin: str) -> None:
    """ConfigError naming each layer-count key (or an alias of one) above :data:`MAX_HF_LAYERS`."""
    aliases = {alias for alias, target in family.attribute_map.items() if target in _LAYER_KEYS}
    problems = []
    for key in (*_LAYER_KEYS, *sorted(aliases)):
        value = raw.get(key)
        if type(value) is int and value > MAX_HF_LAYERS:
            digits = len(str(value)) if value < 10**40 else "over 40"
            message = (f"{key} = an integer of {digits} digits: a Hugging Face config is read with at most "
                       f"{MAX_HF_LAYERS:,} layers (its layer patterns are expanded layer by layer); for a deeper "
                       "stack write the model in embedcalc's own YAML, where layers are runs")  # fmt: skip
            problems.append(Problem(key, message, "hf_too_many_layers"))
    if problems:
        raise _refusal(origin, family.model_type, problems, "hf_too_many_layers")


def _refusal(
    origin: str, model_type: str, problems: list[Problem], code: str = "invalid_config"
) -> ConfigError:
    """One problem: one line naming the key; several: one line each under the file's name."""
    lines = [p.message if p.message.startswith(p.path) else f"{p.path}: {p.message}" for p in problems]
    if len(lines) == 1:
        return ConfigError(f"{origin}: {lines[0]}", problems, code)
    listed = "".join(f"\n  {line}" for line in lines)
    return ConfigError(f"{origin}: {len(lines)} problems in this {model_type} config{listed}", problems, code)


def _read_dtype(reader: KeyReader, raw: Mapping[str, Any]) -> None:
    """The checkpoint's dtype as the config's ``dtype``: its ``quantization_config`` when it names a format
    embedcalc counts (fp8, mxfp4, nvfp4: :mod:`embedcalc.sources.hf.quantization`, which also says which matrices
    it covers), else ``torch_dtype`` (transformers 4) or ``dtype`` (transformers 5 writes this name)."""
    quant = raw.get("quantization_config")
    if isinstance(quant, Mapping) and read_quantization(reader, quant):
        return
    for key in ("dtype", "torch_dtype"):
        value = raw.get(key)
        if isinstance(value, str) and value in ALIASES:
            reader.consumed.add(key)
            reader.put("dtype", ALIASES[value], key, "file")
            return


def _map_text_model(
    raw: Mapping[str, Any],
    text: Mapping[str, Any],
    origin: str,
    path: Path | None,
    moved: frozenset[str] = frozenset(),
) -> HFMapping:
    """A multimodal file (LLaVA, Qwen2-VL, Gemma 3, ...) whose ``text_config`` is a supported family: counted as
    that text model; the vision tower and projector are not counted, and the report says so."""
    inner = dict(text)
    if "_name_or_path" not in inner and isinstance(raw.get("_name_or_path"), str):
        inner["_name_or_path"] = raw["_name_or_path"]
    outer_tie = raw.get("tie_word_embeddings")
    outer_rule = OUTER_TIE.get(str(raw.get("model_type")))
    forwarded = outer_rule is not None or (isinstance(outer_tie, bool) and "tie_word_embeddings" not in inner)
    if outer_rule is not None:
        # the outer config ties the head (transformers 5): the file's value, else the class default; some classes
        # also honour a pre-5 text_config's true (OUTER_TIE)
        default, honours_text = outer_rule
        either = honours_text and inner.get("tie_word_embeddings") is True
        inner["tie_word_embeddings"] = (outer_tie if isinstance(outer_tie, bool) else default) or either
    elif forwarded:
        inner["tie_word_embeddings"] = outer_tie
    passed = [k for k in FORWARDED.get(str(raw.get("model_type")), ()) if k in raw]
    inner |= {k: raw[k] for k in passed}  # outer keys the text model reads (Mllama's vision_config)
    mapping = map_hf_config(inner, f"{origin} (text_config)", path)
    if raw.get("model_type") in TEXT_WITHOUT_POOLER and mapping.data.get("pooler"):
        mapping = _without_pooler(mapping, str(raw.get("model_type")))
    text_prefix = "text_config." if "text_config" in raw else ""

    def prefix(key: str) -> str:
        return "" if key.split(".")[0].split(" ")[0] in passed else text_prefix

    read = {"text_config", "model_type", *moved, *passed}
    read |= {"tie_word_embeddings"} if forwarded and "tie_word_embeddings" in raw else set()
    others = sorted(k for k in raw if k not in read)
    note = (
        f"a {raw.get('model_type')!r} multimodal file: counted as its text model, "
        f"{'text_config' if 'text_config' in raw else 'the text keys at top level'} "
        f"({mapping.report.family}); the vision / audio towers and projector ({', '.join(others[:6])}"
        f"{', ...' if len(others) > 6 else ''}) are not counted"
    )
    report = HFReport(
        mapping.report.family,
        mapping.report.counted_as + ", text model of a multimodal file",
        [MappedKey(prefix(m.key) + m.key, m.field, m.value, m.origin, m.note) for m in mapping.report.mapped],
        [IgnoredKey(prefix(i.key) + i.key, i.value, i.reason, i.warn) for i in mapping.report.ignored]
        + [IgnoredKey(k, raw[k], "outside the text model: not counted") for k in others],
        [*mapping.report.notes, note],
    )
    return HFMapping(mapping.data, mapping.user_keys, report)


def _without_pooler(mapping: HFMapping, wrapper: str) -> HFMapping:
    """The text encoder of a wrapper that builds it with ``add_pooling_layer=False`` (Grounding DINO's BERT): the
    same mapping without the pooler, the report saying why."""
    note = f"{wrapper} builds its text backbone with add_pooling_layer=False: no pooler"
    mapped = [m for m in mapping.report.mapped if m.field != "pooler"]
    mapped.append(MappedKey("model_type", "pooler", False, "family", note))
    report = HFReport(mapping.report.family, mapping.report.counted_as.replace("with pooler", "no pooler"), mapped,
                      mapping.report.ignored, mapping.report.notes)  # fmt: skip
    return HFMapping(mapping.data | {"pooler": False}, mapping.user_keys | {"pooler": "model_type"}, report)
