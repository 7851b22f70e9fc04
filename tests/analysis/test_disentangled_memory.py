"""DeBERTa's disentangled attention in the training activations (issue 23 gap; analysis/memory/disentangled.py):
what autograd saves for the c2p and p2c terms, by hand, then measured with ``saved_tensors_hooks`` on embedcalc's
torch model (exactly the analytic attention terms) and on transformers' ``DebertaV2Model`` (the same, plus its
padding mask: b n² bytes a layer, which no encoder here counts).

Small variants of the published microsoft/deberta-v3-base file (tests/sources/hf/test_hf_deberta.py's), dropout 0:
d 64, 4 heads of 16, 2 layers, 8 position buckets (R = 16 table rows; 32 unbucketed).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import mapped_config, quiet_transformers
from saved_tensors import saved_bytes
from sources.hf.test_hf_deberta import SMALL, VARIANTS, _raw

from embedcalc.analysis.memory.training import saved_activations
from embedcalc.analysis.workload import Workload

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
RELATIVE = sorted(v for v in VARIANTS if v != "no-relative")


def _raw_small(variant: str, **extra: Any) -> dict[str, Any]:
    return _raw(**(SMALL | VARIANTS[variant] | NO_DROPOUT | extra))


def _attention_terms(config: Any, b: int, n: int, dtype: str = "fp32", **workload: Any) -> dict[str, int]:
    w = Workload(batch_size=b, seq_len=n, mode="training", dtype=dtype, attention="eager") if not workload else \
        Workload(batch_size=b, seq_len=n, mode="training", dtype=dtype, **workload)  # fmt: skip
    return {k: v for k, v in saved_activations(config, w).items() if "/attention/" in k}


def _attends(model: Any) -> list[tuple[Any, str]]:
    """Every layer's ``attention.attend``: embedcalc's attention without its norm and residual."""
    return [(layer.attention, "attend") for layer in model.encoder.layers]


def test_position_terms_by_hand() -> None:
    """v3 (both terms, shared projections, a normed table), b 2, n 12, fp32: per layer and term the broadcast
    position keys / queries b h R hd, the pre-gather scores b h n R, the n x n int64 index and the divisor; p2c's
    K once more (t h hd); the content divisor; once per stack the normed table R d."""
    b, n, h, hd, rows, d, e = 2, 12, 4, 16, 16, 64, 4
    per_term = b * h * rows * hd * e + b * h * n * rows * e + n * n * 8 + e
    per_layer = 2 * per_term + b * n * h * hd * e + e
    terms = _attention_terms(mapped_config(_raw_small("v3")), b, n)
    assert terms["encoder/attention/positions"] == 2 * per_layer + rows * d * e == 78_360


@pytest.mark.torch
@pytest.mark.parametrize("variant", RELATIVE)
@pytest.mark.parametrize(("b", "n"), [(2, 12), (3, 7), (1, 20)])
def test_torch_model_saves_exactly_the_analytic_attention_terms(variant: str, b: int, n: int) -> None:
    import torch

    from embedcalc.modeling import build_model

    config = mapped_config(_raw_small(variant))
    model = build_model(config, attention="eager", device="cpu").train()
    ids = torch.randint(0, config.vocab_size, (b, n), generator=torch.Generator().manual_seed(0))
    assert saved_bytes(model, lambda: model(ids), methods=_attends(model)) == sum(
        _attention_terms(config, b, n).values()
    )


@pytest.mark.torch
@pytest.mark.parametrize("variant", RELATIVE)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_transformers_saves_the_analytic_terms_and_its_padding_mask(variant: str, dtype: str) -> None:
    """``DisentangledSelfAttention`` and the output projection (``attention.output.dense``, which saves the
    context) of every layer: the analytic terms plus transformers' bool padding mask, b n² a layer."""
    import torch

    transformers = quiet_transformers()
    b, n = 2, 12
    raw = _raw_small(variant)
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(transformers.DebertaV2Config.from_dict(raw),
                                               attn_implementation="eager")  # fmt: skip
    model = model.to(torch.bfloat16 if dtype == "bf16" else torch.float32).train()
    modules = [
        m for layer in model.encoder.layer for m in (layer.attention.self, layer.attention.output.dense)
    ]
    ids = torch.randint(1, 101, (b, n), generator=torch.Generator().manual_seed(0))
    measured = saved_bytes(model, lambda: model(input_ids=ids, attention_mask=torch.ones_like(ids)), modules)
    config = mapped_config(raw)
    assert measured == sum(_attention_terms(config, b, n, dtype).values()) + config.num_layers * b * n * n


@pytest.mark.torch
def test_bf16_torch_model_saves_the_analytic_terms() -> None:
    """The softmax runs in the model's dtype (transformers' DeBERTa: no float32 upcast), the divisors are bf16."""
    import torch

    from embedcalc.modeling import build_model

    config = mapped_config(_raw_small("v3"))
    model = build_model(config, attention="eager", device="cpu", dtype=torch.bfloat16).train()
    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    assert saved_bytes(model, lambda: model(ids), methods=_attends(model)) == sum(
        _attention_terms(config, 2, 12, "bf16").values()
    )


def test_the_core_is_eager_whatever_attention_says() -> None:
    """DeBERTa has no fused core (neither transformers' nor embedcalc's model): sdpa saves the same b h n² softmax
    output as eager, in training, and the inference peak holds the scores."""
    from embedcalc.analysis.memory.inference import peak_candidates
    from embedcalc.analysis.structure import Dims

    config = mapped_config(_raw_small("v3"))
    assert _attention_terms(config, 2, 12, attention="sdpa") == _attention_terms(config, 2, 12)
    x = Dims.of(config, 2, 12)
    sdpa, eager = (
        peak_candidates(config, Workload(batch_size=2, seq_len=12, attention=a), x) for a in ("sdpa", "eager")
    )
    assert sdpa == eager


def test_dropout_and_recompute() -> None:
    """With pos_dropout each layer saves its dropped table and the 1-byte mask (R d (e + 1)) in place of the shared
    normed one; selective recompute keeps the position terms (only the softmax core is recomputed); full keeps the
    shared table alone, an input of every recomputed layer."""
    b, n, rows, d, e, layers = 2, 12, 16, 64, 4, 2
    plain = _attention_terms(mapped_config(_raw_small("v3")), b, n)["encoder/attention/positions"]
    dropped = mapped_config(_raw_small("v3", hidden_dropout_prob=0.1))
    with_dropout = _attention_terms(dropped, b, n)["encoder/attention/positions"]
    assert with_dropout == plain - rows * d * e + layers * rows * d * (e + 1)
    config = mapped_config(_raw_small("v3"))
    selective = _attention_terms(config, b, n, attention="eager", recompute="selective")
    assert selective["encoder/attention/positions"] == plain and "encoder/attention/scores" not in selective
    full = _attention_terms(dropped, b, n, attention="eager", recompute="full")
    assert full == {"encoder/attention/positions": rows * d * e}
