"""The general reader's meta forward (DESIGN §19): transformers' model run on meta token ids under the FLOP counter
(:mod:`embedcalc.modeling.meta_flops`), its FLOPs per module and the cache object it returns, for
:mod:`embedcalc.modeling.hf_meta`, which builds the model and reads the rest.

A forward that asks a meta tensor for a value (a padding mask's ``.all()``) runs again on FakeTensors, which
transformers treats as tracing and answers with its trace-safe path; one that fails otherwise leaves FLOPs and cache
out, with the reason.

**The language model alone.** Some multimodal classes' forward refuses token ids alone (Kosmos-2's wants pixel values
or image embeddings). Their counted language model, the module ``get_decoder()`` returns (the one the parameters
count: :func:`embedcalc.modeling.hf_meta._counted_part`), then runs alone on the same token ids, when

1. it holds every counted parameter, the LM head included: its own forward computes the logits, so the head is
   counted once, by the module that holds it (a language model whose head sits outside it is not run alone);
2. it is a transformers ``PreTrainedModel`` whose forward takes ``input_ids``;
3. every module of it that holds parameters runs on token ids alone. A decoder that cross-attends to image features
   (BLIP's text decoder, Pix2Struct's) skips those layers without them: counted short, its cross-attention's FLOPs
   and cache missing, so it is left uncounted, with the reason, as the outer forward left it. No image features are
   made up.

Its module paths are prefixed with its path in the outer model, so its FLOPs sit on the components its parameters
do. The vision tower is not run: the FLOPs are the language model's alone, as the parameters are.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from embedcalc.modeling.hf_classes import quiet
from embedcalc.modeling.meta_flops import MetaFlopCounter

__all__ = ["Forward", "forward_inputs", "language_model_forward", "meta_forward"]


@dataclass(frozen=True)
class Forward:
    """One meta forward: FLOPs per module path (exclusive of its children; None when it failed, ``error`` says why),
    the cache object it returned, the module that ran, and ``refused``: the outer forward's error where the language
    model ran alone instead (module docstring)."""

    flops: dict[str, int] | None
    error: str | None
    cache: Any
    runner: nn.Module
    refused: str | None = None


def forward_inputs(architecture: str, batch: int, seq_len: int, tgt_len: int) -> dict[str, Any]:
    """The meta token ids a forward of the counted architecture takes (an encoder-decoder's decoder ids too)."""
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    if architecture == "encoder-decoder":
        dec = torch.zeros(batch, tgt_len, dtype=torch.long, device="meta")
        return {"input_ids": ids, "decoder_input_ids": dec, "use_cache": True}
    if architecture == "decoder":
        return {"input_ids": ids, "use_cache": True}
    return {"input_ids": ids}


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


def _run(model: nn.Module, inputs: dict[str, Any], fake: bool) -> tuple[Any, MetaFlopCounter]:
    """One forward under the FLOP counter: on the meta inputs, or (``fake``) on FakeTensors of them, the mode
    transformers itself recognises as tracing (``is_fake_tensor``), where it skips the checks that read a tensor's
    values (a padding mask's ``.all()``, which a meta tensor cannot answer) and takes its trace-safe path."""
    counter = MetaFlopCounter(memo=not fake)
    if not fake:
        with counter, quiet():  # no no_grad: some families' meta paths assert autograd
            return model(**inputs), counter
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)  # the meta parameters are taken as they are
    faked = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    with mode, counter, quiet():
        return model(**faked), counter


def meta_forward(runner: nn.Module, architecture: str, batch: int, seq_len: int, tgt_len: int) -> Forward:
    """``runner``'s forward on meta token ids (module docstring), any failure reported as its first line."""
    inputs = forward_inputs(architecture, batch, seq_len, tgt_len)
    try:
        out, counter = _run(runner, inputs, fake=False)
    except Exception as exc:  # a family's forward on meta tensors: any failure is reported
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        error = f"{type(exc).__name__}: {first}"
        if "meta tensors" not in first:  # not a value only real data has: a fake forward would fail too
            return Forward(None, error, None, runner)
        try:
            out, counter = _run(runner, inputs, fake=True)
        except Exception:  # the first failure is the one to report
            return Forward(None, error, None, runner)
    flops = _exclusive_flops(counter.get_flop_counts(), type(runner).__name__)
    cache = None
    with (
        quiet()
    ):  # the output's field is ``cache`` in transformers 5.24+, ``past_key_values`` (``cache_params``)
        for name in ("cache", "past_key_values", "cache_params"):  # before: the old names warn as deprecated
            cache = getattr(out, name, None) if not isinstance(out, tuple) else None
            if cache is not None:
                break
    return Forward(flops, None, cache, runner)


def _language_model(model: nn.Module, language: str, kept: set[str]) -> nn.Module | None:
    """The counted language model when it may run alone: conditions 1 and 2 of the module docstring."""
    from transformers import PreTrainedModel

    if not language or any(p != language and not p.startswith(language + ".") for p in kept):
        return None
    module = model.get_submodule(language)
    if not isinstance(module, PreTrainedModel):
        return None
    return module if "input_ids" in inspect.signature(module.forward).parameters else None


def language_model_forward(
    model: nn.Module,
    language: str,
    kept: set[str],
    refused: Forward,
    architecture: str,
    batch: int,
    seq_len: int,
) -> Forward:
    """The forward of ``model``'s language model (at path ``language``) alone, where the outer forward failed
    (``refused``) and the module docstring's three conditions hold; else ``refused``, its error saying why the
    language model did not stand in where it ran and fell short."""
    runner = _language_model(model, language, kept)
    if runner is None:
        return refused
    ran: set[str] = set()
    holders = [(n, m) for n, m in runner.named_modules() if any(True for _ in m.parameters(recurse=False))]
    hooks = [m.register_forward_pre_hook(lambda _m, _a, n=n: ran.add(n)) for n, m in holders]
    try:
        alone = meta_forward(runner, architecture, batch, seq_len, seq_len)
    finally:
        for hook in hooks:
            hook.remove()
    if alone.flops is None:
        return replace(
            refused, error=f"{refused.error}; its language model ({language}) alone: {alone.error}"
        )
    idle = [f"{language}.{n}" if n else language for n, _ in holders if n not in ran]
    if idle:
        why = (f"its language model ({language}) runs on token ids alone but leaves {len(idle)} modules with "
               f"parameters unrun ({idle[0]}, ...), which need inputs beyond token ids")  # fmt: skip
        return replace(refused, error=f"{refused.error}; {why}")
    flops = {f"{language}.{k}" if k else language: v for k, v in alone.flops.items()}
    return Forward(flops, None, alone.cache, runner, refused.error)
