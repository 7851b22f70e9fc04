"""T5Gemma (T5GemmaForConditionalGeneration; Zhang et al. 2025, "Encoder-Decoder Gemma", arXiv:2504.06225):
Gemma 2's layers (sandwich RMSNorms used as 1 + w, GeGLU MLP, RoPE, GQA with an explicit head_dim, soft-capping,
sliding and global layers by ``layer_types``) in an encoder and a decoder, transformers' ``modeling_t5gemma.py``.

The file nests one ``T5GemmaModuleConfig`` per stack (``encoder``, ``decoder``). What the model builds from them:

- each stack its own token table (``T5GemmaEncoder.embed_tokens``, ``T5GemmaDecoder.embed_tokens``: embedcalc's
  ``decoder_token_table``), scaled by sqrt(hidden_size) (a buffer), and its own final norm;
- decoder layers add cross-attention (``T5GemmaCrossAttention``: q and o on the decoder's width, k and v from
  ``cross_attention_hidden_size``, which ``T5GemmaConfig`` sets to the encoder's width) between
  ``pre_cross_attn_layernorm`` and ``post_cross_attn_layernorm``: the sandwich placement's two norms per sublayer;
- the LM head (``T5GemmaLMHead.out_proj``, no bias) tied to the decoder's table when the outer
  ``tie_word_embeddings`` is true (the sub-configs' own are not read);
- the decoder's sliding layers keep ``sliding_window`` tokens in their self-attention cache; cross-attention is
  never windowed (``_prepare_cache_for_generation`` forces a full cache). The encoder's windows are a bidirectional
  mask over the full score matrix: they change no count, and are kept as the encoder's ``layers``.

**Decision (balanced stacks only).** embedcalc's encoder-decoder has one width, head layout, FFN width and
vocabulary for both stacks. A file whose stacks differ in any of them (the published 9B-2B "unbalanced" checkpoint:
a Gemma 2 9B encoder, a 2B decoder) is refused with ``hf_refused_family``, which hands it to the general reader
(transformers' own class on the meta device, DESIGN §19) with a line saying why. Depth, windows and sliding
patterns may differ per stack (``num_decoder_layers``, ``decoder_layout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embedcalc.errors import Problem
from embedcalc.sources.hf import accept
from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.families.gemma import read_common
from embedcalc.sources.hf.layered import FULL, SLIDING, layer_types, runs
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader, MappedKey, Origin, yaml_hint

_STACKS = ("encoder", "decoder")
# T5GemmaModuleConfig's defaults (transformers 5.24 / 5.25: the Gemma 2 2B shape)
_MODULE_DEFAULTS: dict[str, Any] = dict(
    vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
    num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
    tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, sliding_window=4096,
)  # fmt: skip
_MODULE = Family("t5_gemma_module", "T5GemmaModuleConfig", "T5GemmaEncoder / T5GemmaDecoder", "t5-small",
                 _MODULE_DEFAULTS, lambda r: None)  # fmt: skip
_SUB_IGNORED = {
    "is_decoder": "T5GemmaConfig sets it per stack (false for the encoder, true for the decoder)",
    "cross_attention_hidden_size": "T5GemmaConfig sets it to encoder.hidden_size, which its k and v projections read",
    "use_cache": "T5GemmaConfig forces the decoder's cache on; a runtime switch",
    "dropout_rate": "T5GemmaConfig overwrites it with its own dropout_rate; no parameters or matmul FLOPs",
    "model_type": "the nested config's own model_type (t5_gemma_module); " + hf_keys.METADATA,
}
# the stacks must agree on these (embedcalc's encoder-decoder has one shape): field -> the sub-config's key
_SHARED = {"vocab_size": "vocab_size", "embed_dim": "hidden_size", "ffn_dim": "intermediate_size",
           "num_heads": "num_attention_heads", "num_kv_heads": "num_key_value_heads", "head_dim": "head_dim",
           "activation": "hidden_activation", "qkv_bias": "attention_bias"}  # fmt: skip


def _stack(r: KeyReader, part: str) -> tuple[KeyReader, list[int | None]] | None:
    """Read the nested config ``part`` as a Gemma 2 stack: its reader (keys relative to ``part``) and the window
    of each layer (None: global). Its problems and ignored keys go to ``r``, prefixed."""
    written, value = r.lookup(part)
    if value is MISSING or value is None:
        value = {}
    if not isinstance(value, Mapping):
        r.problem(written, f"{written} must be an object of T5GemmaModuleConfig's keys; got {value!r}")
        return None
    sub = KeyReader(value, _MODULE)
    sub.consumed.discard("model_type")  # the nested config's own, classified below
    read_common(sub, "hidden_activation", "hidden_act", "sandwich")
    windows: list[int | None] = []
    layers = sub.data.get("num_layers")
    if isinstance(layers, int):
        derive = [SLIDING if (i + 1) % 2 else FULL for i in range(layers)]  # T5GemmaModuleConfig's default
        _, types = layer_types(sub, layers, derive)
        window_key, window, _ = sub.value("sliding_window")
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 1):
            sub.problem(window_key, f"{window_key} must be a positive integer or null; got {window!r}")
        elif types is not None:
            windows = [window if t == SLIDING else None for t in types]
    for key, sub_value in value.items():
        if key in sub.consumed:
            continue
        if key in hf_keys.CONDITIONAL and key not in _SUB_IGNORED:
            change = hf_keys.conditional_problem(key, sub_value)
            if change is not None:
                sub.problem(key, f"{key} = {sub_value!r} is not modelled: {change}")
            else:
                sub.ignored.append(
                    IgnoredKey(str(key), sub_value, f"{key} = {sub_value!r}: the transformers default")
                )
            continue
        reason = _SUB_IGNORED.get(key) or hf_keys.common_reason(str(key), sub_value)
        reason = reason or accept.sub_config_reason(r.family.model_type, part, str(key), sub_value)
        if reason is None:
            sub.problem(key, f"unknown key {key!r}: embedcalc cannot tell whether it changes the model's size or "
                             f"cost; {yaml_hint(r.family, lower=True)}", "hf_unknown_key")  # fmt: skip
        else:
            sub.ignored.append(IgnoredKey(str(key), sub_value, reason))
    r.problems += [Problem(f"{written}.{p.path}", f"{written}.{p.message}", p.code) for p in sub.problems]
    r.ignored += [IgnoredKey(f"{written}.{i.key}", i.value, i.reason, i.warn) for i in sub.ignored]
    return sub, windows


def _put_from(r: KeyReader, sub: KeyReader, part: str, field: str, as_field: str | None = None) -> None:
    """The sub-reader's ``field`` as ``as_field`` (default the same), its key named ``part.key``."""
    for m in sub.mapped:
        if m.field == field:
            r.data[as_field or field] = m.value
            r.user_keys[as_field or field] = f"{part}.{m.key}"
            r.mapped.append(MappedKey(f"{part}.{m.key}", as_field or field, m.value, m.origin, m.note))


