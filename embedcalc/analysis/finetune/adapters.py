"""Trainable and total parameters of a fine-tune, as peft counts them (``get_nb_trainable_parameters``).

Conventions (peft 0.22, ``peft/tuners/lora/layer.py``, ``peft/tuners/tuners_utils.py``):

- **Targets**: a name in ``target_modules`` selects a module whose full name equals it or ends with ``.`` + it
  (``q_proj`` matches ``model.layers.0.self_attn.q_proj``, ``output.dense`` BERT's ``attention.output.dense`` too);
  ``all-linear`` selects every ``nn.Linear``/Conv1D but the output embedding (the LM head); no targets: peft's
  per-family default (:data:`embedcalc.analysis.finetune.naming.DEFAULT_TARGETS`). A name that matches a routed
  experts' 3-D parameter (``experts.gate_up_proj``) is taken as peft's ``target_parameters`` (``ParamWrapper``).
  A name that matches nothing is an error, as in peft.
- **LoRA** (Hu et al. 2021, §4.1) on a linear in -> out: ``lora_A`` r x in and ``lora_B`` out x r, no bias:
  r (in + out) trainable parameters; on an experts parameter of E experts: ``lora_A`` (r E) x in, ``lora_B``
  out x (r E), E r (in + out). The base weight and bias are frozen. ``alpha`` and dropout change no count.
- **DoRA** (Liu et al. 2024, §4.1; peft's ``lora_magnitude_vector``): LoRA plus one magnitude per output feature,
  out parameters per target module (peft refuses DoRA on ``target_parameters``; so does embedcalc).
- **QLoRA** (Dettmers et al. 2023): LoRA over 4-bit frozen weights; peft counts a ``Params4bit`` tensor as twice
  its packed bytes, i.e. its element count, so the counts equal LoRA's (the storage is ``memory``'s business).
- **modules_to_save** (peft's ``ModulesToSaveWrapper``): a trainable copy of the module beside the frozen
  original: its parameters are added to both the trainable and the total count (tied or not); a module saved
  whole gets no adapter, even under ``all-linear``.
- **--freeze** (full fine-tuning with frozen parts, LLaMA-Factory's ``freeze`` method): every parameter is
  trainable but those of the frozen components or layer ranges; the total is the model's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embedcalc.analysis.breakdown import Breakdown
from embedcalc.analysis.finetune.modules import (
    ExpertParameter,
    LinearModule,
    ModelModules,
    check_layer_bound,
    model_modules,
)
from embedcalc.analysis.finetune.naming import (
    DEFAULT_TARGETS,
    MOE_CONVERTED,
    MOE_FUSED,
    MOE_V4_NAMES,
    naming_for,
)
from embedcalc.analysis.params import block_tensors, count_params
from embedcalc.analysis.structure import Dims, stacks
from embedcalc.analysis.workload import bounded, check_bounds
from embedcalc.config.resolved import ResolvedShape
from embedcalc.errors import Problem, WorkloadError

Method = Literal["full", "lora", "dora", "qlora"]
ALL_LINEAR = "all-linear"


def _refuse(field_name: str, message: str, code: str) -> WorkloadError:
    return WorkloadError(f"{field_name}: {message}", [Problem(field_name, message, code)], code)


@dataclass(frozen=True)
class FinetuneSpec:
    """How a model is fine-tuned: the method, LoRA's rank/alpha/targets/dropout, modules saved whole, frozen parts.

    ``method`` full trains every parameter not under ``freeze``; lora, dora and qlora freeze the base model and
    train adapters on ``targets`` (None: peft's default for the family) plus ``modules_to_save``.
    """

    method: Method = "full"
    rank: int = bounded(8, 1, 65536)
    alpha: float = 8.0  # peft's LoraConfig default; scales B A x by alpha / r, no cost
    targets: tuple[str, ...] | None = None
    dropout: float = 0.0
    modules_to_save: tuple[str, ...] = ()
    freeze: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_bounds(self)
        if not 0.0 <= self.dropout < 1.0:
            raise _refuse("lora_dropout", f"must be in [0, 1), got {self.dropout}", "finetune_bad_dropout")
        if self.method == "full" and (self.targets or self.modules_to_save):
            raise _refuse(
                "lora_targets",
                "targets and modules to save need --peft lora|dora|qlora; "
                "full fine-tuning trains every parameter not under --freeze",
                "finetune_targets_without_peft",
            )
        if self.method != "full" and self.freeze:
            raise _refuse(
                "freeze",
                f"--peft {self.method} already freezes the whole base model; --freeze "
                "selects what full fine-tuning leaves frozen (drop one of them)",
                "finetune_freeze_with_peft",
            )

    @property
    def adapters(self) -> bool:
        return self.method != "full"


@dataclass(frozen=True)
class AdapterCounts:
    """Trainable and total parameters of a fine-tune, by component, and what the adapters attach to."""

    spec: FinetuneSpec
    targets: tuple[str, ...]  # the target names as given or resolved (all-linear, the family default)
    modules: tuple[LinearModule, ...]  # the linear modules adapted
    expert_params: tuple[ExpertParameter, ...]  # the experts parameters adapted (target_parameters)
    saved: tuple[str, ...]  # modules copied whole (modules_to_save)
    base_params: int  # the model's own parameters
    trainable: Breakdown = field(default_factory=Breakdown)  # trainable parameters by key
    added: Breakdown = field(default_factory=Breakdown)  # parameters the fine-tune adds (adapters, copies)
    expert_ranks: tuple[int, ...] = ()  # rank multiplier of each adapted parameter (2: a fused gate_up_proj)

    @property
    def trainable_total(self) -> int:
        return self.trainable.total

    @property
    def all_total(self) -> int:
        """peft's "all params": the base model plus everything added."""
        return self.base_params + self.added.total

    @property
    def adapter_params(self) -> int:
        return sum(v for k, v in self.added.items() if not k.endswith("/modules_to_save"))


def _matches(name: str, targets: tuple[str, ...]) -> bool:
    return any(name == t or name.endswith(f".{t}") for t in targets)


def _resolve_targets(spec: FinetuneSpec, family: str | None) -> tuple[str, ...]:
    if spec.targets is not None:
        return spec.targets
    default = DEFAULT_TARGETS.get(family or "llama")
    if default is None:
        raise _refuse(
            "lora_targets",
            f"peft has no default target modules for family {family}; name them "
            "(--lora-targets q_proj,v_proj or all-linear)",
            "finetune_no_default_targets",
        )
    return default


@dataclass(frozen=True)
class _Targets:
    modules: tuple[str, ...]  # peft's target_modules after its MoE conversion
    params: tuple[str, ...]  # target_parameters
    fused_rank_factor: int = 1  # rank multiplier of the fused gate_up_proj (2 when both halves were named)


def _convert_moe(targets: tuple[str, ...], mods: ModelModules) -> _Targets:
    """peft's rewrite of transformers-4 MoE names for a transformers-5 model (:data:`naming.MOE_V4_NAMES`), as
    peft 0.22 does it (``_convert_peft_config_moe``): a target carrying a v4 name stays a module target where every
    module it names is an ``nn.Linear`` (DeepSeek-V3's dense MLPs and shared experts keep their ``gate_proj``,
    ``up_proj``, ``down_proj``), and becomes the renamed parameter target too where a non-linear module's parameter
    carries the new name (the routed experts' ``gate_up_proj`` beside them); a target naming a non-linear module or
    nothing (the router ``gate``; Qwen3-MoE's expert names) becomes the parameter target only. (peft 0.21 turned
    every such name into the parameter target alone, leaving the dense and shared linears without an adapter.)"""
    base = MOE_CONVERTED.get(mods.family or "")
    if base is None:
        return _Targets(targets, targets)
    v4 = MOE_V4_NAMES[base]
    if targets == (ALL_LINEAR,):  # every linear's leaf name, the LM head excepted, and the v4 expert names
        leaves = {m.name.rsplit(".", 1)[-1] for m in mods.linears if m.key != "head/lm"}
        targets = tuple(sorted(leaves | v4.keys()))
    containers = {p.name.rsplit(".", 1)[0] for p in mods.experts}  # the non-linear modules holding parameters
    modules: list[str] = []
    params: list[str] = []
    named: set[str] = set()
    for t in targets:
        old = next((o for o in v4 if t == o or t.endswith(f".{o}")), None)
        if old is None:
            modules.append(t)
            continue
        renamed = t[: len(t) - len(old)] + v4[old]  # the last occurrence of the v4 name, renamed
        linear = any(_matches(m.name, (t,)) for m in mods.linears)
        if linear and not any(_matches(c, (t,)) for c in containers):
            modules.append(t)
            if not any(_matches(p.name, (renamed,)) for p in mods.experts):
                continue
        params.append(renamed)
        named.add(old)
    fused = MOE_FUSED[base]
    present = named & set(fused)
    if present and present != set(fused):
        raise _refuse(
            "lora_targets",
            f"{', '.join(sorted(present))} cannot be targeted without "
            f"{', '.join(sorted(set(fused) - present))}: transformers 5 fuses them into gate_up_proj "
            "(peft refuses the same)",
            "finetune_half_fused_target",
        )
    return _Targets(tuple(modules), tuple(params), len(fused) if present else 1)


def _adapted(
    mods: ModelModules, targets: tuple[str, ...]
) -> tuple[list[LinearModule], list[tuple[ExpertParameter, int]]]:
    """The adapted linear modules and parameters (each with its rank multiplier)."""
    if targets == (ALL_LINEAR,) and MOE_CONVERTED.get(mods.family or "") is None:
        return [m for m in mods.linears if m.key != "head/lm"], []
    plan = _convert_moe(targets, mods)
    linears = [m for m in mods.linears if _matches(m.name, plan.modules)]
    # a name given for a parameter (experts.gate_up_proj) is a target parameter, as peft's target_parameters
    wanted = (*plan.params, *plan.modules)
    params = [p for p in mods.experts if _matches(p.name, wanted)]
    names = [m.name for m in linears] + [p.name for p in params]
    found = {t for t in wanted if any(_matches(n, (t,)) for n in names)}
    missing = [t for t in plan.modules if t not in found]
    if missing:
        sample = sorted({m.name.rsplit(".", 1)[-1] for m in mods.linears})
        raise _refuse(
            "lora_targets",
            f"{', '.join(missing)} matches no linear module of this model "
            f"(family {mods.family or 'llama (default)'}); its modules: {', '.join(sample)}, or all-linear",
            "finetune_target_not_found",
        )

    def factor(p: ExpertParameter) -> int:
        return (
            plan.fused_rank_factor
            if p.name.endswith(".gate_up_proj") and _matches(p.name, plan.params)
            else 1
        )

    return linears, [(p, factor(p)) for p in params]


def _saved_modules(
    config: ResolvedShape, names: tuple[str, ...], mods: ModelModules
) -> dict[str, tuple[str, int]]:
    """modules_to_save: name -> (breakdown key, parameters) for the LM head, the pooler or the token embedding."""
    naming = naming_for(mods.family)
    table = count_params(config).as_dict()
    known: dict[str, tuple[str, int]] = {m.name: (m.key, m.params) for m in mods.linears if m.layer is None}
    for table_key in ("embedding/token", "embedding/decoder_token"):  # T5Gemma: a table per stack
        if naming is not None and table_key in naming.model:
            known[naming.model[table_key]] = (table_key, table.get(table_key, 0))
    out: dict[str, tuple[str, int]] = {}
    for name in names:
        hits = [n for n in known if _matches(n, (name,))]
        if not hits:
            raise _refuse(
                "modules_to_save",
                f"{name} is not a module embedcalc can save whole here; "
                f"choose from {', '.join(sorted(known))}",
                "finetune_save_not_found",
            )
        for hit in hits:
            key, params = known[hit]
            if key == "head/lm" and not params:  # a tied head: its weight is the (decoder's) token table
                params = table.get("embedding/decoder_token") or table.get("embedding/token", 0)
            out[hit] = (key, params)
    return out


def count_finetune(config: ResolvedShape, spec: FinetuneSpec) -> AdapterCounts:
    """Trainable and total parameters of ``config`` fine-tuned per ``spec`` (module docstring)."""
    check_layer_bound(config)  # the fine-tune's memory walks the layers too, adapters or --freeze
    base = count_params(config)
    if not spec.adapters:
        frozen = frozen_params(config, spec.freeze)
        trainable = Breakdown()
        for key, value in base.items():
            trainable.add(key, value - frozen.get(key, 0))
        return AdapterCounts(spec, (), (), (), (), base.total, trainable)
    mods = model_modules(config)
    targets = _resolve_targets(spec, mods.family)
    linears, experts = _adapted(mods, targets)
    if spec.method == "dora" and experts:
        raise _refuse(
            "peft",
            "DoRA cannot adapt the routed experts' parameters (peft refuses target_parameters "
            "with use_dora); target linear modules only",
            "finetune_dora_experts",
        )
    saved = _saved_modules(config, spec.modules_to_save, mods)
    linears = [m for m in linears if m.name not in saved]  # a module saved whole gets no adapter (peft)
    trainable, added = Breakdown(), Breakdown()
    r = spec.rank
    for m in linears:
        lora = r * (m.in_features + m.out_features)
        magnitude = m.out_features if spec.method == "dora" else 0
        for out in (trainable, added):
            out.add(f"{m.key}/lora", lora)
            out.add(f"{m.key}/dora_magnitude", magnitude)
    for p, factor in experts:
        for out in (trainable, added):
            out.add(f"{p.key}/lora", p.experts * factor * r * (p.in_features + p.out_features))
    for key, params in saved.values():
        for out in (trainable, added):
            out.add(f"{key}/modules_to_save", params)
    adapted = tuple(p for p, _ in experts)
    factors = tuple(f for _, f in experts)
    return AdapterCounts(
        spec, targets, tuple(linears), adapted, tuple(saved), base.total, trainable, added, factors
    )


def frozen_params(config: ResolvedShape, freeze: tuple[str, ...]) -> dict[str, int]:
    """Frozen parameters by breakdown key: an item is a key prefix (``embedding``, ``decoder/attention``,
    ``head/lm``) or a layer range ``STACK:A-B`` (``decoder:0-15``, inclusive; ``layers:`` is the first stack)."""
    base = count_params(config).as_dict()
    frozen: dict[str, int] = {}
    x = Dims.of(config)
    for item in freeze:
        if ":" in item:
            for key, value in _layer_range(config, x, item).items():
                frozen[key] = min(base.get(key, 0), frozen.get(key, 0) + value)
            continue
        hits = [k for k in base if k == item or k.startswith(item.rstrip("/") + "/")]
        if not hits:
            raise _refuse(
                "freeze",
                f"{item} names no component; components: "
                f"{', '.join(sorted({k.split('/')[0] for k in base}))} (or a layer range such as layers:0-15)",
                "finetune_freeze_not_found",
            )
        for k in hits:
            frozen[k] = base[k]
    return frozen


def _layer_range(config: ResolvedShape, x: Dims, item: str) -> dict[str, int]:
    stack_name, _, span = item.partition(":")
    known = [s for s in stacks(config)]
    stack = known[0] if stack_name == "layers" else next((s for s in known if s.name == stack_name), None)
    lo_text, _, hi_text = span.partition("-")
    if stack is None or not lo_text.isdigit() or not (hi_text or lo_text).isdigit():
        raise _refuse(
            "freeze",
            f"{item}: a layer range is STACK:FIRST-LAST (layers:0-15, {'/'.join(s.name for s in known)}:0-3)",
            "finetune_bad_layer_range",
        )
    plan = config.stack_plan(stack.name)
    lo, hi = int(lo_text), int(hi_text or lo_text)
    if not 0 <= lo <= hi < plan.num_layers:
        raise _refuse(
            "freeze",
            f"{item}: layers run 0-{plan.num_layers - 1} in the {stack.name} stack",
            "finetune_bad_layer_range",
        )
    out: dict[str, int] = {}
    for block, count in plan.counts(lo, hi + 1):
        layers = 1 if config.shared_layers else count
        for t in block_tensors(config, block, x, stack.cross_attention):
            key = f"{stack.name}/{t.key}"
            out[key] = out.get(key, 0) + int(t.numel) * layers
    return out
