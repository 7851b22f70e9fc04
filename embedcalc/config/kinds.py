"""The config's vocabularies (DESIGN.md §3, §9, §16): every ``Literal`` a field, a spec or the resolved view is
typed with, in one leaf module that imports nothing of embedcalc — so the schema's generated typing bases
(:mod:`embedcalc.config.fields`) and the resolved view (:mod:`embedcalc.config.resolved`,
:mod:`embedcalc.config.layer_plan`, :mod:`embedcalc.config.mixer_plan`) both read them without importing each
other. The dtype vocabulary is :mod:`embedcalc.config.dtypes`'s."""

from __future__ import annotations

from typing import Literal

# the whole model
Architecture = Literal["encoder", "decoder", "encoder-decoder"]
Activation = Literal["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu", "xielu"]
Norm = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["post", "pre", "sandwich", "parallel"]
Position = Literal["learned", "sinusoidal", "rope", "relative", "alibi", "none"]
# the weight matrices a low-precision dtype (fp8, FP4, weight-only int) covers: every linear layer's inside the
# layers, or only the routed experts' (gpt-oss's MXFP4 checkpoints)
Quantized = Literal["layers", "experts"]

# one block (the layer model)
AttentionKind = Literal["standard", "mla", "sparse", "compressed"]
QKNorm = Literal["none", "head", "full"]
FFNKind = Literal["dense", "moe", "none", "projection"]
# the sublayers a block may replace by one bias-free embed_dim x embed_dim linear (DeciLM's replace_with_linear)
Projected = Literal["mixer", "ffn"]
MixerKind = Literal[
    "attention", "mamba", "mamba2", "gated_deltanet", "kda", "short_conv", "lightning", "projection", "none"
]
