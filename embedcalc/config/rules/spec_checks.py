"""One spec of the layer model against the flat shape of its config (DESIGN.md §9): an attention spec (latent
attention complete, a sparse indexer wide enough, KV heads dividing the heads, cross-attention only where it means
something, windows within the context and only where attention is causal), an FFN spec's activation, a mixer's
architecture and norm placement. :class:`~embedcalc.config.rules.layers.LayerRules` runs them on the default block's
specs and on every named block's, with ``where`` the error path (``attention``, ``blocks.NAME.attention``).
"""

from __future__ import annotations

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

from embedcalc.config.block_spec import AttentionSpec
from embedcalc.config.ffn_spec import FFNSpec
from embedcalc.config.mixer_spec import MixerSpec
from embedcalc.config.rules.shape import written_key
from embedcalc.config.spec_shapes import MLA_FIELDS, SPARSE_FIELDS


def check_ffn_activation(spec: FFNSpec, info: ValidationInfo, where: str) -> None:
    """xIELU learns its two scalars once per dense FFN (transformers' ApertusMLP); experts that each carry them
    are a model no family builds, so embedcalc refuses to guess how many."""
    if spec.kind == "moe" and info.data.get("activation") == "xielu":
        raise PydanticCustomError(
            "xielu_moe",
            "{where}: kind moe with activation xielu: xIELU's learned scalars are modelled for dense FFNs only "
            "(Apertus); use a dense ffn, or activation relu for the same matmuls",
            {"where": where},
        )


def check_mixer(spec: MixerSpec, info: ValidationInfo, where: str) -> None:
    """A recurrent mixer scans causally: decoders only (an encoder's layers see the whole sequence); one beside the
    block's attention shares a pre-norm input with it."""
    arch = info.data.get("architecture")
    if spec.kind != "attention" and arch != "decoder":
        raise PydanticCustomError(
            "mixer_needs_decoder",
            "{where}.kind {kind} is for decoder stacks (a causal scan, or no mixer); architecture {arch} "
            "needs attention. Use kind attention or architecture decoder",
            {"where": where, "kind": spec.kind, "arch": arch},
        )
    placement = info.data.get("norm_placement")
    if spec.parallel_attention and placement not in (None, "pre"):
        raise PydanticCustomError(
            "parallel_mixers_need_pre",
            "{where}.parallel_attention runs attention and {kind} on one pre-normalised input (Falcon-H1), but "
            "norm_placement is {placement}; set norm_placement: pre or remove parallel_attention",
            {"where": where, "kind": spec.kind, "placement": placement},
        )


def check_sparse(spec: AttentionSpec, where: str) -> None:
    """A sparse layer's indexer: complete, and wide enough for the rotary
    dims it rotates (transformers' ``DeepseekV32Indexer`` splits index_head_dim into qk_rope_head_dim + the rest)."""
    missing = [name for name in SPARSE_FIELDS if getattr(spec, name) is None]
    if missing:
        raise PydanticCustomError(
            "sparse_incomplete",
            "{where}: kind sparse needs {fields} (DeepSeek-V3.2: index_heads 64, index_head_dim 128, "
            "index_topk 2048)",
            {"where": where, "fields": ", ".join(missing)},
        )
    rope, width = spec.qk_rope_head_dim or 0, spec.index_head_dim or 0
    if width < rope:
        raise PydanticCustomError(
            "index_head_dim_under_rope",
            "{where}.index_head_dim ({width}) must be at least qk_rope_head_dim ({rope}): the indexer rotates the "
            "first qk_rope_head_dim channels of its queries and keys; use index_head_dim {rope} or more",
            {"where": where, "width": width, "rope": rope},
        )


def check_block_sparse(spec: AttentionSpec, info: ValidationInfo, where: str) -> None:
    """A block indexer's heads each select for a group of query heads (transformers' ``MiniMaxM3VLIndexer``
    repeats its selection num_heads / index_n_heads times), and its layer has no window or chunk of its own."""
    heads, index_heads = spec.num_heads or info.data.get("num_heads"), spec.index_heads or 0
    if isinstance(heads, int) and heads % index_heads:
        raise PydanticCustomError(
            "index_heads_divide",
            "{where}.index_heads ({index}) must divide num_heads ({heads}): each indexer head selects the key "
            "blocks of num_heads / index_heads query heads",
            {"where": where, "index": index_heads, "heads": heads},
        )
    for name in ("sliding_window", "chunk_size", "cross"):
        if getattr(spec, name) not in (None, False):
            raise PydanticCustomError(
                "block_sparse_limited",
                "{where}.{name} with index_block_size: a block-sparse layer selects its key blocks among all "
                "earlier tokens; write {name}: {default} in this block or remove index_block_size",
                {"where": where, "name": name, "default": "false" if name == "cross" else "null"},
            )


