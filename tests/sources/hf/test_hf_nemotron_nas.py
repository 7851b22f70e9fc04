"""The Nemotron NAS family (``model_type: nemotron-nas``, DeciLMForCausalLM; sources/hf/families/nemotron_nas.py).

transformers has no class for it, so the reference is an independent re-implementation of the DeciLM decoder
written here from NVIDIA's ``modeling_decilm.py`` (the hub remote code; read in the public copy
DeltaVector1/Chat-Prompters@760b19a): ``DeciLMDecoderLayer`` builds ``input_layernorm`` + ``DeciLMAttention`` (or
``DeciLMLinearAttention``) unless ``attention.no_op``, ``post_attention_layernorm`` + ``DeciLMMLP`` (or
``DeciLMLinearMLP``) unless ``ffn.no_op``; q/k/v/o of hidden / heads per head with num_heads / n_heads_in_group KV
heads; the MLP gated, of ``_ffn_mult_to_intermediate_size``. It is built on the meta device straight from the
config.json, its numel summed and its forward's matmul FLOPs counted, and compared with what embedcalc counts from
the same file, exactly. The fixtures are the published config.json files of Llama-3.3-Nemotron-Super-49B-v1 and
Llama-3.1-Nemotron-Ultra-253B-v1 (copied from NVIDIA NeMo's ``llama_nemotron_config.py``@8cfedd7, which copies
them from the hub); their totals are checked against the model cards' sizes, within rounding. A tiny constructed
file covers ``replace_with_linear``, which no published checkpoint uses.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hf_reference import fixture_path, mapped_config, raw_fixture

from embedcalc.analysis.flops import forward_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.sources.hf.families.nemotron_nas import ffn_mult_to_intermediate_size
from embedcalc.sources.loading import load_target

SUPER, ULTRA = "llama-3.3-nemotron-super-49b-v1", "llama-3.1-nemotron-ultra-253b-v1"
# the model cards: "Llama-3.3-Nemotron-Super-49B-v1" (49B; NVIDIA's blog and NIM card give 49.9B) and
# "Llama-3.1-Nemotron-Ultra-253B-v1" (253B)
CARD_BILLIONS = {SUPER: (49.9, 1), ULTRA: (253, 0)}


def _tiny(**attention_extra: Any) -> dict[str, Any]:
    """A constructed nemotron-nas file with one layer of every kind DeciLM builds (no published checkpoint replaces a
    sublayer by a linear, so this one is representative, not published)."""

    def block(attn: dict[str, Any], ffn: dict[str, Any]) -> dict[str, Any]:
        return {"attention": {"no_op": False, "replace_with_linear": False, "sparsify": None, **attn},
                "ffn": {"no_op": False, "replace_with_linear": False, "sparsify": None, **ffn}}  # fmt: skip

    blocks = [
        block({"n_heads_in_group": 4, **attention_extra}, {"ffn_mult": 2.625}),
        block({"replace_with_linear": True, "n_heads_in_group": None}, {"replace_with_linear": True}),
        block({"no_op": True, "n_heads_in_group": None}, {"ffn_mult": 1.3125}),
        block({"n_heads_in_group": 2}, {"no_op": True, "ffn_mult": None}),
        block({"no_op": True, "n_heads_in_group": None}, {"no_op": True, "ffn_mult": None}),
        block({"n_heads_in_group": 4}, {"ffn_mult": 2.625}),
    ]
    return {
        "architectures": ["DeciLMForCausalLM"], "model_type": "nemotron-nas", "hidden_size": 256,
        "num_attention_heads": 8, "num_hidden_layers": len(blocks), "num_key_value_heads": None,
        "intermediate_size": None, "vocab_size": 512, "max_position_embeddings": 1024, "hidden_act": "silu",
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "block_configs": blocks,
    }  # fmt: skip


# --- the independent DeciLM re-implementation (torch, meta device) -------------------------------------------------


def _decilm(raw: dict[str, Any], device: str = "meta") -> Any:
    """DeciLMForCausalLM of ``raw`` as modeling_decilm.py builds it (module docstring, its module names), on
    ``device``."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    d, heads = raw["hidden_size"], raw["num_attention_heads"]
    hd, attn_bias, mlp_bias = d // heads, raw.get("attention_bias", False), raw.get("mlp_bias", False)

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

    class Attention(nn.Module):
        def __init__(self, group: int) -> None:
            super().__init__()
            self.kv = heads // group
            self.q_proj = nn.Linear(d, heads * hd, bias=attn_bias)
            self.k_proj = nn.Linear(d, self.kv * hd, bias=attn_bias)
            self.v_proj = nn.Linear(d, self.kv * hd, bias=attn_bias)
            self.o_proj = nn.Linear(d, d, bias=attn_bias)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, heads, hd).transpose(1, 2)  # (B, h, T, hd)
            k = self.k_proj(x).view(b, t, self.kv, hd).transpose(1, 2).repeat_interleave(heads // self.kv, 1)
            v = self.v_proj(x).view(b, t, self.kv, hd).transpose(1, 2).repeat_interleave(heads // self.kv, 1)
            weights = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd), dim=-1)  # (B, h, T, T)
            return self.o_proj((weights @ v).transpose(1, 2).reshape(b, t, d))

    class MLP(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.gate_proj = nn.Linear(d, width, bias=mlp_bias)
            self.up_proj = nn.Linear(d, width, bias=mlp_bias)
            self.down_proj = nn.Linear(width, d, bias=mlp_bias)

        def forward(self, x: Any) -> Any:
            return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class LinearAttention(nn.Module):  # DeciLMLinearAttention
        def __init__(self) -> None:
            super().__init__()
            self.linear_attn = nn.Linear(d, d, bias=False)

        def forward(self, x: Any) -> Any:
            return self.linear_attn(x)

    class LinearMLP(nn.Module):  # DeciLMLinearMLP
        def __init__(self) -> None:
            super().__init__()
            self.linear_mlp = nn.Linear(d, d, bias=False)

        def forward(self, x: Any) -> Any:
            return self.linear_mlp(x)

    class Layer(nn.Module):  # DeciLMDecoderLayer
        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__()
            attn, ffn = config["attention"], config["ffn"]
            self.self_attn = self.mlp = None
            if not attn["no_op"]:
                self.input_layernorm = RMSNorm()
                self.self_attn = (LinearAttention() if attn["replace_with_linear"]
                                  else Attention(attn["n_heads_in_group"]))  # fmt: skip
            if not ffn["no_op"]:
                self.post_attention_layernorm = RMSNorm()
                if ffn["replace_with_linear"]:
                    self.mlp = LinearMLP()
                else:  # _find_multiple(int(2 ffn_mult d / 3), 256)
                    self.mlp = MLP(-(-int(2 * ffn["ffn_mult"] * d / 3) // 256) * 256)

        def forward(self, x: Any) -> Any:  # norms are element-wise: their FLOPs are not matmuls
            x = x + self.self_attn(x) if self.self_attn is not None else x
            return x + self.mlp(x) if self.mlp is not None else x

    class Decoder(nn.Module):  # DeciLMModel
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(raw["vocab_size"], d)
            self.layers = nn.ModuleList(Layer(c) for c in raw["block_configs"])
            self.norm = RMSNorm()

    class Model(nn.Module):  # DeciLMForCausalLM
        def __init__(self) -> None:
            super().__init__()
            self.model = Decoder()
            self.lm_head = nn.Linear(d, raw["vocab_size"], bias=False)
            if raw.get("tie_word_embeddings", False):
                self.lm_head.weight = self.model.embed_tokens.weight

        def forward(self, ids: Any) -> Any:
            x = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                x = layer(x)
            return self.lm_head(x)

    with torch.device(device):
        return Model()


def _reference_flops(raw: dict[str, Any], batch: int, seq_len: int) -> int:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    model = _decilm(raw)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.zeros(batch, seq_len, dtype=torch.long, device="meta"))
    return int(counter.get_total_flops())


def _kv_values_per_token(raw: dict[str, Any]) -> int:
    """K and V values one token adds to the cache: 2 x KV heads x head_dim over the attention layers."""
    d, heads = raw["hidden_size"], raw["num_attention_heads"]
    return sum(2 * (heads // b["attention"]["n_heads_in_group"]) * (d // heads) for b in raw["block_configs"]
               if not b["attention"]["no_op"] and not b["attention"]["replace_with_linear"])  # fmt: skip


# --- published files ----------------------------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.parametrize("name", [SUPER, ULTRA])
def test_published_files_count_what_decilm_builds(name: str) -> None:
    raw = raw_fixture(name)
    config = load_target(str(fixture_path(name))).config
    total = count_params(config).total
    assert total == sum(p.numel() for p in _decilm(raw).parameters())
    billions, digits = CARD_BILLIONS[name]
    assert round(total / 1e9, digits) == billions  # Super: 49,867,145,216; Ultra: 253,401,268,224
    assert config.derived()["kv_cache_values_per_token"] == _kv_values_per_token(raw)
    assert forward_flops(config, Workload(batch_size=1, seq_len=8)).forward == _reference_flops(raw, 1, 8)


def test_super_49b_layers() -> None:
    """49 attention layers of 8 KV heads and 31 attention-free layers; MLP widths from ffn_mult 0.5 .. 5.25."""
    config = load_target(str(fixture_path(SUPER))).config
    counts = config.stack_plan("decoder").counts()
    attention = sum(n for b, n in counts if b.attention is not None)
    assert attention == 49 and config.derived()["mixer_layers"] == {"attention": 49, "none": 31}
    assert {b.attention.num_kv_heads for b, _ in counts if b.attention is not None} == {8}
    widths = {b.ffn.ffn_dim for b, _ in counts if b.ffn is not None}
    assert widths == {
        ffn_mult_to_intermediate_size(m, 8192) for m in (0.5, 1.0, 1.3125, 2.625, 3.28125, 5.25)
    }
    assert widths == {2816, 5632, 7168, 14336, 17920, 28672}
    memory = estimate_memory(config, Workload(batch_size=1, seq_len=4096, dtype="bf16"))
    assert memory.kv_cache_bytes == 4096 * 49 * 2 * 8 * 128 * 2  # 49 layers x K and V x 8 heads x 128 x bf16


def test_the_preset_is_the_published_file() -> None:
    """presets/llama-3.3-nemotron-super-49b.yaml transcribes the Super-49B file: the same parameters, FLOPs and KV
    cache through analyze."""
    preset = load_target("llama-3.3-nemotron-super-49b").config
    hub = load_target(str(fixture_path(SUPER))).config
    assert count_params(preset).as_dict() == count_params(hub).as_dict()
    w = Workload(batch_size=2, seq_len=64, dtype="bf16")
    assert forward_flops(preset, w).breakdown.as_dict() == forward_flops(hub, w).breakdown.as_dict()
    assert estimate_memory(preset, w).kv_cache_bytes == estimate_memory(hub, w).kv_cache_bytes


def test_ultra_253b_has_identity_layers() -> None:
    """Ultra's no-op layers: 98 without attention, many of them without an MLP too (no norm, no parameters)."""
    config = load_target(str(fixture_path(ULTRA))).config
    counts = config.stack_plan("decoder").counts()
    assert config.derived()["mixer_layers"] == {"attention": 64, "none": 98}
    empty = sum(n for b, n in counts if b.attention is None and b.ffn is None and b.mixer is None)
    raw = raw_fixture(ULTRA)
    assert empty == sum(1 for b in raw["block_configs"] if b["attention"]["no_op"] and b["ffn"]["no_op"])


# --- every layer kind, on a small constructed file -----------------------------------------------------------------


@pytest.mark.torch
def test_every_layer_kind_counts_params_and_flops_as_decilm() -> None:
    raw = _tiny()
    config = mapped_config(raw)
    assert count_params(config).total == sum(p.numel() for p in _decilm(raw).parameters())
    assert forward_flops(config, Workload(batch_size=2, seq_len=9)).forward == _reference_flops(raw, 2, 9)
    p = count_params(config).as_dict()
    assert p["decoder/mixer/projection"] == p["decoder/ffn/projection"] == 256 * 256
    assert config.derived()["kv_cache_values_per_token"] == _kv_values_per_token(raw)
    assert config.derived()["mixer_layers"] == {"attention": 3, "none": 2, "projection": 1}


@pytest.mark.torch
def test_verify_reconciles_a_nemotron_nas_file_exactly() -> None:
    """embedcalc's own torch model of the file (embedcalc/modeling) against the analysis, on the meta device."""
    pytest.importorskip("torch")
    import embedcalc

    result = embedcalc.verify(str(fixture_path(SUPER)), seq_len=16)
    assert result.agree
    assert result.params.counted_total == 49_867_145_216


def test_ffn_mult_rounds_up_to_a_multiple_of_256() -> None:
    # int(2 x 5.25 x 8192 / 3) = 28672 (a multiple); int(2 x 0.4875 x 16384 / 3) = 5324 -> 5376
    assert ffn_mult_to_intermediate_size(5.25, 8192) == 28672
    assert ffn_mult_to_intermediate_size(0.4875, 16384) == 5376
    assert ffn_mult_to_intermediate_size(39.0, 16384) == 425984


@pytest.mark.parametrize(
    ("edit", "path", "words"),
    [
        (lambda r: r["block_configs"][0]["attention"].update(window_length=4096),
         "block_configs[0].attention.window_length", "not modelled"),
        (lambda r: r["block_configs"][0]["attention"].update(n_heads_in_group=3),
         "block_configs[0].attention.n_heads_in_group", "positive divisor of num_attention_heads (8)"),
        (lambda r: r["block_configs"][2]["ffn"].update(moe={"num_experts": 8}),
         "block_configs[2].ffn.moe", "unknown key 'moe'"),
        (lambda r: r["block_configs"][0]["ffn"].update(hidden_act="relu"),
         "block_configs[0].ffn.hidden_act", "one activation per model"),
        (lambda r: r["block_configs"][0]["ffn"].update(ffn_mult=None),
         "block_configs[0].ffn.ffn_mult", "needs ffn_mult"),
        (lambda r: r.update(num_hidden_layers=7), "block_configs", "lists 6 layers but num_hidden_layers is 7"),
        (lambda r: r.pop("block_configs"), "block_configs", "one per layer"),
    ],
)  # fmt: skip
def test_what_changes_a_layer_and_is_not_modelled_is_refused(cli: Any, write_config: Any, edit: Any, path: str,
                                                            words: str) -> None:  # fmt: skip
    raw = copy.deepcopy(_tiny())
    edit(raw)
    result = cli("check", str(write_config(raw, "config.json")))
    assert result.exit_code == 3
    assert path in result.stderr and words in result.stderr
    assert "Traceback" not in result.stderr


def test_global_widths_are_what_decilmconfig_discards() -> None:
    """DeciLMConfig.__init__ sets intermediate_size and num_key_value_heads to None after LlamaConfig reads them, so
    a value there changes nothing: ignored, the count the same."""
    raw = _tiny()
    written = mapped_config(raw | {"intermediate_size": 1024, "num_key_value_heads": 1})
    assert count_params(written).as_dict() == count_params(mapped_config(raw)).as_dict()


def test_every_key_is_accounted_for(cli: Any) -> None:
    """The report lists the harmless nested keys (sparsify, the switched-off sink / window keys) and the nulled
    globals, and maps the per-layer sizes from block_configs."""
    result = cli("check", str(fixture_path(SUPER)), "--format", "json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)["results"][0]["hf"]
    ignored = {row["key"] for row in report["ignored"]}
    assert {"block_configs[*].attention.sparsify", "block_configs[*].ffn.sparsify",
            "block_configs[*].attention.window_length", "num_key_value_heads", "intermediate_size",
            "auto_map"} <= ignored  # fmt: skip
    mapped = {row["field"]: row["key"] for row in report["mapped"]}
    assert mapped["num_kv_heads"] == mapped["ffn_dim"] == mapped["blocks"] == "block_configs"


@pytest.mark.torch
def test_verify_checkpoint_places_every_decilm_tensor(cli: Any, tmp_path: Any) -> None:
    """A tiny DeciLM checkpoint (the re-implementation's state dict, its names modeling_decilm.py's): every tensor
    lands on a component and every component's count equals the analysis (``self_attn.linear_attn`` and
    ``mlp.linear_mlp`` on the projections, a linear layer's ``input_layernorm`` on mixer/norm); a layer whose
    k_proj has other KV heads than its block config says is refused naming the component."""
    pytest.importorskip("safetensors")
    from safetensors.torch import save_file

    raw = _tiny()
    tensors = {name: t.contiguous() for name, t in _decilm(raw, "cpu").state_dict().items()}
    (tmp_path / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    result = cli("verify", str(tmp_path), "--checkpoint", "--format", "json")
    assert result.exit_code == 0, result.stderr
    check = json.loads(result.stdout)["results"][0]
    assert check["extra"] == [] and check["missing"] == [], check
    rows = {r["key"]: r for r in check["components"]}
    assert (
        rows["decoder/mixer/projection"]["stored_params"]
        == rows["decoder/ffn/projection"]["stored_params"]
        == 256**2
    )
    assert rows["decoder/mixer/norm"]["stored_params"] == 256

    import torch

    tensors["model.layers.3.self_attn.k_proj.weight"] = torch.zeros(64, 256)  # 2 KV heads of 32, not 4
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    bad = cli("verify", str(tmp_path), "--checkpoint")
    assert bad.exit_code == 3 and "decoder/attention/qkv" in bad.stdout + bad.stderr
