"""Every linear module of a config, layer by layer, under the name transformers gives it (:mod:`.naming`): what an
adapter can attach to, with its breakdown key, its in/out features and its layer.

The analytic layer model fuses Q/K/V into one ``attention/qkv`` tensor and a gated FFN's gate and up projections
into one ``ffn/in`` (``analysis/params.py``); here they are split back into the modules a family really has
(LLaMA: ``q_proj``, ``k_proj``, ``v_proj``; GPT-2: one ``c_attn``), because LoRA on three projections adds
r (3d + q + 2kv) parameters and on one fused projection r (d + q + 2kv). Routed experts are 3-D parameters
(:class:`ExpertParameter`), which only peft's ``target_parameters`` reaches. The modules' weights and biases sum to
the analytic count of their breakdown keys (a test checks it).

One entry per layer (a list, not the closed-form runs of ``StackPlan``): target names may carry a layer index
(``model.layers.3.self_attn.q_proj``) and ``--freeze`` takes layer ranges, so each layer needs its own name. The
list is a few thousand entries at most.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from embedcalc.analysis.finetune.naming import Naming, naming_for
from embedcalc.analysis.structure import (
    Dims,
    cross_attention,
    head_width,
    kv_heads,
    kv_width,
    projected_kv,
    projected_kv_width,
    q_heads,
    stacks,
    v_width,
)
from embedcalc.config.layer_plan import FFN, Attention, Block
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import WorkloadError


@dataclass(frozen=True)
class LinearModule:
    """One ``nn.Linear`` (or GPT-2's Conv1D) of the model: its full name, breakdown key and shape."""

    name: str
    key: str
    in_features: int
    out_features: int
    bias: bool
    stack: str | None = None
    layer: int | None = None
    role: str = ""  # attention/q, attention/qkv (fused), ffn/gate_up, ...; a model-level module: its key

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


@dataclass(frozen=True)
class ExpertParameter:
    """A weight that is a parameter, not a linear module: the routed experts' fused 3-D weight of one MoE layer
    (experts x out x in), or the router's weight (``experts`` 1: router_experts x embed_dim)."""

    name: str
    key: str
    experts: int
    in_features: int
    out_features: int
    stack: str
    layer: int

    @property
    def params(self) -> int:
        return self.experts * self.in_features * self.out_features


@dataclass(frozen=True)
class ModelModules:
    """The linear modules and expert parameters of a config, in model order."""

    family: str | None
    linears: tuple[LinearModule, ...]
    experts: tuple[ExpertParameter, ...]  # the routed experts' weights, then the routers' (key moe/router)


def _refuse(field: str, message: str, code: str) -> WorkloadError:
    from embedcalc.errors import Problem

    return WorkloadError(f"{field}: {message}", [Problem(field, message, code)], code)


def _path(naming: Naming, stack: str, role: str, family: str | None) -> str:
    roles = naming.roles.get(stack, {})
    if role not in roles:
        shown = family or "llama (the default)"
        raise _refuse(
            "family",
            f"family {shown} has no {stack} module for {role} in embedcalc's naming table; "
            "set the config's family to one whose modules match (embedcalc explain MODEL fine-tune lists them)",
            "finetune_unnamed_module",
        )
    return roles[role]


def _attention(a: Attention, x: Dims, prefix: str, fused: bool) -> Iterator[tuple[str, str, int, int, bool]]:
    """(role, key suffix, in, out, bias) of one attention sublayer's linear modules."""
    d, h = x.d, q_heads(a, x)
    if a.kind == "standard":
        q, kv, n_kv = h * head_width(a, x), kv_width(a, x), projected_kv(a)
        widths = {"k": kv, "v": kv_heads(a, x) * v_width(a, x)}  # values of their own width (MiMo-V2-Flash)
        if fused:
            yield f"{prefix}/qkv", f"{prefix}/qkv", d, q + projected_kv_width(a, x), a.qkv_bias
        else:
            yield f"{prefix}/q", f"{prefix}/qkv", d, q, a.qkv_bias
            for role in ("k", "v")[:n_kv]:
                yield f"{prefix}/{role}", f"{prefix}/qkv", d, widths[role], a.qkv_bias
        yield f"{prefix}/out", f"{prefix}/out", h * v_width(a, x), d, a.out_bias
        return
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim  # MLA, DeepSeek-V2 §2.1
    if a.q_lora_rank is not None:
        yield f"{prefix}/q_a", f"{prefix}/q_a", d, a.q_lora_rank, a.qkv_bias
        yield f"{prefix}/q_b", f"{prefix}/q_b", a.q_lora_rank, h * qk, False
    else:
        yield f"{prefix}/q_full", f"{prefix}/q", d, h * qk, False
    yield f"{prefix}/kv_a", f"{prefix}/kv_a", d, a.kv_lora_rank + a.qk_rope_head_dim, a.qkv_bias
    yield f"{prefix}/kv_b", f"{prefix}/kv_b", a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim), False
    yield f"{prefix}/out", f"{prefix}/out", h * a.v_head_dim, d, a.out_bias


