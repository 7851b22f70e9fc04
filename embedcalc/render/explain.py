"""Rich panels for ``embedcalc explain``: one panel per topic, its sentences from the message catalogues
(:mod:`embedcalc.render.i18n`) filled with the numbers of the analysis answers, and tables for the lists.

Numbers are formatted here, the same way in every language (``109,482,240``, ``76.8``, ``417.64 MiB``), so a
translation changes the words and never a number. Text between backticks renders as code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from embedcalc.analysis.explain import (
    CostAnswer,
    EmbedDimAnswer,
    FineTuneAnswer,
    HeadsAnswer,
    Scenario,
    WidthDepthAnswer,
)
from embedcalc.render import units
from embedcalc.render.fit import FitPanel, FitTable
from embedcalc.render.i18n import Messages

CODE_STYLE = "bold cyan"
Answer = HeadsAnswer | WidthDepthAnswer | FineTuneAnswer | EmbedDimAnswer | CostAnswer


def num(value: int | float) -> str:
    """``109482240`` -> ``109,482,240``; ``76.8`` stays ``76.8``; at most two decimals."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def shape(values: Sequence[int | float]) -> str:
    """A tensor shape as Python prints a tuple: ``(1, 128, 10, 76.8)``, ``(768,)`` (no thousands separators)."""
    parts = [num(v).replace(",", "") for v in values]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def listing(values: Sequence[int | float], m: Messages | None = None) -> str:
    """``8, 12``; with messages, alternatives: ``8 or 12`` (``8 或 12``)."""
    words = [num(v) for v in values]
    if m is None or len(words) < 2:
        return ", ".join(words)
    return ", ".join(words[:-1]) + m("word.or") + words[-1]


def styled(message: str) -> Text:
    """A sentence with its backticked code terms in code style."""
    text = Text()
    for i, part in enumerate(message.split("`")):
        text.append(part, style=CODE_STYLE if i % 2 else "")
    return text


class _Page:
    """The items of one panel, in order."""

    def __init__(self, messages: Messages) -> None:
        self.m = messages
        self.items: list[RenderableType] = []

    def say(self, key: str, **values: Any) -> None:
        self.items.append(styled(self.m(key, **values)))

    def heading(self, key: str, **values: Any) -> None:
        text = styled(self.m(key, **values))
        text.stylize("bold")
        self.items += [Text(""), text]

    def bullet(self, key: str, **values: Any) -> None:
        self.items.append(styled("• " + self.m(key, **values)))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> None:
        # too wide: stacked, the first column repeated
        table = FitTable(show_edge=False, pad_edge=False, keep=1)
        for i, header in enumerate(headers):
            right = i >= right_from
            table.add_column(self.m(header), justify="right" if right else "left", whole=right)
        for row in rows:
            table.add_row(*row)
        self.items.append(Text(""))
        self.items.append(table)

    def panel(self, title_key: str, **values: Any) -> FitPanel:
        return FitPanel(Group(*self.items), title=styled(self.m(title_key, **values)), title_align="left")


def _yes(m: Messages, flag: bool) -> str:
    return m("word.yes") if flag else m("word.no")


# --- heads ----------------------------------------------------------------------------------------------------


def _heads_q4(p: _Page, a: HeadsAnswer) -> None:
    p.heading("heads.q4")
    p.say("heads.reshape", q=num(a.q_dim), src=shape(a.reshape_from), dst=shape(a.reshape_to))
    if a.explicit_head_dim is not None:
        p.say("heads.explicit", hd=num(a.head_dim), h=num(a.num_heads), q=num(a.q_dim), d=num(a.embed_dim))
    elif a.divisible:
        p.say("heads.divides", d=num(a.embed_dim), h=num(a.num_heads), hd=num(a.head_dim))
    else:
        p.say("heads.fails", d=num(a.embed_dim), h=num(a.num_heads), hd=num(a.head_dim))
        p.say("heads.fix", d=num(a.embed_dim), heads=listing(a.nearest_valid_heads, p.m),
              hds=listing(a.nearest_valid_head_dims, p.m), h=num(a.num_heads),
              dims=listing(a.nearest_embed_dims, p.m))  # fmt: skip
    if a.kv_heads_divide and a.num_kv_heads == a.num_heads:
        p.say("heads.kv_mha", kv=num(a.num_kv_heads))
    elif a.kv_heads_divide:
        p.say("heads.kv_ok", kv=num(a.num_kv_heads), g=num(a.kv_groups))
    else:
        p.say("heads.kv_fails", kv=num(a.num_kv_heads), h=num(a.num_heads), g=num(a.kv_groups),
              nearest=listing(a.nearest_kv_heads, p.m))  # fmt: skip
    if a.rope_needs_even:
        p.say("heads.rope_odd", hd=num(a.head_dim))


