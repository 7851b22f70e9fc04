"""What a config means once its architecture-dependent defaults are resolved: head_dim, KV heads, FFN width,
norm placement, pooler, LM head, ... — the ``resolved_*`` properties every count reads.

:class:`ResolvedShape` is a mixin of :class:`embedcalc.config.schema.ModelConfig`, which declares the fields;
keeping the defaults apart from the validation rules keeps each module about one thing. Also the value types
shared by the schema and these properties.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

Architecture = Literal["encoder", "decoder", "encoder-decoder"]
Activation = Literal["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"]
Norm = Literal["layernorm", "rmsnorm"]
NormPlacement = Literal["post", "pre"]
Position = Literal["learned", "sinusoidal", "rope", "relative", "none"]

GATED_ACTIVATIONS = frozenset({"swiglu", "geglu"})


class ResolvedShape:
    """Resolved defaults and derived sizes; the fields themselves are declared by ``ModelConfig``."""

    if TYPE_CHECKING:
        activation: Activation
        architecture: Architecture
        bias: bool
        embed_dim: int
        embedding_norm: bool | None
        ffn_bias: bool | None
        ffn_dim: int | None
        final_norm: bool | None
        head_dim: int | None
        lm_head: bool | None
        max_seq_len: int
        name: str | None
        norm_placement: NormPlacement | None
        num_decoder_layers: int | None
        num_heads: int
        num_kv_heads: int | None
        num_layers: int
        out_bias: bool | None
        pooler: bool | None
        position_offset: int
        qkv_bias: bool | None
        token_embed_dim: int | None

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
        return self.resolved_norm_placement == "pre"

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

    @property
    def label(self) -> str:
        return self.name or f"{self.architecture}-d{self.embed_dim}-L{self.num_layers}"

    def derived(self) -> dict[str, Any]:
        """Values that follow from the config, shown by ``check`` and in JSON ``derived``."""
        return {
            "head_dim": self.resolved_head_dim,
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
        }
