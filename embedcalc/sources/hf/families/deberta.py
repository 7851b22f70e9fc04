"""DeBERTa-v2 / v3 (``deberta-v2``, DebertaV2Model, AutoModel): BERT's post-norm blocks with disentangled attention.

DebertaV2Embeddings: a token table (``embedding_size`` wide, default hidden_size), a learned position table only
when ``position_biased_input`` (v3 and v2-xlarge: false), a segment table when ``type_vocab_size`` > 0, a bias-free
``embed_proj`` when embedding_size != hidden_size, then LayerNorm. DebertaV2Encoder: with ``relative_attention`` one
``rel_embeddings`` table of 2 x att_span rows (att_span = ``position_buckets`` when positive, else
``max_relative_positions``, else max_position_embeddings), LayerNorm-ed when ``norm_rel_ebd`` says ``layer_norm``;
each DisentangledSelfAttention adds the ``pos_att_type`` terms (c2p, p2c) and, unless ``share_att_key``, has a
biased pos_key_proj / pos_query_proj. No pooler (ContextPooler belongs to the classification heads). The
convolution layer (``conv_kernel_size`` > 0) is refused.
"""

from __future__ import annotations

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.families.encoders import bert_shape
from embedcalc.sources.hf.families.llama_like import refuse
from embedcalc.sources.hf.mappings import map_activation, map_dropout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader, Origin, yaml_hint

_TERMS = ("c2p", "p2c")


def _terms(r: KeyReader) -> list[str] | None:
    """pos_att_type as DebertaV2Config reads it: a ``|``-separated string or a list, lower-cased; None is none."""
    key, value, _ = r.value("pos_att_type")
    if value is None:
        return []
    items = [x.strip().lower() for x in value.split("|")] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) and x in _TERMS for x in items):
        r.problem(
            key, f"{key} = {value!r}: expected c2p, p2c or both ('p2c|c2p' or a list); {yaml_hint(r.family)}"
        )
        return None
    return items


# the keys DebertaV2Config reads beside relative_attention for the disentangled scores
_RELATIVE_KEYS = (
    "position_buckets",
    "max_relative_positions",
    "pos_att_type",
    "share_att_key",
    "norm_rel_ebd",
)


def _read_disentangled(r: KeyReader) -> None:
    """relative_attention and its keys -> the ``disentangled`` field (embedcalc.config.disentangled_spec)."""
    key, relative, _ = r.value("relative_attention")
    for name in _RELATIVE_KEYS:
        r.lookup(name)
    if relative is not True:
        r.ignore(
            "relative_attention", f"{relative!r}: no disentangled attention, BERT-style content scores only"
        )
        norm = r.raw.get("norm_rel_ebd", "none")
        if isinstance(norm, str) and "layer_norm" in [x.strip() for x in norm.lower().split("|")]:
            r.problem("norm_rel_ebd", f"norm_rel_ebd = {norm!r} with {key} false: DebertaV2Encoder still builds its "
                      "LayerNorm(hidden_size), unused, which embedcalc does not model; set norm_rel_ebd to 'none' "
                      "(the same model without those 2 x hidden_size parameters)")  # fmt: skip
        for name in _RELATIVE_KEYS:
            r.ignore(name, f"{key} is false: DebertaV2Encoder builds no relative-position table")
        return
    terms = _terms(r)
    buckets = r.raw.get("position_buckets", -1)
    distance = r.raw.get("max_relative_positions", -1)
    positions = r.raw.get("max_position_embeddings", r.family.defaults["max_position_embeddings"])
    share, norm = r.raw.get("share_att_key", False), r.raw.get("norm_rel_ebd", "none")
    for name, value in (("position_buckets", buckets), ("max_relative_positions", distance)):
        if not isinstance(value, int) or isinstance(value, bool):
            r.problem(name, f"{name} = {value!r} must be an integer (<= 0: unset)")
            return
    if not isinstance(share, bool) or not isinstance(norm, str) or terms is None:
        if not isinstance(share, bool):
            r.problem("share_att_key", f"share_att_key = {share!r} must be true or false")
        if not isinstance(norm, str):
            r.problem("norm_rel_ebd", f"norm_rel_ebd = {norm!r} must be a string ('layer_norm' or 'none')")
        return
    reach = distance if distance >= 1 else positions
    span = buckets if buckets > 0 else reach
    spec = dict(span=span, bucketed=buckets > 0, max_distance=reach, c2p="c2p" in terms, p2c="p2c" in terms,
                share_keys=share, norm="layer_norm" in [x.strip() for x in norm.lower().split("|")])  # fmt: skip
    origin: Origin = "file" if "relative_attention" in r.raw else "default"
    note = (f"a 2 x {span}-row table; terms {', '.join(t for t in _TERMS if t in terms) or 'none'}"
            f"{', the content q/k project it' if share else ''}{', LayerNorm-ed' if spec['norm'] else ''}")  # fmt: skip
    keys = ", ".join(k for k in ("relative_attention", "position_buckets", "max_relative_positions", "pos_att_type",
                                 "share_att_key", "norm_rel_ebd") if k in r.raw) or key  # fmt: skip
    r.put("disentangled", spec, keys, origin, note)


