"""Zamba2 (Zamba2ForCausalLM; Zyphra 2024, "The Zamba2 Suite", arXiv:2411.15242 §2; transformers'
``configuration_zamba2.py`` / ``modeling_zamba2.py``): a Mamba-2 backbone whose ``hybrid`` layers also run one of
``num_mem_blocks`` shared transformer blocks, mapped onto the layer model's shared block (config/shared_spec.py).

``Zamba2Model.get_layers``: every layer has a Mamba-2 layer (``Zamba2MambaDecoderLayer``: ``input_layernorm``, the
mixer, a residual); where ``layers_block_type[i]`` is ``hybrid`` (legacy files write ``mamba`` for the others,
which ``remap_legacy_layer_types`` reads as ``linear_attention``) the layer is a ``Zamba2HybridLayer``: the shared
``Zamba2AttentionDecoderLayer`` on concat(hidden, embeddings) (``input_layernorm`` of 2 x hidden_size, attention
whose q/k/v read 2 x hidden_size, ``num_attention_heads`` / ``num_key_value_heads`` heads of ``attention_head_dim``
= 2 x hidden_size // num_attention_heads, no biases, RoPE only with ``use_mem_rope``; ``pre_ff_layernorm``; the
gated ``Zamba2MLP`` of ``intermediate_size`` (null: 4 x hidden_size), biased by ``add_bias_linear``), then the
layer's own ``linear`` (hidden -> hidden) into the Mamba-2 layer's input. The j-th hybrid layer runs weight set
j mod ``num_mem_blocks`` (``_tied_weights_keys``) and owns its adapters of ``adapter_rank``: always on the MLP's
gate_up_proj (``gate_up_proj_adapter_list``), on q/k/v too with ``use_shared_attention_adapter``.

``Zamba2MambaMixer``: in_proj hidden -> 2 inner + 2 ``mamba_ngroups`` ``mamba_d_state`` + ``n_mamba_heads`` and
out_proj, both biased by ``add_bias_linear``; a depthwise conv of ``mamba_d_conv`` taps, always with a bias
(``nn.Conv1d(bias=True)``, whatever ``use_conv_bias`` says); A_log / D / dt_bias per head; a gated RMSNorm over
inner; inner = int(``mamba_expand`` x hidden_size), heads of ``mamba_headdim`` = inner // n_mamba_heads. Its scan
keeps the state in float32 on transformers' torch path (tests/sources/hf/test_hf_zamba2.py measures it).
"""

from __future__ import annotations

from typing import Any

from embedcalc.sources.hf.core import read_core
from embedcalc.sources.hf.families.hybrid import TORCH_STATE_DTYPE, positive, replace_mapped
from embedcalc.sources.hf.layered import checked_layer_types, origin, put_layout
from embedcalc.sources.hf.reader import MISSING, Family, KeyReader

_HYBRID, _MAMBA = "hybrid", "linear_attention"
_LEGACY = {"mamba": _MAMBA}  # transformers' _LEGACY_LAYER_TYPE_REMAP, as far as Zamba2 files use it
_IGNORED = {
    "time_step_min": "initialises the Mamba-2 time step; no parameters or FLOPs of its own",
    "time_step_max": "initialises the Mamba-2 time step; no parameters or FLOPs of its own",
    "time_step_floor": "initialises the Mamba-2 time step; no parameters or FLOPs of its own",
    "use_mamba_kernels": "deprecated and without effect (Zamba2Config)",
    "use_mem_eff_path": "whether the fused CUDA path runs the scan; the same computation",
    "use_conv_bias": "Zamba2MambaMixer builds its conv1d with a bias whatever this says",
    "num_logits_to_keep": "how many prompt positions generate() computes logits for; embedcalc's head counts every "
    "position, as the forward pass of the counting rule does",
    "kv_channels": "set by Zamba2Config.__post_init__ (hidden_size // num_attention_heads); the model never reads it",
    "num_query_groups": "set by Zamba2Config.__post_init__ (num_attention_heads); the model never reads it",
}
_MAMBA_KEYS = (
    "n_mamba_heads",
    "mamba_d_state",
    "mamba_ngroups",
    "mamba_d_conv",
    "chunk_size",
    "mamba_expand",
)