# why a key a stack's reader mapped is not the config's: by the field it mapped to
_NOT_TAKEN = {
    "tie_embeddings": "T5GemmaForConditionalGeneration ties its head by the outer tie_word_embeddings; the stacks' "
    "own are not read",
    "max_seq_len": "RoPE has no table; encoder.max_position_embeddings is the extrapolation warning's",
    "dropout": "T5GemmaConfig overwrites it with its own attention_dropout; no parameters or matmul FLOPs",
}


def _rest(r: KeyReader, sub: KeyReader, part: str) -> None:
    """The keys of ``part`` its reader mapped that the config takes from elsewhere, listed as ignored with why."""
    taken = {m.key for m in r.mapped}
    for m in sub.mapped:
        key = f"{part}.{m.key}"
        if m.origin != "file" or key in taken:
            continue
        reason = _NOT_TAKEN.get(m.field) or (
            f"equals decoder.{m.key} ({m.value!r}): one shape for both stacks" if m.field in _SHARED else None
        )
        if reason is not None:
            r.ignored.append(IgnoredKey(key, sub.raw[m.key], reason))


def _unbalanced(r: KeyReader, encoder: KeyReader, decoder: KeyReader) -> bool:
    """Whether the stacks' shapes differ (module docstring): one ``hf_refused_family`` problem naming each key."""
    differ = [(f, k) for f, k in _SHARED.items() if encoder.data.get(f) != decoder.data.get(f)]
    if not differ:
        return False
    said = [f"decoder.{key} ({decoder.data.get(field)!r}) differs from encoder.{key} ({encoder.data.get(field)!r})"
            for field, key in differ]  # fmt: skip
    reason = (
        f"{', '.join(said)}: an unbalanced T5Gemma (its stacks of different shapes, as the 9B-2B checkpoints) is "
        "beyond embedcalc's encoder-decoder, which has one width, head layout, FFN and vocabulary for both stacks"
    )
    message = f"{reason}, so it is counted by the general reader (transformers' own class on the meta device) instead"
    r.problems.append(Problem(f"decoder.{differ[0][1]}", message, "hf_refused_family", reason))
    return True


