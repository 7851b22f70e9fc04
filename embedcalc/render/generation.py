"""The table of ``embedcalc bench --mode generate``: each measured number beside its prediction and the error."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from embedcalc.analysis.report import Analysis
from embedcalc.reconcile.generation import GenerationMeasurement
from embedcalc.reconcile.prediction import error_pct
from embedcalc.render import units
from embedcalc.render.fit import FitTable


def _ms(value: float | int | None) -> str:
    return "—" if value is None else f"{float(value) * 1000:.3f} ms"


def _rate(value: float | int | None) -> str:
    return "—" if value is None else f"{float(value):,.1f}"


def _bytes(value: float | int | None) -> str:
    return "—" if value is None else f"{units.binary_bytes(int(value))} ({int(value):,} B)"


def _error(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def generation_table(analysis: Analysis, m: GenerationMeasurement) -> Table:
    """Measured vs predicted: time to first token, decode latency, tokens/s, KV cache bytes, peak memory."""
    w = analysis.workload
    title = (
        f"Generation — {analysis.target} on {m.device}: {w.dtype}, attention {w.attention}, batch {m.batch_size}, "
        f"prompt {m.prompt_len}, {m.gen_tokens} decode steps, {m.repeat} timed run(s)"
    )
    caption = (
        f"Predicted: {m.prediction_note}; median ↔ mean decode step over the generation, p90 ↔ the last step. "
        f"Decode latency first quarter {_ms(m.decode_s_per_token_first_quarter)}, last quarter "
        f"{_ms(m.decode_s_per_token_last_quarter)}; p10 {_ms(m.decode_s_per_token_p10)}. "
        f"Memory measured by {m.peak_memory_method}."
    )
    table = FitTable(title=escape(title), title_justify="left", caption=escape(caption), keep=1)
    for name, justify in (
        ("quantity", "left"),
        ("measured", "right"),
        ("predicted", "right"),
        ("error", "right"),
    ):
        table.add_column(name, justify=justify, whole=name == "error", prefer_whole=name != "quantity")
    p, e = m.predicted, m.errors_pct
    rows = [
        ("time to first token", _ms(m.ttft_s), _ms(p["ttft_s"]), _error(e["ttft_s"])),
        ("decode s/token (median)", _ms(m.decode_s_per_token_median), _ms(p["decode_s_per_token_median"]),
         _error(e["decode_s_per_token_median"])),
        ("decode s/token (p90)", _ms(m.decode_s_per_token_p90), _ms(p["decode_s_per_token_p90"]),
         _error(e["decode_s_per_token_p90"])),
        ("decode tokens/s per sequence", _rate(m.decode_tokens_per_s), _rate(p["decode_tokens_per_s"]),
         _error(e["decode_tokens_per_s"])),
        ("decode tokens/s (batch)", _rate(m.batch_decode_tokens_per_s),
         _rate(None if p["decode_tokens_per_s"] is None else float(p["decode_tokens_per_s"]) * m.batch_size),
         _error(e["decode_tokens_per_s"])),
        ("KV cache (tensors vs analytic)", _bytes(m.kv_cache_bytes_measured), _bytes(m.kv_cache_bytes),
         "equal" if m.kv_cache_matches else _error(e["kv_cache_bytes_measured"])),
        ("peak memory", _bytes(m.peak_memory_bytes), _bytes(p["peak_memory_bytes"]),
         _error(e["peak_memory_bytes"])),
    ]  # fmt: skip
    if m.recurrent_state_bytes:
        state = m.recurrent_state_bytes_measured, m.recurrent_state_bytes
        rows.insert(-1, ("recurrent state (tensors vs analytic)", _bytes(state[0]), _bytes(state[1]),
                         "equal" if m.state_matches else _error(error_pct(*state))))  # fmt: skip
    for row in rows:
        table.add_row(*row)
    return table