def _mamba(r: KeyReader, hidden: int, bias: bool) -> dict[str, Any] | None:
    """The Mamba-2 mixer every layer has, as an embedcalc mixer spec (None and a problem if unusable)."""
    sizes = {name: positive(r, key) for name, key in (("num_heads", "n_mamba_heads"), ("state_size", "mamba_d_state"),
             ("groups", "mamba_ngroups"), ("conv_kernel", "mamba_d_conv"), ("chunk_size", "chunk_size"))}  # fmt: skip
    expand_key, expand, _ = r.value("mamba_expand")
    if any(v is None for v in sizes.values()):
        return None
    if not isinstance(expand, int | float) or isinstance(expand, bool) or not 1 <= expand * hidden < 2**63:
        r.problem(expand_key, f"mamba_expand = {expand!r} must be a positive number")
        return None
    heads, inner = sizes.pop("num_heads"), int(expand * hidden)
    assert heads is not None
    if inner % heads:
        r.problem("n_mamba_heads", f"int(mamba_expand x hidden_size) = {inner} must be a multiple of n_mamba_heads "
                                   f"({heads}): Zamba2MambaMixer views it as heads of mamba_headdim = {inner} // "
                                   f"{heads}, which fails otherwise")  # fmt: skip
        return None
    r.derived("mamba_headdim", inner // heads, "int(mamba_expand x hidden_size) // n_mamba_heads")
    return {"kind": "mamba2", "num_heads": heads, "head_dim": inner // heads, **sizes, "conv_bias": True,
            "bias": bias, "ssm_state_dtype": TORCH_STATE_DTYPE}  # fmt: skip


def _types(r: KeyReader, layers: int) -> tuple[str, list[str] | None]:
    """(the key that decided it, ``hybrid`` / ``linear_attention`` per layer): the file's ``layers_block_type``
    (legacy names remapped), else Zamba2Config's default layout for 54 layers."""
    key, value = r.lookup("layers_block_type")
    if value is MISSING or value is None:
        default = (
            [_MAMBA] + ([_MAMBA] * 5 + [_HYBRID]) * 7 + [_MAMBA] * 4 + [_HYBRID] + [_MAMBA] * 3 + [_HYBRID]
        )
        value = default + [_MAMBA] * 2
    if isinstance(value, list):
        value = [_LEGACY.get(t, t) if isinstance(t, str) else t for t in value]
    return key, checked_layer_types(r, key, value, layers, (_MAMBA, _HYBRID))


def _shared(r: KeyReader, hidden: int, heads: int, kv_heads: Any) -> dict[str, Any] | None:
    """The shared block's use: num_mem_blocks weight sets, the adapters of adapter_rank."""
    copies = positive(r, "num_mem_blocks")
    rank_key, rank, _ = r.value("adapter_rank")
    attn_key, attention, _ = r.value("use_shared_attention_adapter")
    if copies is None:
        return None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        r.problem(rank_key, f"adapter_rank = {rank!r} must be a non-negative integer")
        return None
    if attention and rank and (2 * hidden % heads or kv_heads != heads):
        r.problem(attn_key, f"use_shared_attention_adapter adds an adapter output of 2 x hidden_size = {2 * hidden} "
                            f"to K and V of num_key_value_heads ({kv_heads}) x head_dim ({2 * hidden // heads}), "
                            "which transformers' forward cannot add unless they are equal; set "
                            "use_shared_attention_adapter: false or num_key_value_heads to num_attention_heads with "
                            "hidden_size a multiple of it")  # fmt: skip
        return None
    return {"copies": copies, "adapter_rank": rank, "attention_adapters": bool(attention) and rank > 0,
            "ffn_adapters": rank > 0}  # fmt: skip


def _read_zamba2(r: KeyReader) -> None:
    read_core(r, qkv=False, out=False, ffn="add_bias_linear")
    for key, reason in _IGNORED.items():
        r.ignore(key, reason)
    if (
        r.raw.get("use_shared_mlp_adapter") is True
    ):  # what published files write; false is warned about as undeclared
        r.ignore("use_shared_mlp_adapter", "Zamba2Config no longer declares it: Zamba2MLP builds its gate_up adapters "
                                           "whenever adapter_rank is positive, as this says")  # fmt: skip
    rope_key, rope, _ = r.value("use_mem_rope")
    replace_mapped(r, "position", "rope" if rope else "none", rope_key, origin(r, rope_key),
                   "Zamba2Attention: RoPE only with use_mem_rope")  # fmt: skip
    long_key, long, _ = r.value("use_long_context")
    if long:
        replace_mapped(r, "max_seq_len", 16384, long_key, "file", "Zamba2Config: use_long_context sets 16384")
    else:
        r.ignore(long_key, "false: max_position_embeddings as written")
    hidden, heads, kv_heads = r.data.get("embed_dim"), r.data.get("num_heads"), r.data.get("num_kv_heads")
    layers = r.data.get("num_layers")
    if not all(type(v) is int and v > 0 for v in (hidden, heads, layers)):
        return  # the schema names the bad size
    assert isinstance(hidden, int) and isinstance(heads, int) and isinstance(layers, int)
    head_dim = 2 * hidden // heads
    replace_mapped(r, "head_dim", head_dim, "hidden_size, num_attention_heads", "family",
                   "Zamba2Config: attention_head_dim = 2 x hidden_size // num_attention_heads")  # fmt: skip
    r.derived("attention_head_dim", head_dim, "2 x hidden_size // num_attention_heads")
    r.derived("head_dim", head_dim, "2 x hidden_size // num_attention_heads")
    r.derived("attention_hidden_size", 2 * hidden, "2 x hidden_size")
    _, bias, _ = r.value("add_bias_linear")
    mamba = _mamba(r, hidden, bool(bias))
    types_key, types = _types(r, layers)
    shared = _shared(r, hidden, heads, kv_heads)
    if mamba is None or types is None or shared is None:
        return
    r.derived(
        "hybrid_layer_ids", [i for i, t in enumerate(types) if t == _HYBRID], "the hybrid layers' indices"
    )
    if _HYBRID not in types:
        for key in ("num_mem_blocks", "adapter_rank", "use_shared_attention_adapter"):
            r.ignore(key, "no layer is a hybrid layer: no shared block")
    r.put("mixer", mamba, ", ".join(k for k in _MAMBA_KEYS if k in r.raw) or "n_mamba_heads",
          origin(r, ", ".join(_MAMBA_KEYS)), "the Mamba-2 layer every layer has")  # fmt: skip
    r.put(
        "ffn",
        {"kind": "none"},
        "layers_block_type",
        "family",
        "the MLP is the shared block's, in hybrid layers",
    )
    names = ["hybrid" if t == _HYBRID else "default" for t in types]
    note = f"{names.count('hybrid')} hybrid layers run the shared block ({shared['copies']} weight sets)"
    keys = ("num_mem_blocks", "adapter_rank", "use_shared_attention_adapter")
    put_layout(r, names, {"hybrid": {"ffn": {"kind": "dense"}, "shared": shared}},
               ", ".join(k for k in (types_key, *keys) if k in r.raw) or types_key, note)  # fmt: skip


_DEFAULTS: dict[str, Any] = dict(
    vocab_size=32000, max_position_embeddings=4096, hidden_size=2560, num_hidden_layers=54, layers_block_type=None,
    mamba_d_state=64, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=8, chunk_size=256,
    add_bias_linear=False, intermediate_size=None, hidden_act="gelu", num_attention_heads=32, num_key_value_heads=None,
    attention_dropout=0.0, num_mem_blocks=1, use_shared_attention_adapter=False, adapter_rank=128, use_mem_rope=False,
    use_long_context=False, tie_word_embeddings=True,
)  # fmt: skip
FAMILIES = (
    Family("zamba2", "Zamba2Config", "Zamba2ForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small", _DEFAULTS,
           _read_zamba2, {"layer_types": "layers_block_type", "head_dim": "attention_head_dim"}),
)  # fmt: skip
