"""The general reader's torch side (DESIGN §19): a Hugging Face ``config.json`` built by transformers' own model class
on the meta device, and what that model says about itself, as raw facts for :mod:`embedcalc.reconcile.general`.

No weights are allocated (``torch.device("meta")``): every parameter is a shape. Three facts come back:

- **parameters**: ``named_parameters()`` (a tied weight once, under its first name), each with its shape; the
  routed-expert modules with their expert count (a fused ``(num_experts, ...)`` parameter or a list of expert
  modules) and top-k (the router's ``top_k`` / ``num_experts_per_tok`` attribute, else the config's);
- **FLOPs**: ``torch.utils.flop_counter.FlopCounterMode`` over one meta forward of ``batch x seq_len`` tokens, per
  module (exclusive of its children), with eager attention (FlopCounterMode counts SDPA as 0 on some backends,
  PyTorch issue 195460) and, where transformers offers it, the ``batched_mm`` experts implementation, which runs
  exactly ``top_k`` experts per token as gathered batched matmuls (routing on meta tensors is data-dependent and
  cannot run the per-expert loop);
- **cache**: every floating tensor the family's own cache object holds after that forward (``DynamicCache`` and
  its layer classes, ``EncoderDecoderCache``, the recurrent ``conv_states`` / ``recurrent_states`` of Mamba-like
  and linear-attention layers), per layer, as element counts.

Which model class (the counting rule of the native readers, :mod:`embedcalc.sources.hf`): an encoder-decoder
(``is_encoder_decoder``) is ``AutoModelForSeq2SeqLM``; a multimodal config is its text model (the text config's
``AutoModelForCausalLM`` class when it has one, else the outer ``AutoModelForImageTextToText`` class of which only the
language model and the LM head are counted; T5Gemma 2, an encoder-decoder with a vision tower in its encoder: the
encoder's text tower, the decoder and the head); a family with a masked-LM class (an encoder: BERT-like) or without a
causal-LM class is ``AutoModel`` (the backbone); every other family is ``AutoModelForCausalLM``.
An encoder-decoder of two sub-configs (T5Gemma: ``get_text_config()`` is its decoder half) is the whole seq2seq
model too. A forward that asks a meta tensor for a value (a padding mask's ``.all()``) runs again on FakeTensors,
which transformers treats as tracing and answers with its trace-safe path; one that fails otherwise (a family
whose code needs real values) leaves FLOPs and cache out, with the reason; the parameters stand.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from embedcalc.modeling.hf_cache import CacheTensor, cache_tensors

__all__ = ["CacheTensor", "ExpertModule", "MetaModel", "build_meta_class", "build_meta_model", "choose_class",
           "hf_config", "quiet", "transformers_version"]  # fmt: skip

_TOP_K_ATTRS = ("top_k", "num_experts_per_tok", "moe_top_k", "num_selected_experts", "experts_per_token",
                "num_experts_per_token", "moe_k", "router_top_k")  # fmt: skip


@dataclass(frozen=True)
class ExpertModule:
    """A module holding routed experts: its path, parameters, expert count and top-k (None when unknown)."""

    path: str
    params: int
    num_experts: int
    top_k: int | None


@dataclass(frozen=True)
class MetaModel:
    """What transformers' class built on the meta device says about itself (module docstring)."""

    class_name: str
    auto_class: str
    architecture: str  # encoder | decoder | encoder-decoder: the counting rule's stack
    text_only: str | None  # the language model's path when only it and the head are counted (multimodal)
    parameters: tuple[tuple[str, tuple[int, ...]], ...]
    outside: tuple[tuple[str, tuple[int, ...]], ...]  # parameters of the towers a multimodal model leaves out
    layer_children: dict[int, tuple[str, ...]]  # layer index -> its direct child modules' names
    experts: tuple[ExpertModule, ...]
    flops: dict[str, int] | None  # module path -> FLOPs exclusive of its children; None: the forward failed
    flops_error: str | None
    cache: tuple[CacheTensor, ...] | None
    cache_class: str | None
    cache_error: str | None
    version: str
    text_attrs: dict[
        str, Any
    ]  # the text config's attributes a layer model needs (heads, activation, positions)


def transformers_version() -> str | None:
    """The installed transformers' version, None when it cannot be imported."""
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)


