"""Gemma 4's assistant: the drafter of Gemma 4's speculative decoding (transformers 5.24/5.25
``Gemma4AssistantConfig`` / ``Gemma4AssistantForCausalLM``, ``models/gemma4_assistant/``).

What the class builds, read off ``modeling_gemma4_assistant.py`` and ``modeling_gemma4.py``:

- ``model``: a Gemma 4 text model (``AutoModel.from_config(text_config)``, read here by the Gemma 4 reader) whose every
  layer is a KV-sharing layer: ``Gemma4AssistantConfig.__post_init__`` sets a falsy ``num_kv_shared_layers`` to
  ``num_hidden_layers`` and ``validate_architecture`` requires the two equal, so ``kv_sharing_modes`` is "reuse" for
  every layer: no k_proj / v_proj / k_norm / v_norm, and the keys and values are the ``shared_kv_states`` the target
  model returns (its last layer of each layer type), one per position; no cache of its own (``use_cache=False``).
  embedcalc: ``attention.kv_external`` on every layer;
- ``pre_projection``: Linear(2 x backbone_hidden_size, hidden_size, no bias) over the target's token embedding and
  last hidden state concatenated (``inputs_embeds``; the assistant never looks its token table up):
  embedcalc's ``input_projection_dim``; ``post_projection``: Linear(hidden_size, backbone_hidden_size, no bias) on
  the final norm's output, handed back: ``output_projection_dim``;
- ``lm_head`` tied to ``model.embed_tokens`` by the outer ``tie_word_embeddings`` (the text config's own is not
  read); with ``use_ordered_embeddings`` the head is ``Gemma4AssistantMaskedEmbedder``: ``centroids``
  Linear(hidden_size, num_centroids, no bias), the top ``centroid_intermediate_top_k`` clusters of
  vocab_size / num_centroids tokens each (``token_ordering``, a buffer), logits of those tokens only:
  ``head_centroids``, ``head_centroid_top_k``.

``validate_architecture`` also refuses per-layer embeddings (``hidden_size_per_layer_input`` and
``vocab_size_per_layer_input`` must be 0), the MoE block and the double-wide MLP: so does this reader, with
transformers' own words, since transformers builds no model from such a file (its default config is one of them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embedcalc.config.limits import MAX_HF_LAYERS
from embedcalc.errors import Problem
from embedcalc.sources.hf.families.gemma4 import FAMILIES as TEXT_FAMILIES
from embedcalc.sources.hf.families.gemma4 import read_gemma4_text
from embedcalc.sources.hf.reader import MISSING, Family, IgnoredKey, KeyReader, MappedKey

_TEXT = TEXT_FAMILIES[0]
_CLASS = "Gemma4AssistantConfig.validate_architecture"
# the text config's values transformers' validate_architecture requires: key -> (required, what it would add)
_REQUIRED: dict[str, tuple[Any, str]] = {
    "hidden_size_per_layer_input": (0, "per-layer embeddings"),
    "vocab_size_per_layer_input": (0, "per-layer token table"),
    "enable_moe_block": (False, "the MoE block"),
    "use_double_wide_mlp": (False, "double-wide MLPs"),
}


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _text_reader(r: KeyReader) -> KeyReader | None:
    """The text config read as the assistant's (module docstring); its problems go to ``r``, prefixed."""
    written, text = r.lookup("text_config")
    if text is MISSING or text is None:
        text = {}  # Gemma4AssistantConfig: Gemma4TextConfig's defaults, which validate_architecture refuses
    if not isinstance(text, Mapping):
        r.problem(written, f"{written} must be an object of Gemma4TextConfig's keys; got {text!r}")
        return None
    inner = dict(text)
    inner_type = inner.get("model_type", "gemma4_text")
    if inner_type != "gemma4_text":
        r.problem(f"{written}.model_type", f"{written}.model_type = {inner_type!r}: Gemma4AssistantConfig builds a "
                                           "gemma4_text model")  # fmt: skip
        return None
    sub = KeyReader(inner, _TEXT)
    layers_key, layers, _ = sub.value("num_hidden_layers")
    if type(layers) is int and layers > MAX_HF_LAYERS:  # as map_hf_config bounds a file's own layer counts
        r.problem(f"{written}.{layers_key}", f"{written}.{layers_key} = {layers:.3g}: a Hugging Face config is read "
                  f"with at most {MAX_HF_LAYERS:,} layers", "hf_too_many_layers")  # fmt: skip
        return None
    shared_key, shared, shared_written = sub.value("num_kv_shared_layers")
    if not shared:  # Gemma4AssistantConfig.__post_init__
        shared = layers
        if shared_written:
            sub.ignored.append(IgnoredKey(shared_key, inner[shared_key], f"falsy: Gemma4AssistantConfig sets it to "
                                                                         f"{layers_key} ({layers!r})"))  # fmt: skip
    elif shared != layers:
        sub.problem(shared_key, f"{shared_key} = {shared!r}: {_CLASS} raises 'All layers in a Gemma 4 Assistant "
                                f"models must be shared. Expected {layers}' (every layer attends to the target's "
                                "keys and values)")  # fmt: skip
    for key, (required, what) in _REQUIRED.items():
        key_written, value, from_file = sub.value(key)
        if value != required or type(value) is not type(required):
            origin = "" if from_file else " (Gemma4TextConfig's default)"
            sub.problem(key_written, f"{key_written} = {value!r}{origin}: {_CLASS} raises '{key} must be "
                                     f"{required}' (a Gemma 4 assistant has no {what}), so transformers builds no "
                                     f"model from this file; set {written}.{key}: {str(required).lower()}")  # fmt: skip
    read_gemma4_text(sub, drafter=True)
    sub.consumed.add("num_kv_shared_layers")
    sub.classify_rest()
    prefix = f"{written}."
    r.problems += [Problem(prefix + p.path, prefix + p.message if p.message.startswith(p.path) else p.message,
                           p.code) for p in sub.problems]  # fmt: skip
    r.ignored += [IgnoredKey(prefix + i.key, i.value, i.reason, i.warn) for i in sub.ignored]
    r.notes += sub.notes
    return sub


