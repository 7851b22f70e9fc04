"""What a config means once its architecture-dependent defaults are resolved: head_dim, KV heads, FFN width,
norm placement, pooler, LM head, ... — the ``resolved_*`` properties every count reads.

:class:`ResolvedShape` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields;
keeping the defaults apart from the validation rules keeps each module about one thing. Also the value types
shared by the schema and these properties.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Self

from embedcalc.config.config_fields import ConfigFields
from embedcalc.config.kinds import NormPlacement, Projected
from embedcalc.config.layer_plan import FFN as ResolvedFFN
from embedcalc.config.layer_plan import Attention, Block, Shared, StackPlan
from embedcalc.config.mixer_plan import resolve_mixer
from embedcalc.config.spec_shapes import DEFAULT_BLOCK, base_attention_spec, merge_spec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from embedcalc.config.fields import AttentionFields, FFNFields, MixerFields, SharedFields


GATED_ACTIVATIONS = frozenset({"swiglu", "geglu"})


class ResolvedShape(ConfigFields):
    """Resolved defaults and derived sizes; the fields themselves are declared by ``ModelConfig`` (and by the
    record of a shipped preset, :mod:`embedcalc.config.records`, which shares this mixin)."""

    # the classes of the attention, FFN and mixer specs the default block is built from (the schema's models, or
    # the records for a record)
    spec_types: ClassVar[tuple[type[AttentionFields], type[FFNFields], type[MixerFields]]]

    # what the schema's model and the record both offer (pydantic's signatures, the part used)
    if TYPE_CHECKING:

        def model_dump(self, *, mode: str = ..., exclude_unset: bool = ...) -> dict[str, Any]: ...

        def model_copy(self, *, update: Mapping[str, Any] | None = ...) -> Self: ...

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.embed_dim // self.num_heads

    @property
    def resolved_kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def resolved_ffn_dim(self) -> int:
        return self.ffn_dim if self.ffn_dim is not None else 4 * self.embed_dim

    @property
    def resolved_decoder_layers(self) -> int:
        if self.architecture != "encoder-decoder":
            return 0
        return self.num_decoder_layers if self.num_decoder_layers is not None else self.num_layers

    @property
    def total_layers(self) -> int:
        """Layers in both stacks (an encoder-decoder's encoder and decoder layers; else num_layers)."""
        return self.num_layers + self.resolved_decoder_layers

    @property
    def resolved_norm_placement(self) -> NormPlacement:
        if self.norm_placement is not None:
            return self.norm_placement
        return "pre" if self.architecture == "decoder" else "post"

    @property
    def resolved_embedding_norm(self) -> bool:
        if self.embedding_norm is not None:
            return self.embedding_norm
        return self.architecture == "encoder"

    @property
    def resolved_pooler(self) -> bool:
        if self.pooler is not None:
            return self.pooler
        return self.architecture == "encoder"

    @property
    def resolved_lm_head(self) -> bool:
        if self.lm_head is not None:
            return self.lm_head
        return self.architecture != "encoder"

    @property
    def resolved_final_norm(self) -> bool:
        if self.final_norm is not None:
            return self.final_norm
        return self.resolved_norm_placement != "post"

    @property
    def resolved_token_embed_dim(self) -> int:
        return self.token_embed_dim if self.token_embed_dim is not None else self.embed_dim

    @property
    def embedding_projection(self) -> bool:
        """Whether the token table is narrower or wider than embed_dim (OPT's project_in / project_out)."""
        return self.resolved_token_embed_dim != self.embed_dim

    @property
    def resolved_qkv_bias(self) -> bool:
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def resolved_out_bias(self) -> bool:
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def resolved_ffn_bias(self) -> bool:
        return self.bias if self.ffn_bias is None else self.ffn_bias

    @property
    def resolved_ffn_out_bias(self) -> bool:
        return self.resolved_ffn_bias if self.ffn_out_bias is None else self.ffn_out_bias

    @property
    def resolved_relative_bias(self) -> bool:
        """Whether each stack has a bucketed relative bias table: position=relative (T5) or MPNet's explicit flag."""
        if self.relative_attention_bias is not None:
            return self.relative_attention_bias
        return self.position == "relative"

    @property
    def token_rows(self) -> int:
        """Rows of the token table: vocab_size + extra_token_rows (the LM head predicts vocab_size)."""
        return self.vocab_size + self.extra_token_rows

    @property
    def position_rows(self) -> int:
        """Rows of the learned position table: max_seq_len + position_offset."""
        return self.max_seq_len + self.position_offset

    @property
    def gated(self) -> bool:
        return self.activation in GATED_ACTIVATIONS

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (num_heads * head_dim)."""
        return self.num_heads * self.resolved_head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads (num_kv_heads * head_dim)."""
        return self.resolved_kv_heads * self.resolved_head_dim

    # --- layers as data (config/block_spec.py) ----------------------------------------------------------------------

    def resolve_attention(self, spec: AttentionFields) -> Attention:
        """An attention spec with this config's head counts, biases and defaults filled in."""
        standard = Attention(
            kind="standard", num_heads=spec.num_heads or self.num_heads,
            num_kv_heads=spec.num_kv_heads or self.resolved_kv_heads,
            head_dim=spec.head_dim or self.resolved_head_dim, qkv_bias=self.resolved_qkv_bias,
            out_bias=self.resolved_out_bias, qk_norm=spec.qk_norm, sinks=spec.sinks, window=spec.sliding_window,
            chunk=spec.chunk_size, output_gate=spec.output_gate, v_head_dim=spec.v_head_dim or 0,
            head_gate=spec.head_gate,
            own_head_dim=spec.head_dim is not None, own_kv_heads=spec.num_kv_heads is not None,
            own_heads=spec.num_heads is not None,
            values_from_keys=spec.values_from_keys, kv_shared=spec.kv_shared or spec.kv_external,
            kv_external=spec.kv_external, full_cache=spec.full_cache,
            context=(self.context_tokens or 0) if spec.cross else 0, tanh_gates=spec.tanh_gates,
            out_groups=spec.out_groups or 0, out_rank=spec.out_rank or 0,
        )  # fmt: skip
        if spec.kind == "compressed":  # DeepSeek-V4: one shared key/value head, a query latent, a compressor
            return replace(standard, kind="compressed", num_kv_heads=1, q_lora_rank=spec.q_lora_rank,
                           compress_rate=spec.compress_rate, compress_overlap=spec.compress_overlap,
                           index_heads=spec.index_heads or 0, index_head_dim=spec.index_head_dim or 0,
                           index_topk=spec.index_topk or 0)  # fmt: skip
        if spec.kind == "standard":
            if spec.index_block_size is None:
                return standard
            return replace(standard, index_heads=spec.index_heads or 0, index_head_dim=spec.index_head_dim or 0,
                           index_topk=spec.index_topk or 0, index_block_size=spec.index_block_size)  # fmt: skip
        nope, rope = spec.qk_nope_head_dim or 0, spec.qk_rope_head_dim or 0
        return replace(
            standard, kind=spec.kind, num_kv_heads=self.num_heads, head_dim=nope + rope,
            q_lora_rank=spec.q_lora_rank, kv_lora_rank=spec.kv_lora_rank or 0, qk_nope_head_dim=nope,
            qk_rope_head_dim=rope, v_head_dim=spec.v_head_dim or 0, index_heads=spec.index_heads or 0,
            index_head_dim=spec.index_head_dim or 0, index_topk=spec.index_topk or 0,
            index_shared=spec.index_shared, query_scale=spec.query_scale,
        )  # fmt: skip

    def resolve_ffn(self, spec: FFNFields) -> ResolvedFFN | None:
        """An FFN spec with this config's widths, activation and biases filled in (None: the block has none)."""
        gated, bias = self.gated, self.resolved_ffn_bias
        if spec.kind in ("none", "projection"):  # a projection is the block's, not an FFN (Block.projections)
            return None
        if spec.kind == "dense":
            return ResolvedFFN("dense", gated, bias, spec.ffn_dim or self.resolved_ffn_dim,
                               out_bias=self.resolved_ffn_out_bias)  # fmt: skip
        expert_dim = spec.expert_dim or self.resolved_ffn_dim
        return ResolvedFFN(
            kind="moe", gated=gated, bias=bias, ffn_dim=0, num_experts=spec.num_experts or 0, top_k=spec.top_k or 0,
            expert_dim=expert_dim, shared_dim=spec.num_shared_experts * (spec.shared_expert_dim or expert_dim),
            shared_gate=spec.shared_expert_gate, router_bias=spec.router_bias,
            expert_bias=bias if spec.expert_bias is None else spec.expert_bias,
            router_scale=spec.router_scale, branch_norms=spec.branch_norms, latent_dim=spec.latent_dim or 0,
            zero_experts=spec.zero_experts,
        )  # fmt: skip

    def cross_attention_block(self) -> Attention:
        """The cross-attention of an encoder-decoder's decoder: standard attention from the flat fields."""
        return self.resolve_attention(self.spec_types[0]())

    def _block(
        self, name: str, mixer: MixerFields, attention: AttentionFields, ffn: FFNFields,
        shared: SharedFields | None = None,
    ) -> Block:  # fmt: skip
        # attention beside the mixer (Falcon-H1) or in the shared block before it (Zamba2)
        attends = mixer.kind == "attention" or mixer.parallel_attention or shared is not None
        resolved = self.resolve_attention(attention) if attends else None
        projected: list[
            Projected
        ] = []  # sublayers replaced by a linear (the NAS models' replace_with_linear)
        if mixer.kind == "projection":
            projected.append("mixer")
        if ffn.kind == "projection":
            projected.append("ffn")
        use = (
            Shared(shared.copies, shared.embeddings, shared.adapter_rank, shared.attention_adapters,
                   shared.ffn_adapters)
            if shared is not None
            else None
        )  # fmt: skip
        return Block(name, resolved, self.resolve_ffn(ffn), resolve_mixer(mixer), tuple(projected), use)

    @cached_property
    def named_blocks(self) -> dict[str, Block]:
        """The default block and every variant of ``blocks``, resolved."""
        attention_type, ffn_type, mixer_type = self.spec_types
        attention = base_attention_spec(self.sliding_window, self.attention, attention_type)
        ffn = self.ffn or ffn_type()
        mixer = self.mixer or mixer_type()
        out = {DEFAULT_BLOCK: self._block(DEFAULT_BLOCK, mixer, attention, ffn)}
        for name, spec in self.blocks.items():
            out[name] = self._block(
                name,
                merge_spec(mixer, spec.mixer),
                merge_spec(attention, spec.attention),
                merge_spec(ffn, spec.ffn),
                spec.shared,
            )
        return out

    def stack_plan(self, stack: str) -> StackPlan:
        """The layers of ``stack`` ("encoder" or "decoder"): ``layers`` for the first stack, ``decoder_layout`` for
        an encoder-decoder's decoder; else every layer the default block."""
        first = "encoder" if self.architecture != "decoder" else "decoder"
        named = self.named_blocks
        runs = self.layers if stack == first else self.decoder_layout
        if runs is not None:
            return StackPlan(tuple((tuple(named[n] for n in run.pattern), run.repeat) for run in runs))
        count = self.resolved_decoder_layers if stack == "decoder" and first == "encoder" else self.num_layers
        return StackPlan((((named[DEFAULT_BLOCK],), count),))

    @property
    def has_moe(self) -> bool:
        return any(block.ffn is not None and block.ffn.moe for block in self.named_blocks.values())

    @property
    def has_recurrent_state(self) -> bool:
        """Whether a layer of the model keeps a recurrent state (a Mamba-2 or other recurrent mixer)."""
        return any(block.mixer is not None for block in self.named_blocks.values())

    @property
    def label(self) -> str:
        return self.name or f"{self.architecture}-d{self.embed_dim}-L{self.num_layers}"

    def derived(self) -> dict[str, Any]:
        """Values that follow from the config, shown by ``check`` and in JSON ``derived``; a config that describes
        its layers as data (attention, ffn, blocks, layers) also gets the facts of its blocks."""
        default = self.named_blocks[DEFAULT_BLOCK]
        return {
            "head_dim": default.attention.head_dim
            if default.attention is not None
            else self.resolved_head_dim,
            "num_kv_heads": self.resolved_kv_heads,
            "kv_groups": self.num_heads // self.resolved_kv_heads,
            "ffn_dim": self.resolved_ffn_dim,
            "ffn_ratio": round(self.resolved_ffn_dim / self.embed_dim, 4),
            "num_decoder_layers": self.resolved_decoder_layers or None,
            "norm_placement": self.resolved_norm_placement,
            "final_norm": self.resolved_final_norm,
            "token_embed_dim": self.token_embed_dim if self.embedding_projection else None,
            "embedding_norm": self.resolved_embedding_norm,
            "pooler": self.resolved_pooler,
            "lm_head": self.resolved_lm_head,
            **self._layer_facts(),
        }

    def _layer_facts(self) -> dict[str, Any]:
        """Per-block facts for ``derived``: the KV cache width per token (every model with a decoder), and for
        the layer model attention kinds, windows and experts."""
        out: dict[str, Any] = {}
        if self.architecture != "encoder":  # K and V (or MLA's latent) values one token adds to the cache
            decoder = self.stack_plan("decoder").counts()
            out["kv_cache_values_per_token"] = sum(
                b.attention.kv_cache_width * n
                for b, n in decoder
                if b.attention is not None and not b.attention.external
            )
            external = [
                (b.attention, n) for b, n in decoder if b.attention is not None and b.attention.external
            ]
            if (
                external
            ):  # cross-attention: a cache of the external tokens, per sequence, whatever the text length
                out["cross_attention_layers"] = sum(n for _, n in external)
                out["context_kv_cache_values"] = sum(a.kv_cache_width * a.context * n for a, n in external)
            if self.has_recurrent_state:  # the constant state of the recurrent layers, per sequence
                out["recurrent_state_values"] = sum(b.mixer.state_values * n for b, n in decoder if b.mixer)
        if (
            self.attention is None
            and self.ffn is None
            and self.mixer is None
            and not self.blocks
            and not self.layers
        ):
            return out
        first = "encoder" if self.architecture != "decoder" else "decoder"
        counts = self.stack_plan(first).counts()
        kinds = sorted({block.attention.kind for block, _ in counts if block.attention is not None})
        out["attention_kinds"] = ", ".join(kinds)
        if self.mixer is not None or any(b.mixer_kind != "attention" for b, _ in counts):
            out["mixer_layers"] = {kind: sum(n for b, n in counts if b.mixer_kind == kind)
                                   for kind in sorted({b.mixer_kind for b, _ in counts})}  # fmt: skip
        limited = sum(n for b, n in counts if b.attention is not None and b.attention.cache_limit is not None)
        if limited:
            out["windowed_layers"] = limited
        if (
            self.decoder_layout is not None
        ):  # an encoder-decoder's decoder laid out apart (T5Gemma): its windows
            decoder = self.stack_plan("decoder").counts()
            limited = sum(
                n for b, n in decoder if b.attention is not None and b.attention.cache_limit is not None
            )
            if limited:
                out["decoder_windowed_layers"] = limited
        moe = [(block.ffn, n) for block, n in counts if block.ffn is not None and block.ffn.moe]
        if moe:
            ffn = moe[0][0]
            out |= {
                "moe_layers": sum(n for _, n in moe),
                "num_experts": ffn.num_experts,
                "top_k": ffn.top_k,
                "expert_dim": ffn.expert_dim,
                "shared_experts_dim": ffn.shared_dim or None,
                **({"moe_latent_dim": ffn.latent_dim} if ffn.latent_dim else {}),
                "active_expert_ratio": round(ffn.top_k / ffn.num_experts, 4),
            }
        return out