def _read_embeddings(r: KeyReader) -> None:
    """Positions (position_biased_input), segments, and embedding_size's projection."""
    key, biased, _ = r.value("position_biased_input")
    origin: Origin = "file" if key in r.raw else "default"
    r.put(
        "position",
        "learned" if biased is not False else "none",
        key,
        origin,
        "a learned position table" if biased is not False else "no absolute positions, relative ones only",
    )
    r.copy("type_vocab_size", "type_vocab_size")
    width, hidden = r.raw.get("embedding_size", MISSING), r.data.get("embed_dim")
    if width is MISSING or width == hidden:
        r.ignore("embedding_size", "equals hidden_size: no projection")
        return
    r.lookup("embedding_size")
    if biased is not False or r.data.get("type_vocab_size"):
        r.problem("embedding_size", f"embedding_size = {width!r} != hidden_size with position or segment tables "
                  f"at embedding_size before embed_proj is not modelled. {yaml_hint(r.family)}")  # fmt: skip
        return
    r.put("token_embed_dim", width, "embedding_size", "file", "a bias-free embed_proj to hidden_size follows")


def _read_deberta_v2(r: KeyReader) -> None:
    for name, value in (("architecture", "encoder"), ("norm", "layernorm"), ("norm_placement", "post"),
                        ("embedding_norm", True), ("bias", True), ("pooler", False), ("lm_head", False)):  # fmt: skip
        r.fixed(name, value)
    bert_shape(r)
    if r.has("attention_head_size"):
        r.copy("attention_head_size", "head_dim")
    _read_embeddings(r)
    _read_disentangled(r)
    map_activation(r, "hidden_act", gated=False)
    map_dropout(r, "hidden_dropout_prob")
    r.ignore("attention_probs_dropout_prob", hf_keys.dropout_reason("hidden_dropout_prob"))
    refuse(r, "conv_kernel_size", (0,), "DeBERTa's convolution layer after the first block (ConvLayer)")
    conv = isinstance(r.raw.get("conv_kernel_size"), int) and r.raw["conv_kernel_size"] > 0
    for name in ("conv_groups", "conv_act"):
        if not conv:
            r.ignore(name, "conv_kernel_size is 0: no convolution layer")
    for name in ("pooler_dropout", "pooler_hidden_act", "pooler_hidden_size", "legacy"):
        r.ignore(name, "configures a task head (ContextPooler, the MLM head); DebertaV2Model has none")


FAMILIES = (
    Family("deberta-v2", "DebertaV2Config", "DebertaV2Model (AutoModel, no pooler)", "deberta-v3-base",
           dict(vocab_size=128100, hidden_size=1536, num_hidden_layers=24, num_attention_heads=24,
                intermediate_size=6144, hidden_act="gelu", hidden_dropout_prob=0.1, max_position_embeddings=512,
                type_vocab_size=0, relative_attention=False, max_relative_positions=-1, position_biased_input=True,
                pos_att_type=None), _read_deberta_v2),
)  # fmt: skip
