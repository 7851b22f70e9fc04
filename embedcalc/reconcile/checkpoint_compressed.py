"""DeepSeek-V4's checkpoint names -> embedcalc's breakdown keys (attention kind ``compressed``, hyper-connections):
the names deepseek-ai's DeepSeek-V4 checkpoints carry and transformers 5.24 / 5.25 saves (``DeepseekV4ForCausalLM``
writes them back through its conversion mapping, under ``model.``), and transformers' own module names.

Inside a layer: ``attn.wq_a`` / ``q_norm`` / ``wq_b`` (``self_attn.q_a_proj`` / ``q_a_norm`` / ``q_b_proj``) are the
query latent's ``attention/q_a``, ``q_a_norm``, ``q_b``; ``attn.wkv`` and its norm (``attn.kv_norm``, saved by
transformers as ``attn.norm``; ``self_attn.kv_proj`` / ``kv_norm``) ``attention/kv`` / ``kv_norm``; ``attn.wo_a`` /
``wo_b`` (``o_a_proj`` / ``o_b_proj``) ``attention/out``; ``attn.attn_sink`` (``self_attn.sinks``)
``attention/sinks``; ``attn.compressor.*`` (``wkv``, ``wgate``, ``ape``, ``norm``) ``attention/compressor``;
``attn.indexer.wq_b`` / ``weights_proj`` ``attention/index_q`` / ``index_weights`` and ``attn.indexer.compressor.*``
``attention/index_compressor``; ``hc_attn_{fn,base,scale}`` / ``hc_ffn_*`` (``attn_hc.*``, ``ffn_hc.*``)
``hyper/attention`` / ``hyper/ffn``.
``ffn.gate.bias`` is the router's ``e_score_correction_bias`` and ``ffn.gate.tid2eid`` the hash layers' table:
buffers; a linear's ``scale`` is its FP8 block scale. Outside the layers ``embed`` is the token table, ``head`` the
LM head, ``hc_head_*`` (``hc_head.*``) ``<stack>/hyper_head``; ``mtp.*`` is the multi-token-prediction layer
transformers does not build.
"""

from __future__ import annotations

from dataclasses import replace

from embedcalc.reconcile.checkpoint_names import TensorRole, within_layer

_ATTENTION = {
    "wq_a": "q_a", "q_a_proj": "q_a", "q_norm": "q_a_norm", "q_a_norm": "q_a_norm", "wq_b": "q_b", "q_b_proj": "q_b",
    "wkv": "kv", "kv_proj": "kv", "norm": "kv_norm", "kv_norm": "kv_norm", "wo_a": "out", "wo_b": "out",
    "o_a_proj": "out", "o_b_proj": "out", "attn_sink": "sinks", "sinks": "sinks",
}  # fmt: skip
_INDEXER = {
    "wq_b": "index_q",
    "q_b_proj": "index_q",
    "weights_proj": "index_weights",
    "scorer": "index_weights",
}


def compressed_role(role: TensorRole, param: str) -> TensorRole:
    """``role`` of a tensor in a layer whose attention is kind compressed, placed by its DeepSeek-V4 name (module
    docstring); unchanged for the names the general rules place (the MoE, the norms)."""
    stack = role.key.partition("/")[0] if role.key else "decoder"
    inside = within_layer(role.module, role.layer)
    if inside[:2] == ["ffn", "gate"] and param in ("bias", "tid2eid"):
        return replace(role, key=None, kind="buffer")
    if (
        param == "scale" and inside and inside[-1] not in ("attn_hc", "ffn_hc")
    ):  # FP8's block scales (wq_a.scale)
        role = replace(role, kind="scale")
    if not inside or inside[0] not in ("attn", "self_attn"):
        return role
    rest = inside[1:]
    if rest[:1] == ["compressor"] and "indexer" not in rest:
        return replace(role, key=f"{stack}/attention/compressor")
    if "indexer" in rest:
        after = rest[rest.index("indexer") + 1 :]
        part = _INDEXER.get(after[0]) if after else None
        return replace(role, key=f"{stack}/attention/{part or 'index_compressor'}")
    part = _ATTENTION.get(rest[0] if rest else param)
    return replace(role, key=f"{stack}/attention/{part}") if part else role