def _heads_q1(p: _Page, a: HeadsAnswer) -> None:
    m = p.m
    p.heading("heads.q1")
    usual = [o.head_dim for o in a.head_dim_options]
    if a.usual_num_heads:
        p.say("heads.usual", usual=listing(usual, m), d=num(a.embed_dim), heads=listing(a.usual_num_heads, m))
    else:
        p.say("heads.usual_none", usual=listing(usual, m), d=num(a.embed_dim))
    p.say("heads.kernels", flash=num(a.flash_attention_max_head_dim))
    p.say("heads.same_cost", q=num(a.q_dim), n=num(a.seq_len), flops=num(a.score_flops_per_token_per_layer))
    if a.cache_layers and not a.kv_cache_standard_formula:
        p.say("heads.kv_cache_model", bytes=units.binary_bytes(a.kv_cache_bytes_per_token))
    elif a.cache_layers and a.divisible:
        p.say("heads.kv_cache", bytes=units.binary_bytes(a.kv_cache_bytes_per_token), layers=num(a.cache_layers),
              kv=num(a.num_kv_heads), hd=num(a.head_dim), e=num(a.dtype_bytes))  # fmt: skip
    elif not a.cache_layers:
        p.say("heads.no_kv_cache")
    rows = [
        [num(o.head_dim), num(o.num_heads), _yes(m, o.valid), _yes(m, o.tensor_core_aligned),
         _yes(m, o.flash_attention_ok), units.binary_bytes(o.kv_cache_bytes_per_token_per_kv_head),
         "—" if o.eager_score_bytes_per_layer is None else units.binary_bytes(o.eager_score_bytes_per_layer)]
        for o in a.head_dim_options
    ]  # fmt: skip
    p.table(["col.head_dim", "col.num_heads", "col.valid", "col.aligned", "col.flash", "col.kv_per_head",
             "col.eager_scores"], rows, right_from=0)  # fmt: skip
    p.say("heads.table_note", b=num(a.batch_size), n=num(a.seq_len), e=num(a.dtype_bytes))
    practical = [c for c in a.valid_choices if 16 <= c.head_dim <= 256]
    rows = [[num(c.num_heads), num(c.head_dim), _yes(m, c.multiple_of_8), _yes(m, c.flash_ok),
             "★" if c.usual else ""] for c in practical]  # fmt: skip
    p.table(["col.num_heads", "col.head_dim", "col.aligned", "col.flash", "col.usual"], rows, right_from=0)
    p.say("heads.all_valid", d=num(a.embed_dim), heads=listing([c.num_heads for c in a.valid_choices]))


def render_heads(a: HeadsAnswer, m: Messages, label: str, valid: bool) -> FitPanel:
    p = _Page(m)
    if not valid:
        p.say("heads.invalid_config")
    _heads_q4(p, a)
    _heads_q1(p, a)
    return p.panel("heads.title", label=label)


# --- width-depth ----------------------------------------------------------------------------------------------


def render_width_depth(a: WidthDepthAnswer, m: Messages, label: str) -> FitPanel:
    p = _Page(m)
    p.say("wd.params", total=num(a.params_total), n=num(a.params_non_embedding), L=num(a.num_layers),
          d=num(a.embed_dim), approx=num(a.approx_12_l_d2), ratio=f"{a.approx_ratio:.3f}")  # fmt: skip
    total = a.params_total or 1
    rows = [[m(f"cat.{k}"), num(v), units.percent(v / total)] for k, v in a.params_by_category.items() if v]
    p.table(["col.part", "col.params", "col.share"], rows)
    p.say("wd.per_layer", per_layer=num(a.params_per_layer))
    p.say("wd.flops", n=num(a.seq_len), fpt=num(a.flops_per_token), kaplan=num(a.kaplan_flops_per_token))
    if a.kv_cache_bytes_per_token:
        p.say("wd.kv", kv=units.binary_bytes(a.kv_cache_bytes_per_token))
    else:
        p.say("wd.kv_none")
    if a.crossover_seq_len is None:
        p.say("wd.crossover_none")
    else:
        p.say("wd.crossover", nstar=num(a.crossover_seq_len))
    p.heading("wd.guidance")
    levine = "wd.levine_above" if a.deeper_than_threshold else "wd.levine_below"
    p.bullet("wd.kaplan")
    p.bullet(
        levine, ratio=num(a.aspect_ratio), d=num(a.embed_dim), th=num(a.depth_threshold), L=num(a.num_layers)
    )
    p.bullet(
        "wd.chinchilla", tokens=units.si(a.chinchilla_tokens), flops=units.flops(a.chinchilla_training_flops)
    )
    rows = [
        [("▶ " if r.is_target else "") + r.name, units.si(r.params), num(r.embed_dim), num(r.num_layers),
         num(r.num_heads), num(r.head_dim), num(r.aspect_ratio)]
        for r in a.references
    ]  # fmt: skip
    p.table(["col.model", "col.params", "col.embed_dim", "col.layers", "col.num_heads", "col.head_dim",
             "col.aspect"], rows)  # fmt: skip
    return p.panel("wd.title", label=label)


