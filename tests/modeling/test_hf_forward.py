"""The general reader's meta forward (embedcalc.modeling.hf_forward): where a multimodal class's forward refuses token
ids alone, its language model runs alone, counted as FlopCounterMode counts that module run directly, its paths as
they sit in the outer model, its head once — and only where every module of it runs on token ids: a decoder that
cross-attends to image features (BLIP's) is left uncounted, with the reason, not counted short."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.torch]
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from embedcalc.analysis.workload import Workload  # noqa: E402
from embedcalc.modeling.hf_classes import build_meta_class, choose_class, hf_config, quiet  # noqa: E402
from embedcalc.modeling.hf_meta import build_meta_model  # noqa: E402

B, S = 2, 16
D, LAYERS, VOCAB = 32, 2, 100
KOSMOS2 = {
    "model_type": "kosmos-2",
    "latent_query_num": 4,
    "text_config": dict(embed_dim=D, layers=LAYERS, attention_heads=4, ffn_dim=64, vocab_size=VOCAB,
                        max_position_embeddings=64),
    "vision_config": dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                          image_size=28, patch_size=14),
}  # fmt: skip
BLIP_TEXT = dict(hidden_size=D, encoder_hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                 num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=1,
                 sep_token_id=2)  # fmt: skip
BLIP_VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                   patch_size=14)  # fmt: skip


def _blip(is_decoder: bool = True) -> dict[str, Any]:
    return {
        "model_type": "blip",
        "text_config": BLIP_TEXT | {"is_decoder": is_decoder},
        "vision_config": BLIP_VISION,
    }


def _direct(raw: dict[str, Any], language: str) -> tuple[Any, dict[str, int]]:
    """The outer model, and FlopCounterMode on its language model run directly on the same token ids: module (its
    class's name as the root) -> FLOPs, inclusive of its children."""
    with quiet():
        config = hf_config(raw)
    class_name, _, _, build_from, _ = choose_class(config)
    model = build_meta_class(class_name, build_from).eval()
    counter = FlopCounterMode(display=False)
    ids = torch.zeros(B, S, dtype=torch.long, device="meta")
    with counter, quiet():
        model.get_submodule(language)(input_ids=ids, use_cache=True)
    return model, {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}


def _inclusive(flops: dict[str, int], path: str) -> int:
    return sum(v for k, v in flops.items() if k == path or k.startswith(path + "."))


@pytest.mark.parametrize(
    ("raw", "language"),
    [(KOSMOS2, "text_model"), (_blip(is_decoder=False), "text_decoder")],
    ids=["kosmos-2", "blip without cross-attention"],
)
def test_the_language_model_runs_alone_counted_as_flop_counter_mode_counts_it(
    raw: dict[str, Any], language: str
) -> None:
    """Kosmos-2 (its forward wants pixel values or image embeddings) and a BLIP whose text decoder has no
    cross-attention (is_decoder false): FLOPs of the language model alone, module by module what FlopCounterMode
    gives on that module run directly, on the outer model's paths (the components its parameters sit on)."""
    meta = build_meta_model(raw, batch=B, seq_len=S)
    assert meta.text_only == language and meta.ran_alone is not None
    assert meta.flops is not None, meta.flops_error
    model, direct = _direct(raw, language)
    root = next(k for k in direct if k != "Global" and "." not in k)  # the language model's class name
    assert sum(meta.flops.values()) == direct["Global"] == direct[root] > 0
    for name, total in direct.items():
        if name.startswith(root + "."):
            assert _inclusive(meta.flops, language + name[len(root) :]) == total, name
    assert set(meta.flops) <= set(dict(model.named_modules()))  # module paths as they sit in the outer model
    assert meta.cache is not None and meta.cache_error is None


def test_kosmos2_counts_its_head_once_and_reports_its_cache() -> None:
    from embedcalc.api.general import read_general

    run = Workload(batch_size=B, seq_len=S, gen_tokens=4)
    count = read_general(KOSMOS2, run=run)
    assert count.flops is not None and count.ran_alone == "text_model"
    assert (
        count.flops.as_dict()["head/lm"] == 2 * B * S * D * VOCAB
    )  # logits once, by the module that holds them
    # keys and values of every layer, at fp32, for the prompt and the generated tokens
    assert count.kv_cache_bytes == LAYERS * 2 * B * (S + 4) * D * 4
    assert any("run alone on token ids" in n and "pixel_values" in n for n in count.notes)
    from embedcalc.render.general import general_tables

    assert "(text_model) run alone on token ids" in str(general_tables(count)[1].caption)


@pytest.mark.parametrize("which", ["default", "text_config"])
def test_a_decoder_that_cross_attends_to_image_features_is_not_counted_short(which: str) -> None:
    """BLIP's text decoder runs on token ids alone, but skips its cross-attention to the image features without
    them (what FlopCounterMode on that module sees): FLOPs and cache stay uncounted, the reason naming the modules
    that did not run; the parameters stand."""
    raw = _blip() if which == "default" else {"model_type": "blip_text_model", **BLIP_TEXT}
    meta = build_meta_model(raw, batch=B, seq_len=S)
    assert meta.text_only == "text_decoder" and meta.flops is None and meta.cache is None
    assert meta.flops_error is not None and "pixel_values" in meta.flops_error
    assert "text_decoder.bert.encoder.layer.0.crossattention" in meta.flops_error
    assert any(".crossattention." in n for n, _ in meta.parameters)
    _, direct = _direct(_blip(), "text_decoder")
    assert direct["Global"] > 0 and not any("crossattention" in k for k in direct)
