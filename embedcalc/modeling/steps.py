"""What one step is: random token inputs, the loss a training step takes (cross-entropy over the logits, or torch's
parallel cross-entropy over vocabulary-sharded DTensor logits), the step itself (an inference forward, or forward +
backward + AdamW), and activation recomputation. Every bench (one process, generation's prompts, torchrun ranks,
the fake-process-group verify) builds its steps here.

Inference runs under ``torch.inference_mode``; a training step is forward + backward + ``AdamW.step``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import Tensor, nn

from embedcalc.config.resolved import ResolvedShape


def make_inputs(
    config: ResolvedShape, batch_size: int, seq_len: int, tgt_len: int | None, device: torch.device
) -> tuple[Tensor, Tensor | None]:
    """Random token ids: (B, S) for the first stack and, for an encoder-decoder, (B, T) for the decoder."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    src = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=gen).to(device)  # (B, S)
    if config.architecture != "encoder-decoder":
        return src, None
    # (B, T)
    tgt = torch.randint(0, config.vocab_size, (batch_size, tgt_len or seq_len), generator=gen).to(device)
    return src, tgt


def training_loss(output: Any, targets: Tensor) -> Tensor:
    """The loss a real training step would take: cross-entropy over the logits (in float32, as mixed-precision
    recipes do) when the model has an LM head, else the mean of its headline output (pooled or hidden)."""
    logits = getattr(output, "logits", None)
    if isinstance(logits, Tensor):
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    main = getattr(output, "main", output)
    if not isinstance(main, Tensor):
        raise TypeError(f"model returned {type(output).__name__}, expected a tensor or a TransformerOutput")
    return main.float().mean()


def backward_parallel_loss(logits: Any, targets: Tensor) -> None:
    """Cross-entropy over vocab-sharded DTensor logits (a tensor-parallel LM head) and its backward, both inside
    torch's ``loss_parallel``, which computes the softmax across the shards without gathering the vocabulary."""
    from torch.distributed.tensor.parallel import loss_parallel

    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()  # type: ignore[no-untyped-call]


def backward_training_loss(forward: Callable[[], Any], targets: Tensor) -> None:
    """Run ``forward`` and backpropagate :func:`training_loss`, or torch's parallel cross-entropy when the logits are
    sharded over the vocabulary (:func:`backward_parallel_loss`; a DTensor can exist only once
    torch.distributed.tensor is loaded). As a trainer does (transformers' ``Trainer.compute_loss`` returns the loss
    alone), only the loss is held through the backward: the logits' memory is free by then (the log-softmax keeps
    its own output)."""
    output = forward()
    tensor = sys.modules.get("torch.distributed.tensor")
    logits = getattr(output, "logits", None)
    if tensor is not None and isinstance(logits, tensor.DTensor):
        backward_parallel_loss(logits, targets)
        return
    loss = training_loss(output, targets)
    del output, logits
    loss.backward()  # type: ignore[no-untyped-call]


def make_step(
    model: nn.Module,
    inputs: tuple[Tensor, Tensor | None],
    mode: Literal["inference", "training"],
    fused: bool = True,
) -> Callable[[], None]:
    """One inference forward, or one training step (forward, :func:`backward_training_loss`, AdamW step).
    ``fused=False``: the for-each AdamW, for parameters the fused kernel does not take (tensor-parallel DTensors)."""
    src, tgt = inputs
    args = (src,) if tgt is None else (src, tgt)
    if mode == "inference":
        model.eval()

        def infer() -> None:
            with torch.inference_mode():
                model(*args)

        return infer
    model.train()
    # the fused kernel (CUDA, and CPU since torch 2.4) updates in place with no full-size temporaries, so the
    # measured peak is the optimizer state itself
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=fused)
    targets = args[-1]  # next-token-style targets: the last stack's own ids (their values do not change cost)

    def train() -> None:
        backward_training_loss(lambda: model(*args), targets)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # persistent gradient buffers, as DDP/Megatron keep them

    return train


def apply_recompute(model: torch.nn.Module, recompute: Literal["selective", "full"]) -> None:
    """Activation checkpointing (``torch.utils.checkpoint``, non-reentrant) as Korthikanti et al. 2022 define it.

    full: every block keeps only its input and recomputes itself in the backward pass.
    selective: only the attention core (Q·Kᵀ, softmax, ·V: the n² tensors) is recomputed.
    """
    from torch.utils.checkpoint import checkpoint

    from embedcalc.modeling.attention import AttentionBase
    from embedcalc.modeling.layers import Block

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def checkpointed(*args: Any, **kwargs: Any) -> Any:
            return checkpoint(fn, *args, use_reentrant=False, **kwargs)

        return checkpointed

    for module in model.modules():
        if recompute == "full" and isinstance(module, Block):
            module.forward = wrap(module.forward)  # type: ignore[method-assign]
        elif recompute == "selective" and isinstance(module, AttentionBase):
            module._core = wrap(module._core)  # type: ignore[method-assign]