# what cross-attention over an external sequence cannot have: latent attention, a causal window or chunk, sinks
_NOT_CROSS = {
    "sliding_window": None,
    "chunk_size": None,
    "sinks": False,
    "output_gate": False,
    "head_gate": False,
}


def check_cross(spec: AttentionSpec, where: str) -> None:
    """Cross-attention is standard attention whose every query sees all the external tokens: refuse the fields
    that would limit or change that (their values would be silently ignored)."""
    if spec.kind != "standard":
        raise PydanticCustomError(
            "cross_needs_standard",
            "{where}.cross applies to kind standard (Llama-3.2-Vision's cross-attention has plain GQA "
            "projections), but kind is {kind}; set kind: standard or remove cross",
            {"where": where, "kind": spec.kind},
        )
    for name, default in _NOT_CROSS.items():
        value = getattr(spec, name)
        if value != default:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            raise PydanticCustomError(
                "field_with_cross",
                "{where}.{name} ({value}) shapes causal self-attention, but cross is true: every query sees "
                "all context_tokens external tokens; remove {name} from this block (write {name}: {default} to "
                "drop a value it inherits) or cross",
                {
                    "where": where,
                    "name": name,
                    "value": shown,
                    "default": "null" if default is None else "false",
                },
            )


def check_attention(spec: AttentionSpec, info: ValidationInfo, where: str) -> None:
    """Rules an attention spec must meet in this config: MLA complete, windows within the context, causal only."""
    if spec.kind in ("mla", "sparse"):
        missing = [name for name in MLA_FIELDS if getattr(spec, name) is None]
        if missing:
            raise PydanticCustomError(
                "mla_incomplete",
                "{where}: kind {kind} needs {fields} (DeepSeek-V3: kv_lora_rank 512, qk_nope_head_dim 128, "
                "qk_rope_head_dim 64, v_head_dim 128)",
                {"where": where, "kind": spec.kind, "fields": ", ".join(missing)},
            )
    if spec.kind == "sparse":
        check_sparse(spec, where)
    if spec.kind == "compressed":
        check_compressed(spec, where)
    if spec.index_block_size is not None:
        check_block_sparse(spec, info, where)
    heads, kv = spec.num_heads or info.data.get("num_heads"), spec.num_kv_heads
    if kv is None and spec.num_heads is not None:  # the block's own heads, the flat KV heads
        kv = info.data.get("num_kv_heads") or info.data.get("num_heads")
    if kv is not None and isinstance(heads, int) and heads % kv:
        from embedcalc.config.divisors import nearest_divisors  # on a refusal only (start-up)

        near = nearest_divisors(heads, kv, 2)  # bounded: a 30-digit num_heads tried every integer up to it
        raise PydanticCustomError(
            "kv_heads_not_divisor",
            "{where}.num_kv_heads ({kv}) must divide {heads_key} ({heads}): each KV head serves {heads_key} / "
            "num_kv_heads query heads; use num_kv_heads {fix}",
            {"where": where, "kv": kv, "heads": heads,
             "heads_key": f"{where}.num_heads" if spec.num_heads else written_key(info, "num_heads"),
             "fix": " or ".join(map(str, sorted(near)))},
        )  # fmt: skip
    if spec.cross:
        check_cross(spec, where)
    if spec.out_groups is not None or spec.out_rank is not None:
        check_grouped_output(spec, heads, where)
    if spec.cross and info.data.get("architecture") != "decoder":
        raise PydanticCustomError(
            "cross_needs_decoder",
            "{where}.cross is cross-attention from a decoder's text to an external sequence (Llama-3.2-Vision); "
            "architecture {arch} has none (an encoder-decoder's decoder attends to its encoder already). Use "
            "architecture decoder or remove cross",
            {"where": where, "arch": info.data.get("architecture")},
        )
    if spec.cross and info.data.get("norm_placement") == "parallel":
        raise PydanticCustomError(
            "cross_not_parallel",
            "{where}.cross: a cross-attention block runs its attention and FFN one after the other "
            "(Llama-3.2-Vision), but norm_placement is parallel; use norm_placement pre or remove cross",
            {"where": where},
        )
    arch, context = info.data.get("architecture"), info.data.get("max_seq_len")
    for name in ("sliding_window", "chunk_size"):
        size = getattr(spec, name)
        if size is None:
            continue
        if arch == "encoder":
            raise PydanticCustomError(
                "window_needs_decoder",
                "{where}.{name} ({size}) limits causal self-attention and its KV cache; architecture encoder has "
                "none. Remove {name}",
                {"where": where, "name": name, "size": size},
            )
        if context is not None and size > context:
            raise PydanticCustomError(
                "window_over_context",
                "{where}.{name} ({size}) is larger than the context max_seq_len ({context}), so it limits "
                "nothing; use at most {context} or remove {name}",
                {"where": where, "name": name, "size": size, "context": context},
            )