def related_model_types(model_type: str) -> list[str]:
    """The model types the installed transformers has whose names share ``model_type``'s family stem (its name
    before the last ``_`` part, ``minimax_m3`` -> ``minimax``), closest first: where a file's type is a near miss
    (MiniMax-M3's checkpoint is ``minimax_m3_vl`` there)."""
    import difflib

    from transformers.models.auto import configuration_auto

    names: Mapping[str, str] = getattr(configuration_auto, "CONFIG_MAPPING_NAMES", {})
    stem = model_type.rsplit("_", 1)[0] if "_" in model_type else model_type
    related = [t for t in names if t.startswith(stem) and t != model_type]
    return sorted(related, key=lambda t: (-difflib.SequenceMatcher(None, model_type, t).ratio(), t))[:4]


def hf_config(raw: Mapping[str, Any]) -> Any:
    from transformers import AutoConfig

    data = {k: v for k, v in raw.items() if k != "model_type"}
    return AutoConfig.for_model(str(raw["model_type"]), **data)


def misplaced_text_keys(raw: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, the file's value, the value transformers' text model gets) for each top-level key of a multimodal
    file without ``text_config`` that its outer class does not declare but its text sub-config does, at another
    value than the text model is built with: transformers keeps such a key as a plain attribute of the outer
    config and builds its default text model (a flat Step-3.7 file's ``num_hidden_layers``)."""
    from embedcalc.sources.hf.derive import params

    if "text_config" in raw:
        return []
    with quiet():
        config = hf_config(raw)
    if "text_config" not in (getattr(type(config), "sub_configs", {}) or {}):
        return []
    text = getattr(config, "text_config", None)
    if text is None:
        return []
    outer, inner = (
        set(params(type(config))),
        set(params(type(text))),
    )  # the text class built (AutoConfig's pick)
    found = []
    for key, value in raw.items():
        if key in outer or key not in inner or key in ("model_type", "architectures"):
            continue
        built = getattr(text, key, None)
        if built != value:
            found.append((key, value, built))
    return found


def _names(mapping: str) -> Mapping[str, str]:
    from transformers.models.auto import modeling_auto

    names: Mapping[str, str] = getattr(modeling_auto, mapping, {})
    return names


class NoAutoClassError(LookupError):
    """transformers has the config class of a model_type but no Auto model class that builds it."""


# which part of the built model is counted: all of it, a multimodal model's language model and LM head, or the
# text tower of a dual encoder (the module built from its text config: CLIP's text_model)
Part = str


def _own_class(config: Any) -> tuple[str, str, str, Any, Part] | None:
    """A config's own generative class: seq2seq for an encoder-decoder, causal LM for a decoder (a family with a
    masked-LM class is an encoder: None here)."""
    model_type = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        name = _names("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES").get(model_type)
        name = name or _names("MODEL_MAPPING_NAMES").get(model_type)
        return (name, "AutoModelForSeq2SeqLM", "encoder-decoder", config, "all") if name else None
    causal = _names("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES").get(model_type)
    if causal and model_type not in _names("MODEL_FOR_MASKED_LM_MAPPING_NAMES"):
        return causal, "AutoModelForCausalLM", "decoder", config, "all"
    return None


def choose_class(config: Any) -> tuple[str, str, str, Any, Part]:
    """(class name, auto class, architecture, the config to build it from, the part counted): the module
    docstring's rule. A composite config's text model first (its own class, else the multimodal class's language
    model and head, else the text tower the composite model builds, else the text config's base model)."""
    model_type = config.model_type
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    base = _names("MODEL_MAPPING_NAMES")
    image_text = _names("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES")
    halves = [getattr(config, name, None) for name in ("encoder", "decoder")]
    if text is not config and any(text is h for h in halves) and model_type not in image_text:
        # an encoder-decoder of two sub-configs (T5Gemma's encoder and decoder): get_text_config() is its decoder
        # half, but the text model is the whole seq2seq model the outer config builds
        own = _own_class(config)
        if own is not None:
            return own
    causal = _names("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES").get(model_type)
    if text is not config and causal and set(getattr(config, "sub_configs", {})) == {"text_config"}:
        # a causal LM of its own around a text config and nothing else (Gemma 4's assistant: projections in and
        # out, every layer reading the target's keys and values): the outer class is the text model
        return causal, "AutoModelForCausalLM", "decoder", config, "all"
    if text is not config:
        own = _own_class(text)
        if own is not None:
            return own
        outer = image_text.get(model_type)
        if outer and getattr(config, "is_encoder_decoder", False):
            # T5Gemma 2: a vision tower inside an encoder-decoder; the text model is the encoder's text tower, the
            # decoder and the head, and its forward takes decoder tokens too
            return outer, "AutoModelForImageTextToText", "encoder-decoder", config, "seq2seq_text"
        if outer:
            return outer, "AutoModelForImageTextToText", "decoder", config, "language"
        if model_type in base:
            return base[model_type], "AutoModel", "encoder", config, "text_model"
        if text.model_type in base:
            return base[text.model_type], "AutoModel", "encoder", text, "all"
        raise NoAutoClassError(model_type)
    own = _own_class(config)
    if own is not None:
        return own
    parent = _parent(config, _names("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"))
    if (
        parent is not None
    ):  # a text config alone (glm4v_text): its model as the multimodal class holds it, head too
        return choose_class(parent)
    if model_type in base:
        return base[model_type], "AutoModel", "encoder", config, "all"
    parent = _parent(config, base)
    if parent is not None:  # a dual encoder's text config alone (align_text_model): its text tower
        return choose_class(parent)
    raise NoAutoClassError(model_type)


def _parent(text: Any, mapping: Mapping[str, str]) -> Any:
    """The default composite config of a model_type in ``mapping`` holding ``text`` as its ``text_config``
    (Glm4vConfig for a glm4v_text file), built around it; None when there is none."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for model_type in mapping:
        if model_type not in CONFIG_MAPPING:
            continue
        cls: Any = CONFIG_MAPPING[model_type]
        if getattr(cls, "sub_configs", {}).get("text_config") is type(text):
            tie = getattr(text, "tie_word_embeddings", None)  # a text file alone keeps its own head tying
            return cls(text_config=text.to_dict(), **({} if tie is None else {"tie_word_embeddings": tie}))
    return None


@contextmanager
def quiet() -> Iterator[None]:
    """transformers' own warnings and log lines (deprecations, slow-path notices) silenced while it builds and runs
    the model: the command's stderr carries embedcalc's lines only."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def build_meta_class(class_name: str, config: Any) -> nn.Module:
    import transformers

    cls = getattr(transformers, class_name)
    options: dict[str, Any] = {"attn_implementation": "eager", "experts_implementation": "batched_mm"}
    with torch.device("meta"), quiet():
        try:
            return cls._from_config(config, **options)  # type: ignore[no-any-return]
        except (TypeError, ValueError):  # a transformers without experts implementations (4.x)
            return cls._from_config(config, attn_implementation="eager")  # type: ignore[no-any-return]


def _counted_part(model: nn.Module, part: Part, config: Any) -> tuple[str, set[str]]:
    """The counted module's path and the paths counted: a multimodal model's language model and its LM head
    (``language``), or the module built from the text config (``text_model``: CLIP's ``text_model``)."""
    found: Any = model  # transformers' PreTrainedModel methods, not nn.Module's
    towers = ("text_model", "text_encoder", "text_backbone", "language_model")
    if (
        part == "seq2seq_text"
    ):  # the encoder's text tower (not its vision tower and projector), decoder and head
        encoder, decoder = found.get_encoder(), found.get_decoder()
        head = found.get_output_embeddings()
        name = next((n for n, m in model.named_modules() if m is encoder), "")
        text_tower = next((f"{name}.{n}" for n, _ in encoder.named_children() if n in towers), None)
        paths = {n for n, m in model.named_modules() if m is decoder or m is head}
        return text_tower or "", paths | ({text_tower} if text_tower and name else set())
    if part == "language":
        decoder = found.get_decoder() if hasattr(found, "get_decoder") else None
        head = found.get_output_embeddings() if hasattr(found, "get_output_embeddings") else None
        paths = {name for name, module in model.named_modules() if module is decoder or module is head}
        return next((n for n, m in model.named_modules() if m is decoder), ""), paths
    text = config.get_text_config()
    name = next((n for n, m in model.named_modules() if n and getattr(m, "config", None) is text), None)
    if name is None:
        name = next((n for n, _ in model.named_modules() if n.rsplit(".", 1)[-1] in towers), "")
    return name, {name} if name else set()


def _layer_children(model: nn.Module) -> dict[int, tuple[str, ...]]:
    out: dict[int, tuple[str, ...]] = {}
    for name, module in model.named_modules():
        head, _, index = name.rpartition(".")
        if index.isdigit() and head.rsplit(".", 1)[-1] in ("layers", "h", "layer", "blocks", "block"):
            out.setdefault(int(index), tuple(n for n, _ in module.named_children()))
    return out


def _top_k(module: nn.Module, config: Any) -> int | None:
    for sub in (module, *module.modules()):
        for attr in _TOP_K_ATTRS:
            value = getattr(sub, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    for attr in _TOP_K_ATTRS:
        value = getattr(config, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _experts(model: nn.Module, config: Any, counted: Any) -> tuple[ExpertModule, ...]:
    """Every module named ``experts`` (transformers' name for routed experts in every MoE family): the expert
    count from a fused 3-D parameter's leading dimension or its list of expert modules; top-k from the MoE block
    that holds it (its router), else the config."""
    out = []
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] != "experts" or not counted(name):
            continue
        parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
        fused = [p for p in module.parameters(recurse=False) if p.dim() == 3]
        children = [c for c in module.children() if any(True for _ in c.parameters())]
        num = fused[0].shape[0] if fused else len(children)
        if num < 1:
            continue
        params = sum(p.numel() for p in module.parameters())
        out.append(ExpertModule(name, params, int(num), _top_k(parent, config)))
    return tuple(out)


def _exclusive_flops(counts: Mapping[str, Mapping[Any, int]], root: str) -> dict[str, int]:
    """Per module path (root class name stripped), its FLOPs less those of the recorded modules nearest below it
    (a container never called, such as ``layers``, is not recorded: its layers count under the module above)."""
    # "Global" and the trackers of autograd Functions (a family's custom kernels, named by their class) repeat
    # FLOPs already counted under the modules that ran them
    totals = {n: sum(ops.values()) for n, ops in counts.items() if n == root or n.startswith(root + ".")}

    def parent(name: str) -> str | None:
        head = name
        while "." in head:
            head = head.rpartition(".")[0]
            if head in totals:
                return head
        return None

    below: dict[str, int] = {}
    for name, total in totals.items():
        above = parent(name)
        if above is not None:
            below[above] = below.get(above, 0) + total
    out: dict[str, int] = {}
    for name, total in totals.items():
        own = total - below.get(name, 0)
        if own:
            path = name[len(root) + 1 :] if name.startswith(root + ".") else ("" if name == root else name)
            out[path] = out.get(path, 0) + own
    return out


def _inputs(architecture: str, batch: int, seq_len: int, tgt_len: int) -> dict[str, Any]:
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    if architecture == "encoder-decoder":
        dec = torch.zeros(batch, tgt_len, dtype=torch.long, device="meta")
        return {"input_ids": ids, "decoder_input_ids": dec, "use_cache": True}
    if architecture == "decoder":
        return {"input_ids": ids, "use_cache": True}
    return {"input_ids": ids}


def _run(model: nn.Module, inputs: dict[str, Any], fake: bool) -> tuple[Any, FlopCounterMode]:
    """One forward under FlopCounterMode: on the meta inputs, or (``fake``) on FakeTensors of them, the mode
    transformers itself recognises as tracing (``is_fake_tensor``), where it skips the checks that read a tensor's
    values (a padding mask's ``.all()``, which a meta tensor cannot answer) and takes its trace-safe path."""
    counter = FlopCounterMode(display=False)
    if not fake:
        with counter, quiet():  # no no_grad: some families' meta paths assert autograd
            return model(**inputs), counter
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # the meta parameters are taken as they are
    faked = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with mode, counter, quiet():
        return model(**faked), counter


def _forward(
    model: nn.Module, architecture: str, batch: int, seq_len: int, tgt_len: int
) -> tuple[dict[str, int] | None, str | None, Any]:
    inputs = _inputs(architecture, batch, seq_len, tgt_len)
    try:
        out, counter = _run(model, inputs, fake=False)
    except Exception as exc:  # a family's forward on meta tensors: any failure is reported
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        error = f"{type(exc).__name__}: {first}"
        if "meta tensors" not in first:  # not a value only real data has: a fake forward would fail too
            return None, error, None
        try:
            out, counter = _run(model, inputs, fake=True)
        except Exception:  # the first failure is the one to report
            return None, error, None
    flops = _exclusive_flops(counter.get_flop_counts(), type(model).__name__)
    cache = None
    with (
        quiet()
    ):  # the output's field is ``cache`` in transformers 5.24+, ``past_key_values`` (``cache_params``)
        for name in ("cache", "past_key_values", "cache_params"):  # before: the old names warn as deprecated
            cache = getattr(out, name, None) if not isinstance(out, tuple) else None
            if cache is not None:
                break
    return flops, None, cache


def build_meta_model(
    raw: Mapping[str, Any],
    batch: int = 1,
    seq_len: int = 128,
    tgt_len: int | None = None,
    cache_len: int | None = None,
    forward: bool = True,
) -> MetaModel:
    """Build ``raw`` (a parsed ``config.json``) with transformers' class on the meta device and read it (module
    docstring): FLOPs of a forward of ``batch x seq_len`` tokens (``tgt_len`` decoder tokens of an
    encoder-decoder), the cache after a forward of ``cache_len`` tokens (default ``seq_len``: a second forward
    when they differ, so generated tokens are in the cache). Raises ``ImportError`` without transformers, and
    what transformers raises for a config it refuses (the caller names it)."""
    import transformers

    with quiet():
        config = hf_config(raw)
    class_name, auto_class, architecture, build_from, part = choose_class(config)
    model = build_meta_class(class_name, build_from)
    model.eval()
    text_only = part != "all"
    language, kept = _counted_part(model, part, build_from) if text_only else ("", set())
    if part == "seq2seq_text" and len(kept) < 3:
        # an image-to-text encoder-decoder whose encoder is a vision tower alone, no text tower (Pix2Struct,
        # PP-FormulaNet): its text model is the decoder and the head, as a decoder-only multimodal class's is
        part, architecture = "language", "decoder"
        language, kept = _counted_part(model, part, build_from)
    if text_only and not kept:
        raise NoAutoClassError(f"{class_name} has no text model embedcalc can find")

    def counted(name: str) -> bool:
        return not text_only or any(name == p or name.startswith(p + ".") for p in kept)

    params: list[tuple[str, tuple[int, ...]]] = []
    outside: list[tuple[str, tuple[int, ...]]] = []
    tables = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, nn.Embedding)}
    for name, p in model.named_parameters():
        if (
            not p.requires_grad and name in tables
        ):  # a table fixed by the config (Marian's sinusoidal positions)
            continue  # a frozen parameter elsewhere is a weight the checkpoint holds (ERNIE-4.5's correction bias)
        (params if counted(name) else outside).append((name, tuple(int(s) for s in p.shape)))
    flops: dict[str, int] | None = None
    flops_error = cache_error = cache_class = None
    cache: tuple[CacheTensor, ...] | None = None
    if forward:
        # a dual encoder's text tower runs alone (the outer model's forward wants images too)
        runner = model.get_submodule(language) if part == "text_model" else model
        flops, flops_error, cache_obj = _forward(runner, architecture, batch, seq_len, tgt_len or seq_len)
        if flops is not None and part in ("language", "seq2seq_text"):
            flops = {k: v for k, v in flops.items() if counted(k) or not k}
        if architecture == "encoder":
            cache = ()
        elif cache_obj is None:
            cache_error = flops_error or "the forward returned no cache"
        elif cache_len is not None and cache_len != seq_len:
            _, cache_error, cache_obj = _forward(runner, architecture, batch, cache_len, tgt_len or seq_len)
        if cache_obj is not None and architecture != "encoder":
            cache_class = type(cache_obj).__name__
            cache = cache_tensors(cache_obj)
    return MetaModel(
        class_name=class_name,
        auto_class=auto_class,
        architecture=architecture,
        text_only=language if text_only else None,
        parameters=tuple(params),
        outside=tuple(outside),
        layer_children=_layer_children(model),
        experts=_experts(model, build_from, counted),
        flops=flops,
        flops_error=flops_error,
        cache=cache,
        cache_class=cache_class,
        cache_error=cache_error,
        version=str(transformers.__version__),
        text_attrs=_text_attrs(build_from),
    )


_ATTRS = {"heads": ("num_attention_heads", "n_head", "num_heads"), "kv_heads": ("num_key_value_heads",),
          "act": ("hidden_act", "activation_function", "hidden_activation"),
          "positions": ("max_position_embeddings", "n_positions", "max_sequence_length"),
          "rope": ("rope_theta", "rope_parameters", "rope_scaling", "rotary_dim", "rotary_pct",
                   "partial_rotary_factor", "rotary_emb_base"),
          "window": ("sliding_window",)}  # fmt: skip


def _text_attrs(config: Any) -> dict[str, Any]:
    """The text config's attributes a layer model is derived with (:mod:`embedcalc.reconcile.general_layers`): the
    first of each group's names it has (transformers' attribute_map resolves the family's own spelling)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config

    def value(name: str) -> Any:
        try:
            return getattr(text, name, None)
        except Exception:  # a per-layer attribute of a heterogeneous config (transformers 5.25): no one value
            return None

    out: dict[str, Any] = {}
    for what, names in _ATTRS.items():
        out[what] = next((v for v in map(value, names) if v is not None), None)
    return out
