"""``check --suggest``: the nearest valid configs to an invalid one, each as ready ``--set`` overrides.

Candidates come from the shape rules that fail most (heads dividing embed_dim, KV heads dividing heads, an even
head_dim for rope): nearby head counts, nearby embed_dim multiples, an explicit head_dim, nearby KV head counts.
Each candidate is validated like any config; the valid ones are ranked by how little they change the parameter
count. The reference count is the config as written with head_dim = embed_dim / num_heads taken as an exact
fraction (what the user meant), so moving heads costs nothing and moving embed_dim costs what it adds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from embedcalc.analysis.params import count_params
from embedcalc.config.divisors import nearest_divisible, nearest_divisors
from embedcalc.config.resolved import ResolvedShape
from embedcalc.config.schema import ModelConfig
from embedcalc.errors import ConfigError


@dataclass(frozen=True)
class Suggestion:
    """One valid alternative: the overrides that produce it, its size, and the change from the intended size."""

    overrides: tuple[str, ...]
    params: int
    delta_params: int | float

    @property
    def set_line(self) -> str:
        return " ".join(f"--set {o}" for o in self.overrides)


def _int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _candidates(data: dict[str, Any]) -> list[dict[str, int]]:
    d, h, kv, hd = (
        _int(data, "embed_dim"),
        _int(data, "num_heads"),
        _int(data, "num_kv_heads"),
        _int(data, "head_dim"),
    )
    rope = data.get("position") == "rope"
    out: list[dict[str, int]] = []
    if d and h and hd is None:
        for heads in nearest_divisors(d, h, 4):
            out.append({"num_heads": heads})
        step = 2 * h if rope else h
        below, above = nearest_divisible(d, step)
        for dim in (below, above, below - step, above + step):
            if dim > 0 and dim != d:
                out.append({"embed_dim": dim})
        quotient = max(8, round(d / h / 8) * 8)
        out.append({"head_dim": quotient})
    if hd and rope and hd % 2:
        out += [{"head_dim": hd - 1}, {"head_dim": hd + 1}]
    if h and kv and h % kv:
        for k in nearest_divisors(h, kv, 3):
            out.append({"num_kv_heads": k})
    # a heads fix can break the KV rule: pair each new head count with the nearest KV count dividing it
    for cand in list(out):
        if "num_heads" in cand and kv and cand["num_heads"] % kv:
            out.append({**cand, "num_kv_heads": nearest_divisors(cand["num_heads"], kv, 1)[0]})
    return out


def _reference_params(data: dict[str, Any]) -> int | float | None:
    """Parameters of the config as written, head_dim = embed_dim / num_heads as an exact fraction."""
    d, h = _int(data, "embed_dim"), _int(data, "num_heads")
    if not d or not h:
        return None
    raw = {k: v for k, v in data.items() if k in ModelConfig.model_fields}
    if raw.get("head_dim") is None:
        raw["head_dim"] = Fraction(d, h)
    try:
        total = count_params(ModelConfig.model_construct(**raw)).total
    except (TypeError, ValueError, AttributeError, KeyError):
        return None
    return int(total) if Fraction(total).denominator == 1 else float(total)


def suggest(
    raw: dict[str, Any], load: Callable[[list[str]], ResolvedShape], limit: int = 5
) -> list[Suggestion]:
    """Valid alternatives to the invalid config ``raw``, ranked by |change in params|; ``load(extra_overrides)``
    validates a candidate (the caller's loader: the same target and overrides, plus the candidate's), raising
    ConfigError when it is still invalid."""
    reference = _reference_params(raw)
    seen: set[tuple[str, ...]] = set()
    found: list[Suggestion] = []
    for cand in _candidates(raw):
        extra = tuple(f"{k}={v}" for k, v in cand.items())
        if extra in seen:
            continue
        seen.add(extra)
        try:
            config = load(list(extra))
        except ConfigError:
            continue
        params = count_params(config).total
        delta = params - reference if reference is not None else 0
        found.append(Suggestion(extra, params, delta))
    found.sort(key=lambda s: (abs(s.delta_params), len(s.overrides)))
    return found[:limit]
