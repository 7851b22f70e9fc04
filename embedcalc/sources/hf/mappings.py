"""The mappings the Hugging Face families share, each from a config.json key (or a few) to embedcalc's fields through
the :class:`~embedcalc.sources.hf.reader.KeyReader` that records every key's fate: the activation (transformers'
ACT2FN names), partial rotary, biases, absolute and offset positions, dropout.
"""

from __future__ import annotations

from collections.abc import Mapping

from embedcalc.sources.hf import keys
from embedcalc.sources.hf.reader import MISSING, IgnoredKey, KeyReader, Origin, yaml_hint

# --- activations ------------------------------------------------------------------------------------------------

PLAIN_ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_accurate": "gelu_tanh",
    "silu": "silu",
    "swish": "silu",
    "relu2": "relu",  # squared ReLU (Nemotron, Arcee): the same matmuls; the element-wise estimate is ReLU's
}
GATED_ACTIVATIONS = {
    "silu": "swiglu",
    "swish": "swiglu",
    "gelu": "geglu",
    "gelu_new": "geglu",
    "gelu_fast": "geglu",
    "gelu_pytorch_tanh": "geglu",
    "gelu_python": "geglu",
}


LEARNED_ACTIVATIONS = {"xielu": "xielu"}
"""Activations with parameters of their own (xIELU's two scalars): accepted only by a family whose modules build
exactly one per FFN (Apertus), which passes them to :func:`map_activation`."""


def map_activation(
    reader: KeyReader, key: str, gated: bool, learned: Mapping[str, str] | None = None
) -> None:
    """Map an activation name of transformers' ACT2FN (only the element-wise estimate depends on which, unless it
    is one of the family's ``learned`` activations, whose parameters embedcalc counts)."""
    written, value, from_file = reader.value(key)
    table = GATED_ACTIVATIONS if gated else PLAIN_ACTIVATIONS | dict(learned or {})
    if not isinstance(value, str) or value not in table:
        kind = "gated FFN" if gated else "FFN"
        reader.problem(
            written,
            f"{written} = {value!r} is not an activation embedcalc models for a {kind}; known: "
            f"{', '.join(sorted(table))}. It changes only the element-wise estimate, so `--set activation=...` "
            "with the nearest one counts the same matmuls",
        )
        return
    note = "gated: act(gate) * up, three matrices" if gated else ""
    if value in (learned or {}):
        note = "learned: two scalars per FFN (alpha_p, alpha_n)"
    reader.put("activation", table[value], written, "file" if from_file else "default", note)


def floor_head_dim(reader: KeyReader) -> int | None:
    """``embed_dim // num_heads`` as transformers floors it, when both are mapped positive integers; None while
    either is missing or refused (a zero or negative count is the schema's problem to name, not a division here)."""
    heads, d = reader.data.get("num_heads"), reader.data.get("embed_dim")
    if type(heads) is int and type(d) is int and heads > 0 and d > 0:
        return d // heads
    return None


def default_head_dim(reader: KeyReader) -> int | None:
    """The head width mapped so far: ``head_dim`` when read, else :func:`floor_head_dim`."""
    head_dim = reader.data.get("head_dim")
    if head_dim:
        return head_dim if isinstance(head_dim, int) else None
    return floor_head_dim(reader)


def map_partial_rotary(reader: KeyReader, default: float, legacy: str | None = None) -> None:
    """Partial rotary: ``rotary_dim = int(head_dim * factor)`` as transformers' rotary embeddings compute it, with
    the factor at top level (files before transformers 5, under ``legacy`` in some) or inside ``rope_parameters``
    (transformers 5)."""
    key = "partial_rotary_factor"
    written, factor = reader.lookup(key)
    if factor is MISSING and legacy is not None:
        written, factor = reader.lookup(legacy)
    params_key, params = reader.lookup("rope_parameters")
    if factor is MISSING and isinstance(params, dict) and key in params:
        written, factor = f"{params_key}.{key}", params[key]
    origin: Origin = "default" if factor is MISSING else "file"
    if factor is MISSING:
        written, factor = key, default
    if params is not MISSING:
        reader.ignored.append(IgnoredKey(params_key, params, keys.ROPE + f" ({key} mapped as rotary_dim)"))
    head_dim = default_head_dim(reader)
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not 0 < factor <= 1:
        reader.problem(written, f"{written} = {factor!r} must be a number in (0, 1]")
        return
    if head_dim is None or factor == 1:
        return
    reader.put("rotary_dim", int(head_dim * factor), written, origin, f"int(head_dim {head_dim} * {factor})")


def map_biases(reader: KeyReader, **sources: bool | str) -> None:
    """Bias flags ``qkv`` / ``out`` / ``ffn``: a bool is fixed by the family's modules, a string is the key of
    the file that says (with transformers' default when absent)."""
    for part, source in sources.items():
        if isinstance(source, bool):
            reader.fixed(f"{part}_bias", source)
        else:
            reader.copy(source, f"{part}_bias")


def expect_absolute_positions(reader: KeyReader) -> None:
    """``position_embedding_type`` of the BERT family: ``absolute`` is the learned table; ``relative_key`` /
    ``relative_key_query`` are distance embeddings older transformers built; any other type (Jina v2's ``alibi``,
    Jina v3's ``rotary``) comes from the file's remote code, never from transformers' class."""
    written, value = reader.lookup("position_embedding_type")
    if value is MISSING or value in ("relative_key", "relative_key_query") or value == "absolute":
        reader.expect(
            "position_embedding_type", ("absolute",), "older transformers built distance embeddings for it"
        )
        return
    auto = reader.raw.get("auto_map")
    named = (
        ", ".join(sorted({str(v).rsplit(".", 1)[-1] for v in auto.values()}))
        if isinstance(auto, dict)
        else ""
    )
    source = f"its remote code ({named}, in auto_map)" if named else "remote code"
    reader.problem(
        written,
        f"{written} = {value!r} is not a position type of transformers' {reader.family.config_class}: it comes from "
        f"{source}, which embedcalc does not run or count (it counts transformers' own class, which has no such "
        f"positions). {yaml_hint(reader.family)}",
    )


def map_offset_positions(reader: KeyReader, offset: int, offset_key: str, why: str) -> None:
    """A learned position table numbered from ``offset`` (fairseq's make_positions: RoBERTa's padding_idx + 1,
    MPNet's fixed 2): its max_position_embeddings rows serve max_position_embeddings - offset tokens. ``offset_key``
    is the key that sets the offset (``model_type`` when the family fixes it), ``why`` how it is computed."""
    rows_key, rows, rows_in_file = reader.value("max_position_embeddings")
    origin: Origin = "file" if rows_in_file else "default"
    fixed = offset_key == "model_type"
    if isinstance(rows, int) and not isinstance(rows, bool):
        note = f"{rows_key} {rows} - {why}: the table's first {offset} rows are never used"
        reader.put(
            "max_seq_len", rows - offset, rows_key if fixed else f"{rows_key}, {offset_key}", origin, note
        )
    else:
        reader.put("max_seq_len", rows, rows_key, origin)
    offset_origin: Origin = "family" if fixed else "file" if offset_key in reader.raw else "default"
    reader.put("position_offset", offset, offset_key, offset_origin,
               f"{why}: the table has max_seq_len + {offset} rows")  # fmt: skip


def map_dropout(reader: KeyReader, key: str) -> None:
    reader.copy(
        key, "dropout", lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
    )


# --- a family ---------------------------------------------------------------------------------------------------
