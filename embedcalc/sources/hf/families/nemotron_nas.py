"""NVIDIA's Llama-Nemotron NAS models (``model_type: nemotron-nas``, ``DeciLMForCausalLM``:
Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B, Llama-3.1-Nemotron-51B; Bercovich et al. 2024,
"Puzzle", arXiv 2411.19146).

transformers has no class for them: the checkpoints ship remote code (``configuration_decilm.py``,
``modeling_decilm.py``, ``block_config.py``). This reader follows that code as published with the checkpoints
(read in a public copy, DeltaVector1/Chat-Prompters@760b19a ``modeling_decilm.py``; vLLM's
``vllm/model_executor/models/nemotron_nas.py`` @00bd149 agrees on every size): a Llama decoder (RMSNorm pre-norm,
RoPE with llama3 scaling, a gated MLP, an untied head unless ``tie_word_embeddings``) whose layers differ, each
described by ``block_configs[i]``:

- ``attention.no_op``: no attention and no input norm (``DeciLMDecoderLayer`` builds neither); else
  ``attention.replace_with_linear``: ``DeciLMLinearAttention``, one ``nn.Linear(hidden, hidden, bias=False)``
  behind the kept ``input_layernorm``; else GQA attention with num_attention_heads / ``n_heads_in_group`` KV heads of
  hidden_size / num_attention_heads, q/k/v/o biased as ``attention_bias``.
- ``ffn.no_op``: no MLP and no post-attention norm; else ``ffn.replace_with_linear``: ``DeciLMLinearMLP``, one
  bias-free ``nn.Linear(hidden, hidden)`` behind the kept norm; else a gated MLP of
  ``_ffn_mult_to_intermediate_size(ffn_mult, hidden)`` = int(2 x ffn_mult x hidden / 3) rounded up to a multiple of
  256 (vLLM reads an explicit ``ffn.intermediate_size`` when there is no ``ffn_mult``), biased as ``mlp_bias``.
  ``no_op`` wins over ``replace_with_linear`` (the decoder layer tests it first).

In embedcalc's layer model (DESIGN.md §9, §16) these are ``attention.num_kv_heads``, ``ffn.ffn_dim``,
``mixer``/``ffn`` ``kind: none`` and ``kind: projection``. The flat ``num_kv_heads`` and ``ffn_dim`` are the most
common ones of the layers (DeciLMConfig writes both null); every layer that differs is a block of its own. Every
key of every block config is read, ignored with a reason, or refused: the sink and window attention of the
generic DeciLM code (``window_length``, ``num_sink_tokens``, ``unshifted_sink``,
``use_prefill_window_in_sink_attention``) change what attention computes and are refused unless off; a per-layer
``hidden_act`` other than the model's is refused (embedcalc has one activation); an unknown key is refused.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import replace_mapped
from embedcalc.sources.hf.layered import put_layout
from embedcalc.sources.hf.mappings import floor_head_dim
from embedcalc.sources.hf.reader import Family, IgnoredKey, KeyReader, yaml_hint

SPARSIFY = (
    "the modules DeciLM's training code sparsified; modeling_decilm.py builds them dense (it only registers a "
    "backward hook) and the checkpoint stores dense weights: the same sizes and FLOPs"
)
# block_configs[i].attention keys that are harmless at these values (the sink / window attention switched off)
_ATTENTION_OFF: dict[str, tuple[Any, str]] = {
    "window_length": (None, "no sliding window"),
    "num_sink_tokens": (None, "no attention sinks"),
    "unshifted_sink": (False, "no sink mask"),
    "use_prefill_window_in_sink_attention": (False, "no prefill window"),
    "prefill_sliding_window": (None, "no prefill window"),
    "is_sliding": (False, "no sliding window"),
}
_ATTENTION_KEYS = {"no_op", "replace_with_linear", "n_heads_in_group", "sparsify", *_ATTENTION_OFF}
_FFN_KEYS = {"no_op", "replace_with_linear", "ffn_mult", "intermediate_size", "hidden_act", "sparsify"}
_TOP_IGNORED = {
    "num_key_value_heads": "DeciLMConfig sets it to None whatever the file says: the KV heads are per layer "
    "(block_configs[i].attention)",
    "intermediate_size": "DeciLMConfig sets it to None whatever the file says: the MLP widths are per layer "
    "(block_configs[i].ffn)",
}


def ffn_mult_to_intermediate_size(ffn_mult: float, hidden: int) -> int:
    """DeciLM's ``_ffn_mult_to_intermediate_size`` (modeling_decilm.py; vLLM's nemotron_nas.py has the same):
    int(2 x ffn_mult x hidden / 3), rounded up to a multiple of 256 — evaluated in the same float order."""
    size = int(2 * ffn_mult * hidden / 3)
    return size if size % 256 == 0 else size + 256 - size % 256


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Blocks:
    """Reads ``block_configs`` into one (mixer, ffn) description per layer, recording every nested key."""

    def __init__(self, r: KeyReader, heads: int, hidden: int, act: Any) -> None:
        self.r, self.heads, self.hidden, self.act = r, heads, hidden, act
        self.harmless: dict[str, set[str]] = {}

    def fail(self, path: str, message: str) -> None:
        self.r.problem(path, f"{path}: {message}. {yaml_hint(self.r.family)}")

    def _note(self, path: str, value: Any) -> None:
        key = path.split("]", 1)[1]  # ".attention.window_length": one ignored row per key, all layers
        self.harmless.setdefault(key, set()).add(repr(value))

    def _opened(self, spec: Any, known: set[str], path: str, what: str) -> str | None:
        """What one sublayer's config replaces the sublayer by: ``none`` (no_op, which the decoder layer tests
        first), ``projection`` (replace_with_linear), or ``""`` (the sublayer itself); its ``sparsify`` noted. None
        after a problem (not an object, an unknown key, a flag that is not a bool)."""
        if not isinstance(spec, dict):
            self.fail(path, f"{spec!r} must be an object ({what})")
            return None
        unknown = sorted(set(spec) - known)
        if unknown:
            known_keys = ", ".join(sorted(known))
            self.fail(f"{path}.{unknown[0]}", f"unknown key {unknown[0]!r} of a DeciLM block config (known: "
                      f"{known_keys}), so embedcalc cannot tell whether it changes the layer")  # fmt: skip
            return None
        flags = []
        for name in ("no_op", "replace_with_linear"):
            value = spec.get(name, False)
            if not isinstance(value, bool):
                self.fail(f"{path}.{name}", f"{value!r} must be true or false")
                return None
            flags.append(value)
        if "sparsify" in spec:
            self._note(f"{path}.sparsify", spec["sparsify"])
        return "none" if flags[0] else "projection" if flags[1] else ""

    def attention(self, spec: Any, path: str) -> str | int | None:
        """``none``, ``projection``, the layer's KV heads, or None after a problem."""
        replaced = self._opened(spec, _ATTENTION_KEYS, path, "no_op, replace_with_linear, n_heads_in_group")
        if replaced is None:
            return None
        for name, (off, what) in _ATTENTION_OFF.items():
            if name not in spec:
                continue
            if spec[name] != off or type(spec[name]) is not type(off):
                why = "the generic DeciLM code's sink / window attention changes which keys each query sees"
                self.fail(f"{path}.{name}", f"{spec[name]!r} is not modelled ({what} is, at {off!r}): {why}")
                return None
            self._note(f"{path}.{name}", off)
        if replaced:
            return replaced
        group = spec.get("n_heads_in_group")
        if not isinstance(group, int) or isinstance(group, bool) or group < 1 or self.heads % group:
            self.fail(f"{path}.n_heads_in_group", f"{group!r} must be a positive divisor of num_attention_heads "
                      f"({self.heads}): the layer has num_attention_heads / n_heads_in_group KV heads")  # fmt: skip
            return None
        return self.heads // group

    def ffn(self, spec: Any, path: str) -> str | int | None:
        """``none``, ``projection``, the layer's MLP width, or None after a problem."""
        replaced = self._opened(spec, _FFN_KEYS, path, "no_op, replace_with_linear, ffn_mult")
        if replaced is None:
            return None
        act = spec.get("hidden_act")
        if act is not None and act != self.act:
            self.fail(f"{path}.hidden_act", f"{act!r} differs from the model's hidden_act ({self.act!r}); embedcalc "
                      "has one activation per model")  # fmt: skip
            return None
        if "hidden_act" in spec:
            self._note(f"{path}.hidden_act", act)
        if replaced:
            return replaced
        mult, width = spec.get("ffn_mult"), spec.get("intermediate_size")
        if mult is not None:
            if not _number(mult) or mult <= 0:
                self.fail(f"{path}.ffn_mult", f"{mult!r} must be a positive number")
                return None
            return ffn_mult_to_intermediate_size(mult, self.hidden)
        if isinstance(width, int) and not isinstance(width, bool) and width > 0:
            return width  # vLLM's rule for a block config without ffn_mult
        self.fail(f"{path}.ffn_mult", "an MLP layer needs ffn_mult (or intermediate_size)")
        return None

    def record_harmless(self) -> None:
        for key, values in sorted(self.harmless.items()):
            reason = SPARSIFY if key.endswith("sparsify") else (
                "the model's hidden_act in every layer that sets it" if key.endswith("hidden_act")
                else "switched off in every layer that sets it")  # fmt: skip
            self.r.ignored.append(IgnoredKey(f"block_configs[*]{key}", ", ".join(sorted(values)), reason))