def _dense(
    prefix: str, key: str, d: int, f: int, gated: bool, bias: bool, fused: bool
) -> Iterator[tuple[str, str, int, int, bool]]:
    if gated and fused:
        yield f"{prefix}/gate_up", f"{key}/in" if key else "", d, 2 * f, bias
    elif gated:
        yield f"{prefix}/gate", f"{key}/in", d, f, bias
        yield f"{prefix}/up", f"{key}/in", d, f, bias
    else:
        yield f"{prefix}/in", f"{key}/in", d, f, bias
    yield f"{prefix}/out", f"{key}/out", f, d, bias


def _ffn(ffn: FFN, block: Block, x: Dims, fused: bool) -> Iterator[tuple[str, str, int, int, bool]]:
    w = x.widths(block)
    if not ffn.moe:
        yield from _dense("ffn", "ffn", x.d, int(w.f), ffn.gated, ffn.bias, fused)
        return
    if ffn.shared_dim:
        for role, _, i, o, b in _dense(
            "moe/shared", "moe/shared", x.d, int(w.fs), ffn.gated, ffn.bias, False
        ):
            yield role, "moe/shared", i, o, b


_UNNAMED = ("mixer", "projections", "shared_gate", "indexer", "output_gate")


def _check_block(block: Block, config: ResolvedShape) -> None:
    """Refuse parts whose modules the naming tables do not name (recurrent mixers, NAS linears, Gemma 3n/4 extras)."""
    parts = []
    if block.mixer is not None:
        parts.append("a recurrent token mixer")
    if block.projections:
        parts.append("a sublayer replaced by a linear")
    if block.ffn is not None and block.ffn.moe and block.ffn.shared_gate:
        parts.append("a shared-expert gate")
    a = block.attention
    # a block indexer's q_proj / k_proj (MiniMax-M3) are matched by the attention's own target names
    if a is not None and (a.indexer or a.block_indexer or a.output_gate):
        parts.append("an attention indexer or output gate")
    if (
        config.per_layer_input_dim
        or config.altup_inputs
        or config.laurel_rank
        or (config.disentangled is not None and not config.disentangled.share_keys)
    ):
        parts.append("per-layer inputs, AltUp, LAuReL or separate position projections")
    if parts:
        raise _refuse(
            "peft",
            f"adapters are counted for attention, dense and MoE FFN layers; this model has "
            f"{', '.join(parts)}, whose module names embedcalc does not map yet",
            "finetune_unsupported_layer",
        )


# A fine-tune is counted module by module, as PEFT matches its target modules by name, so its work and memory grow
# with the layers (issue 33's bound: a 30-digit num_layers grew `analyze --peft lora` past 3.5 GB). The deepest
# published models have ~130 layers; at 10,000 the worst preset (mixtral-8x7b) counts in ~1 s and ~75 MB, at
# 100,000 in ~5 s and ~420 MB.
MAX_FINETUNE_LAYERS = 10_000