def _layout(r: KeyReader, windows: dict[str, list[int | None]]) -> None:
    """Each stack's sliding layers as a ``local`` block (``decoder_local`` when the decoder's window differs from
    the encoder's) laid out by ``layers`` (encoder) and ``decoder_layout`` (decoder)."""
    names: dict[int, str] = {}
    blocks: dict[str, dict[str, Any]] = {}
    for part, field in (("encoder", "layers"), ("decoder", "decoder_layout")):
        per_layer = []
        for window in windows[part]:
            if window is None:
                per_layer.append("default")
                continue
            name = names.setdefault(window, "local" if not names else f"{part}_local")
            blocks[name] = {"attention": {"sliding_window": window}}
            per_layer.append(name)
        if any(n != "default" for n in per_layer):
            count = per_layer.count("default")
            note = f"{len(per_layer) - count} sliding-window layers, {count} global ({part}.layer_types)"
            r.put(
                field, runs(per_layer), f"{part}.layer_types, {part}.sliding_window", _origin(r, part), note
            )
    if blocks:
        origin: Origin = "file" if "file" in (_origin(r, "encoder"), _origin(r, "decoder")) else "default"
        r.put("blocks", blocks, "encoder.sliding_window, decoder.sliding_window", origin)


def _origin(r: KeyReader, part: str) -> Origin:
    """``file`` when the nested config ``part`` writes its layer_types or sliding_window, else ``default``."""
    sub = r.raw.get(part)
    return "file" if isinstance(sub, Mapping) and {"layer_types", "sliding_window"} & set(sub) else "default"


def _read_t5gemma(r: KeyReader) -> None:
    for name, value, note in (
        ("architecture", "encoder-decoder", ""), ("norm", "rmsnorm", "T5GemmaRMSNorm: one weight, used as 1 + w"),
        ("norm_placement", "sandwich", "norms before and after self-attention, cross-attention and the MLP"),
        ("final_norm", True, "each stack's norm"), ("embedding_norm", False, ""), ("position", "rope", ""),
        ("bias", False, ""), ("ffn_bias", False, "T5GemmaMLP builds no biases"), ("lm_head", True, ""),
        ("scale_embeddings", True, "embeddings times sqrt(hidden_size): a buffer, no parameter"),
        ("decoder_token_table", True, "T5GemmaEncoder and T5GemmaDecoder each build embed_tokens"),
    ):  # fmt: skip
        r.fixed(name, value, note)
    r.copy("tie_word_embeddings", "tie_embeddings", note="the LM head and the decoder's table")
    r.copy("dropout_rate", "dropout")
    r.ignore("attention_dropout", "T5GemmaConfig passes it to both stacks; no parameters or matmul FLOPs")
    r.ignore("classifier_dropout_rate", hf_keys.TASK)
    r.ignore(
        "vocab_size",
        "T5GemmaConfig's own; the tables and the head take encoder.vocab_size, decoder.vocab_size",
    )
    r.expect("is_encoder_decoder", (True,), "T5GemmaForConditionalGeneration is always an encoder-decoder")
    read = {part: _stack(r, part) for part in _STACKS}
    encoder, decoder = read["encoder"], read["decoder"]
    if encoder is None or decoder is None or _unbalanced(r, encoder[0], decoder[0]):
        return
    for field in ("vocab_size", "embed_dim", "ffn_dim", "num_heads", "num_kv_heads", "head_dim", "activation",
                  "qkv_bias", "out_bias"):  # fmt: skip
        _put_from(r, decoder[0], "decoder", field)
    _put_from(r, encoder[0], "encoder", "num_layers")
    _put_from(r, decoder[0], "decoder", "num_layers", "num_decoder_layers")
    _put_from(r, encoder[0], "encoder", "max_seq_len")
    _layout(r, {"encoder": encoder[1], "decoder": decoder[1]})
    _rest(r, encoder[0], "encoder")
    _rest(r, decoder[0], "decoder")


FAMILIES = (
    Family("t5gemma", "T5GemmaConfig", "T5GemmaForConditionalGeneration (AutoModelForSeq2SeqLM)", "t5-small",
           dict(tie_word_embeddings=True, dropout_rate=0.0, vocab_size=256000), _read_t5gemma),
)  # fmt: skip
