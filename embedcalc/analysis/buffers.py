"""Fixed buffers the model holds beside its parameters (DESIGN.md §4: buffers are not parameters): values per
breakdown key, and their bytes as part of the weights' memory.

Only the **persistent** buffers count, those a model saves in its state dict and so holds as data, not the tables a
model may recompute on the fly in any layout it likes (RoPE's cos/sin, sinusoidal positions: transformers keeps an
``inv_freq`` of rotary_dim / 2 floats, embedcalc's torch model its (max_len, head_dim) tables, neither saved).
Today that is one kind:

- lightning attention (MiniMax; transformers 5.24 ``MiniMaxLightningAttention.__init__``, four ``nn.Buffer``, persistent
  by default): per lightning layer with H heads and blocks of B tokens, ``slope_rate`` (H, 1, 1), ``query_decay`` and
  ``key_decay`` (H, B, 1) and ``diagonal_decay`` (1, H, B, B): H (1 + 2 B + B²) values, under the layer's
  ``mixer/ssm`` key (the scan that reads them). MiniMax-M1 (70 lightning layers, H 64, B 256):
  70 x 64 x 66,049 = 295,899,520 values, 591,799,040 bytes in bf16.

Conventions: a buffer is held in the model's dtype (transformers casts floating buffers with the model: the activation
dtype for inference, bf16 under fp8 and fp16 under the weight-only formats; training's weight dtype, 2 bytes in mixed
precision, else 4), and it has no gradient and no optimizer state. It is replicated on every tensor-parallel rank
(the lightning mixer is not sharded) and not sharded by ZeRO-3 / FSDP2, which shard parameters only; a pipeline stage
holds the buffers of its own layers. ``weights_bytes`` includes them, and ``buffers_bytes`` says how much of it they
are. Every term takes a :class:`~embedcalc.analysis.structure.Dims`, so the sweep grid calls the same functions.
"""

from __future__ import annotations

from embedcalc.analysis.structure import Dims, Num
from embedcalc.config.mixer_plan import Mixer
from embedcalc.config.resolved import ResolvedShape


def mixer_buffer_values(m: Mixer) -> int:
    """Values of one mixer layer's persistent buffers: lightning's decay tables H (1 + 2 B + B²), else 0."""
    if not m.lightning:
        return 0
    block = m.chunk_size
    return m.num_heads * (1 + 2 * block + block * block)


def buffer_terms(config: ResolvedShape, x: Dims) -> dict[str, Num]:
    """Persistent buffer values by breakdown key of the layers in ``x`` (a stage's, or all)."""
    out: dict[str, Num] = {}
    for sd in x.stacks:
        for block, count in sd.blocks:
            if block.mixer is None or not (per_layer := mixer_buffer_values(block.mixer)):
                continue
            layers = 1 if config.shared_layers else count
            key = f"{sd.name}/mixer/ssm"
            out[key] = out[key] + layers * per_layer if key in out else layers * per_layer
    return out


def buffer_bytes(config: ResolvedShape, x: Dims, element_bytes: int) -> Num:
    """Bytes of the persistent buffers of the layers in ``x``, each value ``element_bytes`` (module docstring)."""
    total: Num = 0
    for value in buffer_terms(config, x).values():
        total = total + value
    return total * element_bytes
