"""The FFN of a block as the user writes it (DESIGN.md §9; the resolved view is
:class:`~embedcalc.config.layer_plan.FFN`): a dense (gated or not) MLP, or a mixture of experts with its routing,
shared experts and per-expert widths.
Validated here field by field; re-exported by :mod:`embedcalc.config.block_spec` with the rest of the layer model."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from embedcalc.config.bounded import NonNegativeInt, PositiveInt
from embedcalc.config.fields import FFNFields
from embedcalc.config.kinds import FFNKind
from embedcalc.config.spec_base import FROZEN, refuse_other_kind
from embedcalc.config.spec_shapes import MOE_ONLY_FIELDS


class FFNSpec(FFNFields, BaseModel):
    """What the feed-forward sublayer of a block is: dense (plain or gated) or a mixture of experts."""

    model_config = FROZEN

    kind: FFNKind = Field(
        default="dense",
        description=(
            "dense: one FFN of ffn_dim. moe: num_experts FFNs of expert_dim, top_k of them per token. projection: "
            "one bias-free embed_dim x embed_dim linear behind the FFN's norm (the Nemotron NAS models' "
            "replace_with_linear FFN, DeciLMLinearMLP). none: the block has no FFN (Nemotron-H's mixer-only layers)."
        ),
    )
    ffn_dim: PositiveInt | None = Field(
        default=None,
        description="dense: inner width of this block's FFN when it differs from the flat ffn_dim (Llama 4).",
    )
    num_experts: PositiveInt | None = Field(
        default=None, description="moe: routed experts per layer (Mixtral 8, DeepSeek-V3 256)."
    )
    top_k: PositiveInt | None = Field(
        default=None, description="moe: routed experts each token is sent to (num_experts_per_tok)."
    )
    expert_dim: PositiveInt | None = Field(
        default=None,
        description="moe: inner width of one routed expert (moe_intermediate_size); default the flat ffn_dim.",
    )
    num_shared_experts: NonNegativeInt = Field(
        default=0,
        description=(
            "moe: experts every token goes through besides the routed ones (DeepSeek: n_shared_experts); they are "
            "built as one FFN of num_shared_experts x shared_expert_dim, as DeepSeek and Qwen2-MoE build them."
        ),
    )
    shared_expert_dim: PositiveInt | None = Field(
        default=None, description="moe: inner width of one shared expert; default expert_dim."
    )
    shared_expert_gate: bool = Field(
        default=False,
        description="moe: a sigmoid gate embed_dim -> 1 scales the shared experts' output (Qwen2-MoE).",
    )
    router_bias: bool = Field(
        default=False, description="moe: the router (embed_dim -> num_experts) has a bias (gpt-oss)."
    )
    router_scale: bool = Field(
        default=False,
        description=(
            "moe: the router scales its (weight-free normalised) input by a learned vector of embed_dim and each "
            "chosen expert's weight by a learned per-expert scale (Gemma 4's Gemma4TextRouter: scale, "
            "per_expert_scale): embed_dim + num_experts parameters, no matmul."
        ),
    )
    branch_norms: bool = Field(
        default=False,
        description=(
            "moe: norms on the shared experts' output and on the routed experts' input and output (Gemma 4's "
            "post_feedforward_layernorm_1, pre_ / post_feedforward_layernorm_2): three norms of embed_dim. Needs "
            "shared experts."
        ),
    )
    expert_bias: bool | None = Field(
        default=None, description="moe: biases inside the experts (gpt-oss); default the flat ffn_bias."
    )
    zero_experts: NonNegativeInt = Field(
        default=0,
        description=(
            "moe: identity experts the router may also pick (LongCat-Flash's zero experts, zero_expert_num): the "
            "router scores num_experts + zero_experts, a token routed to one passes through unchanged (no "
            "parameters, no matmul). Active parameters and FLOPs count top_k real experts per token, the most a "
            "token uses (how many pick a zero expert depends on the data)."
        ),
    )
    latent_dim: PositiveInt | None = Field(
        default=None,
        description=(
            "moe: the routed experts run in a latent width: a linear embed_dim -> latent_dim before them and "
            "latent_dim -> embed_dim after (biased as the FFN), each expert latent_dim -> expert_dim -> latent_dim; "
            "the router and the shared experts stay on embed_dim (Nemotron-3's moe_latent_size: NemotronHMoE's "
            "fc1_latent_proj / fc2_latent_proj). Default: none, the experts read embed_dim."
        ),
    )

    @field_validator("top_k")
    @classmethod
    def _top_k_within_experts(cls, value: int | None, info: ValidationInfo) -> int | None:
        experts = info.data.get("num_experts")
        if value is not None and experts is not None and value > experts:
            raise PydanticCustomError(
                "top_k_over_experts",
                "top_k ({value}) cannot exceed num_experts ({experts}): a token is routed to distinct experts; "
                "use top_k {experts} or fewer, or more experts",
                {"value": value, "experts": experts},
            )
        return value

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> FFNSpec:
        if self.kind != "moe":
            refuse_other_kind(self, MOE_ONLY_FIELDS, "ffn", "moe")
        if self.kind == "projection" and self.ffn_dim is not None:
            raise PydanticCustomError(
                "field_of_other_kind",
                "ffn.ffn_dim ({value}) is the width of a dense FFN, but kind is projection (embed_dim x embed_dim), "
                "so it would be ignored: remove ffn_dim or use kind dense",
                {"value": self.ffn_dim},
            )
        if self.kind == "moe" and self.ffn_dim is not None:
            raise PydanticCustomError(
                "field_of_other_kind",
                "ffn.ffn_dim ({value}) is the width of a dense FFN; under kind moe the width of one expert is "
                "expert_dim: write expert_dim: {value} (and shared_expert_dim for the shared experts)",
                {"value": self.ffn_dim},
            )
        return self

    @model_validator(mode="after")
    def _moe_complete(self) -> FFNSpec:
        if self.shared_expert_gate and self.kind == "moe" and self.num_shared_experts == 0:
            raise PydanticCustomError(
                "shared_gate_without_shared_experts",
                "shared_expert_gate scales the shared experts' output, but num_shared_experts is 0; set "
                "num_shared_experts: 1 (Qwen2-MoE) or shared_expert_gate: false",
                {},
            )
        if self.branch_norms and self.kind == "moe" and self.num_shared_experts == 0:
            raise PydanticCustomError(
                "branch_norms_without_shared_experts",
                "branch_norms normalise the shared experts' output beside the routed experts', but "
                "num_shared_experts is 0; set num_shared_experts: 1 (Gemma 4's dense MLP) or branch_norms: false",
                {},
            )
        missing = moe_missing(self)
        if missing:
            raise PydanticCustomError(
                "moe_incomplete",
                "kind moe needs {name}; add {name}: (Mixtral has num_experts: 8, top_k: 2)",
                {"name": missing},
            )
        return self


def moe_missing(spec: FFNSpec) -> str | None:
    """The first field a mixture of experts needs that ``spec`` lacks, else None."""
    if spec.kind != "moe":
        return None
    return next((name for name in ("num_experts", "top_k") if getattr(spec, name) is None), None)