# --- fine-tune ------------------------------------------------------------------------------------------------


def _scenario_note(p: _Page, s: Scenario, a: FineTuneAnswer) -> None:
    values = {"a": num(s.value_a), "b": num(s.value_b), "load": num(s.loadable_params),
              "init": num(s.params_to_initialise), "total": num(s.params_b),
              "share": units.percent(s.loadable_share)}  # fmt: skip
    if s.field == "num_heads":
        values["hd"] = num(a.embed_dim // s.value_b)
    p.bullet(f"ft.{s.field}", **values)


def render_fine_tune(a: FineTuneAnswer, m: Messages, label: str, target: str) -> FitPanel:
    p = _Page(m)
    p.say("ft.intro")
    wider = a.scenario("embed_dim")
    if wider is not None:
        p.say("ft.answer", a=num(wider.value_a), b=num(wider.value_b), load=num(wider.loadable_params),
              total=num(wider.params_b), share=units.percent(wider.loadable_share))  # fmt: skip
    rows = [
        [s.field, f"{num(s.value_a)} → {num(s.value_b)}", num(s.loadable_params), num(s.params_to_initialise),
         units.percent(s.loadable_share)]
        for s in a.scenarios
    ]  # fmt: skip
    p.table(["col.change", "col.values", "col.loadable", "col.to_init", "col.loadable_share"], rows)
    p.items.append(Text(""))
    for s in a.scenarios:
        _scenario_note(p, s, a)
    if wider is not None:
        p.say("ft.diff", target=target, d=num(wider.value_b).replace(",", ""))
    if a.methods:
        _methods(p, a, target)
    return p.panel("ft.title", label=label)


def _methods(p: _Page, a: FineTuneAnswer, target: str) -> None:
    """Which method fits which device: a table, then one verdict per device."""
    w = a.method_workload
    devices = list(dict.fromkeys(f.device for f in a.methods))
    p.heading("ft.methods", devices=", ".join(devices), b=num(w["batch_size"]), n=num(w["seq_len"]),
              dtype=w["dtype"], target=target)  # fmt: skip
    rows = [
        [f.device, f.method, _yes(p.m, f.fits), "—" if f.memory_bytes is None else units.binary_bytes(f.memory_bytes),
         f.recompute or "—", "—" if f.trainable_params is None else num(f.trainable_params), units.seconds(f.step_s)]
        for f in a.methods
    ]  # fmt: skip
    p.table(["col.device", "col.method", "col.fits", "col.memory", "col.recompute", "col.trainable",
             "col.step"], rows, right_from=2)  # fmt: skip
    p.items.append(Text(""))
    for device in devices:
        fits = [f for f in a.methods if f.device == device]
        limit = units.binary_bytes(fits[0].limit_bytes)
        full = next((f for f in fits if f.method == "full" and f.memory_bytes is not None), None)
        counted = [(f, f.memory_bytes) for f in fits if f.memory_bytes is not None]
        ok = [(f, m) for f, m in counted if f.fits]
        if ok:
            best, memory = min(ok, key=lambda fm: fm[1])
            p.bullet("ft.methods.fit", device=device, limit=limit, methods=", ".join(f.method for f, _ in ok),
                     best=best.method, memory=units.binary_bytes(memory),
                     full=units.binary_bytes(full.memory_bytes) if full and full.memory_bytes else "—")  # fmt: skip
        elif counted:
            least, memory = min(counted, key=lambda fm: fm[1])
            p.bullet("ft.methods.none", device=device, limit=limit, method=least.method,
                     memory=units.binary_bytes(memory))  # fmt: skip
    refused = {f.method: f.reason for f in a.methods if f.memory_bytes is None and f.reason}
    for method, reason in refused.items():
        p.bullet("ft.methods.refused", method=method, reason=reason)


# --- embed-dim ------------------------------------------------------------------------------------------------


def _role(m: Messages, key: str) -> str:
    """The catalogue's description of a component, by its last one or two key segments; '' if none."""
    segments = key.split("/")
    for candidate in ("/".join(segments[-2:]), segments[-1]):
        message_key = "role." + candidate.replace("/", ".")
        text = m(message_key)
        if text != message_key:
            return text
    return ""


def render_embed_dim(a: EmbedDimAnswer, m: Messages, label: str) -> FitPanel:
    p = _Page(m)
    p.say("ed.width", d=num(a.embed_dim), shape=shape(a.hidden_state_shape),
          bytes=units.binary_bytes(a.hidden_state_bytes))  # fmt: skip
    p.say("ed.split", h=num(a.num_heads), hd=num(a.head_dim), q=num(a.q_dim), kv=num(a.kv_dim),
          f=num(a.ffn_dim), ratio=num(a.ffn_ratio))  # fmt: skip
    p.say("ed.share", share=units.percent(a.width_share), params=num(a.width_params), d=num(a.embed_dim),
          total=num(a.params_total))  # fmt: skip
    rows = [
        [c.key, _role(m, c.key), " + ".join(shape(s) for s in c.shapes), num(c.copies), num(c.params),
         units.percent(c.share)]
        for c in a.components
    ]  # fmt: skip
    p.table(["col.component", "col.role", "col.shapes", "col.layers", "col.params", "col.share"], rows,
            right_from=3)  # fmt: skip
    p.say("ed.growth")
    return p.panel("ed.title", label=label)


# --- cost -----------------------------------------------------------------------------------------------------


def render_cost(a: CostAnswer, m: Messages, label: str) -> FitPanel:
    p = _Page(m)
    p.say("cost.forward", fwd=units.flops(a.forward_flops), fpt=num(a.flops_per_token),
          train=units.flops(a.training_step_flops))  # fmt: skip
    total = a.forward_flops or 1
    rows = [[m(f"flops.{k}"), num(v), units.percent(v / total)] for k, v in a.flops_by_category.items() if v]
    p.table(["col.part", "col.flops", "col.share"], rows)
    if a.crossover_seq_len is None or a.seq_len_over_crossover is None:
        p.say("cost.scores_none", n2=num(a.doubled_seq_len), fwd2=units.flops(a.doubled_forward_flops))
    else:
        p.say("cost.scores", share=units.percent(a.score_share), n=num(a.seq_len), nstar=num(a.crossover_seq_len),
              ratio=num(a.seq_len_over_crossover), n2=num(a.doubled_seq_len),
              fwd2=units.flops(a.doubled_forward_flops), share2=units.percent(a.doubled_score_share))  # fmt: skip
    if a.forward_causal_flops is not None:
        p.say("cost.causal", causal=units.flops(a.forward_causal_flops))
    memory = [
        ("weights", a.weights_bytes), ("gradients", a.gradients_bytes), ("optimizer", a.optimizer_bytes),
        ("activations", a.activations_bytes), ("kv_cache", a.kv_cache_bytes), ("total", a.total_bytes),
    ]  # fmt: skip
    rows = [[m(f"memory.{k}"), units.binary_bytes(v)] for k, v in memory if v or k == "total"]
    p.table(["col.memory", "col.bytes"], rows)
    p.say("cost.more")
    return p.panel("cost.title", label=label, b=num(a.batch_size), n=num(a.seq_len), dtype=a.dtype,
                   mode=m(f"mode.{a.mode}"))  # fmt: skip


def render_answer(
    topic: str, answer: Answer, messages: Messages, label: str, target: str, valid: bool = True
) -> FitPanel:
    """The panel of one topic's answer."""
    if isinstance(answer, HeadsAnswer):
        return render_heads(answer, messages, label, valid)
    if isinstance(answer, WidthDepthAnswer):
        return render_width_depth(answer, messages, label)
    if isinstance(answer, FineTuneAnswer):
        return render_fine_tune(answer, messages, label, target)
    if isinstance(answer, EmbedDimAnswer):
        return render_embed_dim(answer, messages, label)
    return render_cost(answer, messages, label)