def check_grouped_output(spec: AttentionSpec, heads: object, where: str) -> None:
    """A grouped low-rank output projection (DeepSeek-V4's o_groups, o_lora_rank): both fields, whole heads per
    group."""
    if spec.out_groups is None or spec.out_rank is None:
        given, missing = ("out_groups", "out_rank") if spec.out_rank is None else ("out_rank", "out_groups")
        raise PydanticCustomError(
            "grouped_output_incomplete",
            "{where}.{given} sets a grouped low-rank output projection, which also needs {missing} "
            "(DeepSeek-V4-Flash: out_groups 8, out_rank 1024); set both or neither",
            {"where": where, "given": given, "missing": missing},
        )
    if isinstance(heads, int) and heads % spec.out_groups:
        raise PydanticCustomError(
            "grouped_output_heads",
            "{where}.out_groups ({groups}) must divide the heads ({heads}): each group projects whole heads; use a "
            "divisor of {heads}",
            {"where": where, "groups": spec.out_groups, "heads": heads},
        )


def check_shared(
    attention: AttentionSpec, ffn: FFNSpec, mixer: MixerSpec, info: ValidationInfo, where: str
) -> None:
    """A block variant with ``shared`` (Zamba2's hybrid layer): a recurrent mixer after a shared block of standard
    self-attention and a dense FFN, pre-normalised (config/shared_spec.py); anything else has no model here."""
    problem = None
    if mixer.kind in ("attention", "projection", "none") or mixer.parallel_attention:
        problem = (f"mixer kind {mixer.kind}" + (" with parallel_attention" if mixer.parallel_attention else ""),
                   "a recurrent mixer (mixer: {kind: mamba2, ...})")  # fmt: skip
    elif attention.kind != "standard" or attention.cross or attention.kv_shared or attention.index_block_size:
        problem = (f"attention kind {attention.kind}" + (" (cross, shared K/V or a block indexer)"
                   if attention.kind == "standard" else ""), "standard self-attention")  # fmt: skip
    elif ffn.kind != "dense":
        problem = (f"ffn kind {ffn.kind}", "a dense FFN (ffn: {kind: dense})")
    elif info.data.get("norm_placement") not in (None, "pre"):
        problem = (f"norm_placement {info.data.get('norm_placement')}", "norm_placement pre")
    if problem is not None:
        raise PydanticCustomError(
            "shared_block_shape",
            "{where}.shared runs a shared block of attention and FFN before a recurrent mixer (Zamba2), but the "
            "block has {found}; it needs {needed}",
            {"where": where, "found": problem[0], "needed": problem[1]},
        )


def check_compressed(spec: AttentionSpec, where: str) -> None:
    """DeepSeek-V4's attention: a query latent; overlapping windows only with a compressor; an indexer (all three of
    its fields, or none) only over overlapping windows."""
    if spec.q_lora_rank is None:
        raise PydanticCustomError(
            "compressed_incomplete",
            "{where}: kind compressed needs q_lora_rank, the rank of its query latent (DeepSeek-V4-Flash: 1024)",
            {"where": where},
        )
    if spec.compress_overlap and not spec.compress_rate:
        raise PydanticCustomError(
            "compressed_overlap_without_rate",
            "{where}.compress_overlap pools overlapping windows of compress_rate tokens, but compress_rate is 0 "
            "(no compressor); set compress_rate (DeepSeek-V4: 4) or remove compress_overlap",
            {"where": where},
        )
    fields = ("index_heads", "index_head_dim", "index_topk")
    missing = [name for name in fields if getattr(spec, name) is None]
    if spec.compress_overlap and 0 < len(missing) < len(fields):
        raise PydanticCustomError(
            "compressed_indexer_incomplete",
            "{where}: kind compressed with an indexer needs index_heads, index_head_dim and index_topk; missing "
            "{fields} (DeepSeek-V4-Flash: 64, 128, 512)",
            {"where": where, "fields": ", ".join(missing)},
        )