def _name(spec: dict[str, Any]) -> str:
    """A block's name from what it changes: ``no_attention``, ``linear_attention``, ``kv4``; ``no_ffn``,
    ``linear_ffn``, ``ffn5632`` (``default`` when nothing)."""
    parts = []
    mixer, attention, ffn = spec.get("mixer", {}), spec.get("attention", {}), spec.get("ffn", {})
    if mixer:
        parts.append({"none": "no_attention", "projection": "linear_attention"}[mixer["kind"]])
    if attention:
        parts.append(f"kv{attention['num_kv_heads']}")
    if ffn:
        parts.append(
            {"none": "no_ffn", "projection": "linear_ffn"}.get(
                ffn.get("kind", ""), f"ffn{ffn.get('ffn_dim')}"
            )
        )
    return "_".join(parts) or "default"


def _read_nemotron_nas(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    r.ignore("auto_map", "names the checkpoint's remote code (configuration_decilm.py, modeling_decilm.py), whose "
             "layers this reader follows (module docstring); embedcalc runs none of it")  # fmt: skip
    for (
        key,
        reason,
    ) in _TOP_IGNORED.items():  # DeciLMConfig.__init__ sets both to None, whatever the file says
        written, _ = r.lookup(key)
        r.ignored = [row for row in r.ignored if row.key != written]  # read_core's "null: the default" row
        r.ignore(key, reason)
    heads, hidden = r.data.get("num_heads"), r.data.get("embed_dim")
    r.derived("head_dim", floor_head_dim(r),
              "hidden_size / num_attention_heads (DeciLMAttention's head width)")  # fmt: skip
    key, configs = r.lookup("block_configs")
    layers = r.data.get("num_layers")
    if not isinstance(configs, list) or not configs:
        r.problem(key, f"{key} = {configs!r}: a nemotron-nas file describes every layer in block_configs, a list "
                  f"of {{attention, ffn}} objects, one per layer. {yaml_hint(r.family)}")  # fmt: skip
        return
    if len(configs) != layers:
        r.problem(key, f"{key} lists {len(configs)} layers but num_hidden_layers is {layers!r}; DeciLMConfig "
                  "requires one block config per layer")  # fmt: skip
        return
    if not isinstance(heads, int) or not isinstance(hidden, int):
        return  # a problem was recorded for the shape already
    reader = _Blocks(r, heads, hidden, r.raw.get("hidden_act", r.family.defaults["hidden_act"]))
    described: list[tuple[str | int, str | int]] = []
    for i, block in enumerate(configs):
        path = f"{key}[{i}]"
        if not isinstance(block, dict) or set(block) - {"attention", "ffn"}:
            extra = sorted(set(block) - {"attention", "ffn"}) if isinstance(block, dict) else []
            r.problem(f"{path}.{extra[0]}" if extra else path, f"{path} must be an object of attention and ffn "
                      f"only; got {block!r:.80}. {yaml_hint(r.family)}")  # fmt: skip
            return
        mixer = reader.attention(block.get("attention", {}), f"{path}.attention")
        ffn = reader.ffn(block.get("ffn", {}), f"{path}.ffn")
        if mixer is None or ffn is None:
            return
        described.append((mixer, ffn))
    reader.record_harmless()
    _put_layers(r, key, described)


def _put_layers(r: KeyReader, key: str, described: list[tuple[str | int, str | int]]) -> None:
    """The flat KV heads and MLP width (the most common), a block for every other (mixer, ffn) and the layer runs."""
    kv = Counter(m for m, _ in described if isinstance(m, int)).most_common(1)
    width = Counter(f for _, f in described if isinstance(f, int)).most_common(1)
    flat_kv, flat_ffn = (kv[0][0] if kv else None), (width[0][0] if width else None)
    if flat_kv is not None:
        why = "the most common KV heads of the layers (num_attention_heads / n_heads_in_group)"
        replace_mapped(
            r, "num_kv_heads", flat_kv, key, "file", f"{why}; layers with others are blocks of their own"
        )
    if flat_ffn is not None:
        why = "the most common MLP width of the layers (_ffn_mult_to_intermediate_size)"
        replace_mapped(
            r, "ffn_dim", flat_ffn, key, "file", f"{why}; layers with others are blocks of their own"
        )
    variants: dict[str, dict[str, Any]] = {}
    names = []
    for mixer, ffn in described:
        spec: dict[str, Any] = {}
        if isinstance(mixer, str):
            spec["mixer"] = {"kind": mixer}
        elif mixer != flat_kv:
            spec["attention"] = {"num_kv_heads": mixer}
        if isinstance(ffn, str):
            spec["ffn"] = {"kind": ffn}
        elif ffn != flat_ffn:
            spec["ffn"] = {"ffn_dim": ffn}
        name = _name(spec)
        variants.setdefault(name, spec)
        names.append(name)
    counts = Counter(names)
    note = ", ".join(f"{n} {name}" for name, n in counts.most_common())
    put_layout(r, names, {k: v for k, v in variants.items() if k != "default"}, key, f"layers: {note}")


# DeciLMConfig's defaults are LlamaConfig's (the transformers 4.44 copy it ships), block_configs none
_DEFAULTS: dict[str, Any] = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=None, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048, tie_word_embeddings=False,
    attention_bias=False, attention_dropout=0.0, mlp_bias=False, block_configs=None,
)  # fmt: skip
FAMILIES = (
    Family("nemotron-nas", "DeciLMConfig", "DeciLMForCausalLM (the checkpoint's remote code, modeling_decilm.py)",
           "llama-3.3-nemotron-super-49b", _DEFAULTS, _read_nemotron_nas),
)  # fmt: skip
