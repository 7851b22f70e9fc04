"""Bamba (BambaForCausalLM; IBM, Princeton, CMU and UIUC 2024, "Bamba: an inference-efficient hybrid Mamba-2
model"; transformers' ``configuration_bamba.py`` / ``modeling_bamba.py``): a LLaMA-shaped decoder whose layers are
Mamba-2 layers except those ``attn_layer_indices`` lists, which are GQA attention.

``BambaDecoderLayer``: ``input_layernorm`` (RMSNorm), then the layer's mixer (``BambaMixer`` when
``layers_block_type[i]`` is ``linear_attention``, ``BambaAttention`` when it is ``full_attention``) and its residual;
then ``pre_ff_layernorm`` and the gated ``BambaMLP`` (gate, up, down of ``intermediate_size``, bias ``mlp_bias``)
in **every** layer. ``layers_block_type`` is a property of ``BambaConfig``: ``full_attention`` exactly at the
indices of ``attn_layer_indices`` (null: none). The attention: q/k/v/o of ``num_attention_heads`` /
``num_key_value_heads`` heads of ``head_dim`` (a key the class does not declare: ``getattr(config, "head_dim",
hidden_size // num_attention_heads)``), bias ``attention_bias``, RoPE over half of each head
(``BambaConfig.__post_init__`` hard-codes ``partial_rotary_factor`` 0.5, whatever the file says; no parameters).
``BambaMixer`` is Granite 4.0-H's Mamba-2 layer on the same ``mamba_*`` keys
(:func:`~embedcalc.sources.hf.families.hybrid.mamba2_spec`): in_proj d -> 2 inner + 2 groups state + heads (bias
``mamba_proj_bias``), a depthwise conv (bias ``mamba_conv_bias``), A_log / D / dt_bias per head, a gated RMSNorm over
inner in ``mamba_n_groups`` groups, out_proj; inner = ``mamba_expand`` x hidden_size = ``mamba_n_heads`` x
``mamba_d_head``. Its scan state is kept in float32 by transformers' torch path (tests/sources/hf/test_hf_ssm.py
measures it on the cache).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import mamba2_spec
from embedcalc.sources.hf.layered import int_list, put_layout
from embedcalc.sources.hf.mappings import default_head_dim
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_MAMBA_KEYS = ("mamba_n_heads", "mamba_d_state", "mamba_d_head", "mamba_n_groups", "mamba_d_conv", "mamba_chunk_size",
               "mamba_expand", "mamba_conv_bias", "mamba_proj_bias")  # fmt: skip
_IGNORED = {
    "time_step_limit": "clamps the Mamba-2 time step; element-wise only (its upper bound may be Infinity)",
    "z_loss_coefficient": "the weight of a training loss on the logits; no parameters or matmul FLOPs",
    "num_logits_to_keep": "how many prompt positions generate() computes logits for; embedcalc's head counts every "
    "position, as the forward pass of the counting rule does",
    "use_mamba_kernels": "whether the fused CUDA kernels run the scan; the same computation",
    "time_step_min": "initialises the Mamba-2 time step; BambaModel never reads it",
    "time_step_max": "initialises the Mamba-2 time step; BambaModel never reads it",
    "time_step_floor": "initialises the Mamba-2 time step; BambaModel never reads it",
}


def _read_bamba(r: KeyReader) -> None:
    read_core(r, qkv="attention_bias", out="attention_bias", ffn="mlp_bias")
    for key, reason in _IGNORED.items():
        r.ignore(key, reason)
    head_dim = default_head_dim(r)
    r.ignore("partial_rotary_factor", "BambaConfig sets 0.5 whatever the file says (mapped as rotary_dim)")
    if isinstance(head_dim, int):
        r.fixed(
            "rotary_dim",
            head_dim // 2,
            f"BambaConfig hard-codes partial_rotary_factor 0.5: int({head_dim} * 0.5)",
        )
    mamba = mamba2_spec(r)  # read first: a refused layout leaves no mamba_* key unread
    layers = r.data.get("num_layers")
    key, indices = r.lookup("attn_layer_indices")
    if not isinstance(layers, int) or mamba is None:
        return
    if indices is MISSING or indices is None:
        indices = []
    attention = int_list(r, key, indices, layers)
    if attention is None:
        return
    types = ["full_attention" if i in attention else "linear_attention" for i in range(layers)]
    types_key, written = r.lookup("layers_block_type")
    if written is not MISSING:
        r.derived(types_key, types, "the attention layers attn_layer_indices lists")
    if "linear_attention" not in types:
        mamba = None
        for k in _MAMBA_KEYS:
            r.ignore(k, "no layer is a Mamba-2 layer")
    names = ["mamba" if t == "linear_attention" else "default" for t in types]
    note = f"{names.count('mamba')} Mamba-2 layers, {names.count('default')} attention layers; an MLP in every layer"
    wanted = [key, *(_MAMBA_KEYS if mamba is not None else ())]
    put_layout(
        r, names, {"mamba": {"mixer": mamba or {}}}, ", ".join(k for k in wanted if k in r.raw) or key, note
    )


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=262144,
    attention_dropout=0.0, attn_layer_indices=None, mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1,
    mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
    mamba_proj_bias=False, attention_bias=False, mlp_bias=False,
)  # fmt: skip
FAMILIES = (
    Family("bamba", "BambaConfig", "BambaForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small", _DEFAULTS,
           _read_bamba, {"layer_types": "layers_block_type"}, non_finite=frozenset({"time_step_limit"})),
)  # fmt: skip