def check_layer_bound(config: ResolvedShape) -> None:
    """WorkloadError (exit 3) when ``config`` has more layers than a fine-tune is counted for."""
    layers = sum(1 if config.shared_layers else config.stack_plan(s.name).num_layers for s in stacks(config))
    if layers > MAX_FINETUNE_LAYERS:
        raise _refuse(
            "num_layers",
            f"a fine-tune is counted module by module (as PEFT matches its target modules by name) for at most "
            f"{MAX_FINETUNE_LAYERS:,} layers; this config has {layers:,}. Analyze full training, or fewer layers",
            "finetune_too_many_layers",
        )


def model_modules(config: ResolvedShape) -> ModelModules:
    """Every linear module and expert parameter of ``config``, named as transformers names them."""
    check_layer_bound(config)
    family = config.family
    naming = naming_for(family)
    if naming is None:
        raise _refuse(
            "family",
            f"embedcalc has no module names for family {family}; "
            "set family to one of the families docs/concepts/fine-tuning.md lists",
            "finetune_unknown_family",
        )
    x = Dims.of(config)
    linears: list[LinearModule] = []
    experts: list[ExpertParameter] = []
    if config.embedding_projection:
        linears.append(
            _model_linear(
                naming, family, "embedding/project_in", x.d_tok, x.d, config.embedding_projection_bias
            )
        )
    for stack in stacks(config):
        plan = config.stack_plan(stack.name)
        template = naming.layers.get(stack.name)
        if template is None:
            raise _refuse(
                "family",
                f"family {family} has no {stack.name} stack in embedcalc's naming table",
                "finetune_unnamed_module",
            )
        count = 1 if config.shared_layers else plan.num_layers
        for i in range(count):
            block = plan.block_at(i)
            _check_block(block, config)
            where = template.format(i=i)
            parts: list[tuple[str, str, int, int, bool]] = []
            if block.attention is not None:
                parts += _attention(block.attention, x, "attention", naming.fused_qkv)
            if stack.cross_attention:
                parts += _attention(cross_attention(config), x, "cross_attention", False)
            if block.ffn is not None:
                parts += _ffn(block.ffn, block, x, naming.fused_gate_up)
                if block.ffn.moe:
                    experts += _experts(naming, block.ffn, block, x, stack.name, i, where)
            for role, key, in_f, out_f, bias in parts:
                name = f"{where}.{_path(naming, stack.name, role, family)}"
                linears.append(
                    LinearModule(
                        name, f"{stack.name}/{key}", int(in_f), int(out_f), bias, stack.name, i, role
                    )
                )
    if config.resolved_pooler:
        linears.append(_model_linear(naming, family, "pooler", x.d, x.d, config.bias))
    if config.resolved_lm_head and not config.embedding_projection:
        linears.append(
            _model_linear(naming, family, "head/lm", x.d_tok, config.vocab_size, config.lm_head_bias)
        )
    return ModelModules(family, tuple(linears), tuple(experts))


def _model_linear(
    naming: Naming, family: str | None, key: str, in_f: int, out_f: int, bias: bool
) -> LinearModule:
    if key not in naming.model:
        raise _refuse(
            "family",
            f"family {family} has no module for {key} in embedcalc's naming table",
            "finetune_unnamed_module",
        )
    return LinearModule(naming.model[key], key, in_f, out_f, bias, role=key)


def _experts(
    naming: Naming, ffn: FFN, block: Block, x: Dims, stack: str, layer: int, where: str
) -> list[ExpertParameter]:
    fe = int(x.widths(block).fe)
    fe_in = 2 * fe if ffn.gated else fe
    base = f"{where}.{naming.experts}"
    key = f"{stack}/moe/experts"
    return [
        ExpertParameter(f"{base}.gate_up_proj", key, ffn.num_experts, x.d, fe_in, stack, layer),
        ExpertParameter(f"{base}.down_proj", key, ffn.num_experts, fe, x.d, stack, layer),
        # the router module's weight (transformers 5: a TopKRouter, not nn.Linear), E x d
        ExpertParameter(
            f"{where}.{naming.router}.weight", f"{stack}/moe/router", 1, x.d, ffn.num_experts, stack, layer
        ),
    ]