def _read_gemma4_assistant(r: KeyReader) -> None:
    sub = _text_reader(r)
    if sub is None:
        return
    tie = sub.data.pop("tie_embeddings", None)
    for m in sub.mapped:
        if m.field == "tie_embeddings":
            if m.origin == "file":
                r.ignored.append(IgnoredKey(f"text_config.{m.key}", m.value, "Gemma4AssistantForCausalLM ties "
                                            "its head by the outer tie_word_embeddings"))  # fmt: skip
            continue
        key = ", ".join(f"text_config.{k.strip()}" for k in m.key.split(","))  # a layout names several keys
        r.mapped.append(MappedKey(key, m.field, m.value, m.origin, m.note))
        r.user_keys[m.field] = key
    del tie
    r.data |= sub.data
    r.copy("tie_word_embeddings", "tie_embeddings")
    key, backbone, _ = r.value("backbone_hidden_size")
    if not _positive(backbone):
        r.problem(key, f"{key} = {backbone!r}: the target model's hidden size must be a positive integer")
        return
    r.put("input_projection_dim", 2 * backbone, key, "file" if r.has(key) else "default",
          "pre_projection: the target's token embedding and last hidden state, 2 x backbone_hidden_size")  # fmt: skip
    r.put("output_projection_dim", backbone, key, "file" if r.has(key) else "default",
          "post_projection: the state handed back to the target")  # fmt: skip
    ordered_key, ordered, _ = r.value("use_ordered_embeddings")
    if ordered is True:
        for source, field, note in (("num_centroids", "head_centroids", "Gemma4AssistantMaskedEmbedder.centroids"),
                                    ("centroid_intermediate_top_k", "head_centroid_top_k",
                                     "the clusters whose tokens each position scores")):  # fmt: skip
            written, value, from_file = r.value(source)
            r.put(field, value, f"{ordered_key}, {written}", "file" if from_file else "default", note)
    elif ordered is False:
        r.ignore(ordered_key, "false: the plain tied LM head")
        for unread in ("num_centroids", "centroid_intermediate_top_k"):
            r.ignore(unread, f"read only with {ordered_key} (Gemma4AssistantMaskedEmbedder)")
    else:
        r.problem(ordered_key, f"{ordered_key} must be true or false; got {ordered!r}")


_DEFAULTS: dict[str, Any] = dict(
    text_config=None, backbone_hidden_size=1536, use_ordered_embeddings=False, num_centroids=2048,
    centroid_intermediate_top_k=32, tie_word_embeddings=True,
)  # fmt: skip
FAMILIES = (
    Family("gemma4_assistant", "Gemma4AssistantConfig",
           "Gemma4AssistantForCausalLM (AutoModelForCausalLM; the target's keys and values and hidden states are its "
           "input)", "gemma-4-31b", _DEFAULTS, _read_gemma4_assistant),
)  # fmt: skip
