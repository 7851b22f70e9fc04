"""The general reader's torch side (DESIGN §19): a Hugging Face ``config.json`` built by transformers' own model class
on the meta device, and what that model says about itself, as raw facts for :mod:`embedcalc.reconcile.general`.

No weights are allocated (``torch.device("meta")``): every parameter is a shape. Three facts come back:

- **parameters**: ``named_parameters()`` (a tied weight once, under its first name), each with its shape; the
  routed-expert modules with their expert count (a fused ``(num_experts, ...)`` parameter or a list of expert
  modules) and top-k (the router's ``top_k`` / ``num_experts_per_tok`` attribute, else the config's);
- **FLOPs**: ``torch.utils.flop_counter.FlopCounterMode``'s count (:mod:`embedcalc.modeling.meta_flops`, the same
  count with meta results memoised) over one meta forward of ``batch x seq_len`` tokens, per module (exclusive of
  its children), with eager attention (FlopCounterMode counts SDPA as 0 on some backends,
  PyTorch issue 195460) and, where transformers offers it, the ``batched_mm`` experts implementation, which runs
  exactly ``top_k`` experts per token as gathered batched matmuls (routing on meta tensors is data-dependent and
  cannot run the per-expert loop);
- **cache**: every floating tensor the family's own cache object holds after that forward (``DynamicCache`` and
  its layer classes, ``EncoderDecoderCache``, the recurrent ``conv_states`` / ``recurrent_states`` of Mamba-like
  and linear-attention layers), per layer, as element counts.

Which model class builds the file, and its build on the meta device: :mod:`embedcalc.modeling.hf_classes`. The
forward, its FakeTensor rerun and a multimodal model's language model run alone where the outer forward wants more
than token ids: :mod:`embedcalc.modeling.hf_forward`. A forward that fails (a family whose code needs real values)
leaves FLOPs and cache out, with the reason; the parameters stand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from embedcalc.modeling.hf_cache import CacheTensor, cache_tensors
from embedcalc.modeling.hf_classes import (
    NoAutoClassError,
    Part,
    build_meta_class,
    choose_class,
    hf_config,
    quiet,
)
from embedcalc.modeling.hf_forward import language_model_forward, meta_forward

__all__ = ["CacheTensor", "ExpertModule", "MetaModel", "build_meta_model"]

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
    ran_alone: str | None  # the outer forward's error where the language model (text_only) ran alone instead
    version: str
    text_attrs: dict[
        str, Any
    ]  # the text config's attributes a layer model needs (heads, activation, positions)


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
    flops_error = cache_error = cache_class = ran_alone = None
    cache: tuple[CacheTensor, ...] | None = None
    if forward:
        # a dual encoder's text tower runs alone (the outer model's forward wants images too)
        runner = model.get_submodule(language) if part == "text_model" else model
        run = meta_forward(runner, architecture, batch, seq_len, tgt_len or seq_len)
        if run.flops is None and part == "language":  # the outer forward wants more than token ids
            run = language_model_forward(model, language, kept, run, architecture, batch, seq_len)
        flops, flops_error, cache_obj, runner = run.flops, run.error, run.cache, run.runner
        ran_alone = run.refused
        if flops is not None and part in ("language", "seq2seq_text"):
            flops = {k: v for k, v in flops.items() if counted(k) or not k}
        if architecture == "encoder":
            cache = ()
        elif cache_obj is None:
            cache_error = flops_error or "the forward returned no cache"
        elif cache_len is not None and cache_len != seq_len:
            again = meta_forward(runner, architecture, batch, cache_len, tgt_len or seq_len)
            cache_error, cache_obj = again.error, again.cache
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
        ran_alone=ran_alone,
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
