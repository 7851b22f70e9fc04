"""Hybrid families with recurrent mixers against transformers (issue 23): the published file and the preset count what
transformers builds on the meta device; the per-layer cache (KV of the attention layers, the Mamba-2 state of the
others) follows transformers' own config object; forward FLOPs on a small eager variant equal ``FlopCounterMode``
on transformers' CPU path less exactly the two terms analysis/mixers.py documents (the inter-chunk state passing
as a matrix product, the convolution's padded tail).
"""

from __future__ import annotations

from typing import Any

import pytest
from hf_reference import forward_flops, hf_config, mapped_config, published, raw_fixture, unaccounted_keys

from embedcalc.analysis.flops import forward_flops as analytic_flops
from embedcalc.analysis.memory import estimate_memory
from embedcalc.analysis.params import count_params
from embedcalc.analysis.workload import Workload
from embedcalc.errors import ConfigError

# fixture -> its row (model_type, transformers' total, active, the preset that transcribes it): this module's group
# of tests/fixtures/published_sizes.yaml; tests/sources/hf/test_published_sizes.py checks the file, the preset and
# transformers against it
PUBLISHED = published("test_mixers_hf")
# layers x (experts - top_k) unused experts x (gate_up 2 x width x hidden + down hidden x width)
# (nvidia/Nemotron-H-8B-Base-8K's file has no MoE block)
UNUSED = {
    "falcon-h1-34b-instruct": 0,
    "granite-4.0-h-small": 40 * 62 * 3 * 768 * 4096,
    "jamba-mini-1.7": 16 * 14 * 3 * 14336 * 4096,
    "nemotron-h-8b-base-8k": 0,
    "qwen3-next-80b-a3b": 48 * 502 * 3 * 512 * 2048,
    "lfm2-1.2b": 0,
    "lfm2-8b-a1b": 22 * 28 * 3 * 1792 * 2048,
    "minimax-m1-80k": 80 * 30 * 3 * 9216 * 6144,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_active_is_the_total_less_the_unused_experts(name: str) -> None:
    assert PUBLISHED[name].active == PUBLISHED[name].total - UNUSED[name]


def _hf_window_and_scan(hf: Any) -> tuple[int, int]:
    """Values of one recurrent layer's state per sequence, read off transformers' config object: the conv window
    (conv_dim x kernel) and the scan's state (Mamba-2: heads x d_head x d_state; DeltaNet: v heads x dk x dv;
    Mamba-1: inner x d_state; lightning: heads x head_dim x head_dim, no window; the short conv: no scan)."""
    if hf.model_type == "jamba":
        inner = hf.mamba_expand * hf.hidden_size
        return inner * hf.mamba_d_conv, inner * hf.mamba_d_state
    if hf.model_type == "qwen3_next":
        key = hf.linear_num_key_heads * hf.linear_key_head_dim
        value = hf.linear_num_value_heads * hf.linear_value_head_dim
        conv = (2 * key + value) * hf.linear_conv_kernel_dim
        return conv, hf.linear_num_value_heads * hf.linear_key_head_dim * hf.linear_value_head_dim
    if hf.model_type in ("lfm2", "lfm2_moe"):  # the short convolution: its window only
        return hf.hidden_size * hf.conv_L_cache, 0
    if hf.model_type == "minimax":  # lightning attention: K ᵀV per head (MiniMaxCache.linear_cache), no conv
        return 0, hf.num_attention_heads * hf.head_dim * hf.head_dim
    if hf.model_type == "falcon_h1":  # FalconH1Mixer: mamba_d_ssm (null: expand x hidden) channels
        inner = hf.mamba_d_ssm or hf.mamba_expand * hf.hidden_size
        conv_dim = inner + 2 * hf.mamba_n_groups * hf.mamba_d_state
        return conv_dim * hf.mamba_d_conv, hf.mamba_n_heads * hf.mamba_d_head * hf.mamba_d_state
    if hf.model_type == "nemotron_h":
        assert hf.mamba_ssm_cache_dtype == "float32"
        inner = hf.mamba_num_heads * hf.mamba_head_dim
        return (inner + 2 * hf.n_groups * hf.ssm_state_size) * hf.conv_kernel, inner * hf.ssm_state_size
    conv_dim = hf.mamba_expand * hf.hidden_size + 2 * hf.mamba_n_groups * hf.mamba_d_state
    return conv_dim * hf.mamba_d_conv, hf.mamba_n_heads * hf.mamba_d_head * hf.mamba_d_state


def _hf_state(hf: Any) -> int:
    return sum(_hf_window_and_scan(hf))


# the families whose scan state transformers' torch path keeps in float32 whatever the model's dtype (the conv
# window in the model's); MiniMax keeps its lightning state in the model's dtype (tests/sources/hf/
# test_ssm_state_dtype.py measures both on transformers' cache)
FP32_SCAN_STATE = {"granitemoehybrid", "falcon_h1", "jamba", "qwen3_next", "nemotron_h"}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_per_layer_cache_follows_transformers_config(transformers: Any, name: str) -> None:
    """Attention layers cache 2 x kv_heads x head_dim per token; recurrent layers hold a state per sequence
    (:func:`_hf_state`), whatever the length (transformers' cache layout); MLP-only and MoE-only blocks neither."""
    hf = hf_config(transformers, raw_fixture(name))
    config = mapped_config(raw_fixture(name))
    # Falcon-H1's "hybrid" layers hold both: attention and Mamba-2 in parallel
    attention = [t in ("full_attention", "hybrid") for t in hf.layer_types]
    recurrent = [t in ("linear_attention", "conv", "hybrid") for t in hf.layer_types]
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    state = _hf_state(hf)
    plan = config.stack_plan("decoder")
    for i, (is_attention, is_recurrent) in enumerate(zip(attention, recurrent, strict=True)):
        block = plan.block_at(i)
        assert (block.attention is not None, block.mixer is not None) == (is_attention, is_recurrent)
        if block.attention is not None:
            assert block.attention.kv_cache_width == 2 * hf.num_key_value_heads * head_dim
        if block.mixer is not None:
            assert block.mixer.state_values == state
    for n in (4096, 262144):
        memory = estimate_memory(config, Workload(batch_size=2, seq_len=n, dtype="bfloat16"))
        assert memory.kv_cache_bytes == 2 * n * sum(attention) * 2 * hf.num_key_value_heads * head_dim * 2
        window, scan = _hf_window_and_scan(hf)
        scan_bytes = 4 if hf.model_type in FP32_SCAN_STATE else 2
        assert memory.recurrent_state_bytes == 2 * sum(recurrent) * (window * 2 + scan * scan_bytes)


# Small eager variants of the Mamba-2 families: transformers' CPU path counts our matmuls plus the two terms
# analysis/mixers.py documents (the inter-chunk state passing as a matrix product, the convolution's padded tail).
# Nemotron-H's has one block of each kind (Mamba-2, MLP, attention, MoE).
STATE_PASSING: dict[str, dict[str, Any]] = {
    "granite-4.0-h-small": dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=32,
        shared_intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, mamba_n_heads=8, mamba_d_head=32,
        mamba_d_state=16, mamba_n_groups=2, mamba_chunk_size=8, vocab_size=512, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, layer_types=["mamba", "attention", "mamba", "mamba"],
    ),
    # Falcon-H1: attention and Mamba-2 in parallel in each of 3 layers, 2 groups, the gated norm, 21 tokens pad a chunk
    "falcon-h1-34b-instruct": dict(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        intermediate_size=96, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=2,
        mamba_chunk_size=8, vocab_size=256,
    ),
    "nemotron-h-8b-base-8k": dict(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_head_dim=16,
        intermediate_size=48, mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2, chunk_size=8,
        vocab_size=256, hybrid_override_pattern="M-M*E-", num_hidden_layers=6, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, moe_shared_expert_intermediate_size=24,
    ),
}  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(STATE_PASSING))
@pytest.mark.parametrize("seq_len", [16, 21])
def test_forward_flops_equal_transformers_torch_path(transformers: Any, name: str, seq_len: int) -> None:
    import torch

    small = raw_fixture(name) | STATE_PASSING[name]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, small), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    b, measured = 2, forward_flops(model.to("cpu"), batch=2, seq_len=seq_len)
    config = mapped_config(small)
    ours = analytic_flops(config, Workload(batch_size=b, seq_len=seq_len)).forward
    assert measured == ours + torch_path_extra(config, b, seq_len)


def torch_path_extra(config: Any, batch: int, seq_len: int) -> int:
    """What transformers' CPU path counts beyond embedcalc's matmuls in a stack of Mamba-1/2 layers (analysis/
    mixers.py): each convolution's padded tail, 2 b conv_dim K (K - 1), and each Mamba-2 layer's inter-chunk state
    passing as a matrix product, 2 b H (c + 1)² P N for c chunks."""
    mixers = [blk.mixer for blk, n in config.stack_plan("decoder").counts() for _ in range(n) if blk.mixer]
    extra = sum(2 * batch * m.conv_dim * m.conv_kernel * (m.conv_kernel - 1) for m in mixers)
    for m in mixers:
        if m.kind == "mamba2":
            chunks = -(-seq_len // m.chunk_size)
            extra += 2 * batch * m.num_heads * (chunks + 1) ** 2 * m.head_dim * m.state_size
    return int(extra)


# Small eager variants whose transformers CPU path counts exactly our matmuls plus the convolution's padded tail:
# Qwen3-Next's gated DeltaNet (its triangular solves count none) and Jamba's Mamba-1 reference scan (the state read
# out by C each token; attention at layer 2 of 4, experts on odd layers), LFM2's short convolution (attention at
# layer 2 of 4) and MiniMax's lightning attention (no conv: a tail of 0; blocks of 8, so 21 tokens end in a part).
CONV_TAIL_ONLY: dict[str, dict[str, Any]] = {
    "qwen3-next-80b-a3b": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=24, num_experts=4,
        num_experts_per_tok=2, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=16, vocab_size=256, bos_token_id=1, eos_token_id=2, max_position_embeddings=512,
    ),
    "jamba-mini-1.7": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
        num_experts=4, attn_layer_period=4, attn_layer_offset=2, mamba_d_state=8, mamba_dt_rank=8, vocab_size=256,
    ),
    "lfm2-1.2b": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        block_multiple_of=16, full_attn_idxs=[2], vocab_size=256,
    ),
    # LFM2-MoE: attention at layer 2 of 4, the first 2 layers dense, then 4 experts of 16, top 2
    "lfm2-8b-a1b": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2, vocab_size=256,
        layer_types=["conv", "conv", "full_attention", "conv"],
    ),
    "minimax-m1-80k": dict(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=48, num_local_experts=4, block_size=8, vocab_size=256,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    ),
}  # fmt: skip


@pytest.mark.torch
@pytest.mark.parametrize(("name", "seq_len"), [("qwen3-next-80b-a3b", 16), ("qwen3-next-80b-a3b", 70),
                                               ("jamba-mini-1.7", 7), ("jamba-mini-1.7", 16), ("lfm2-1.2b", 5),
                                               ("lfm2-1.2b", 16), ("lfm2-8b-a1b", 5), ("lfm2-8b-a1b", 16),
                                               ("minimax-m1-80k", 16),
                                               ("minimax-m1-80k", 21)])  # fmt: skip
def test_flops_equal_transformers_torch_path_plus_the_conv_tail(
    transformers: Any, name: str, seq_len: int
) -> None:
    import torch

    small = raw_fixture(name) | CONV_TAIL_ONLY[name]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        hf_config(transformers, small), attn_implementation="eager", experts_implementation="eager"
    ).eval()
    config = mapped_config(small)
    ours = analytic_flops(config, Workload(batch_size=2, seq_len=seq_len)).forward
    mixers = [blk.mixer for blk, n in config.stack_plan("decoder").counts() for _ in range(n) if blk.mixer]
    assert len(mixers) == 3
    conv_tail = sum(2 * 2 * m.conv_dim * m.conv_kernel * (m.conv_kernel - 1) for m in mixers)
    assert forward_flops(model, batch=2, seq_len=seq_len) == ours + conv_tail


@pytest.mark.torch
@pytest.mark.parametrize(
    "name",
    [
        "nemotron-h-8b-base-8k",
        "jamba-mini-1.7",
        "lfm2-1.2b",
        "lfm2-8b-a1b",
        "minimax-m1-80k",
        "falcon-h1-34b-instruct",
    ],
)
def test_bench_generate_decodes_a_small_hub_file_with_the_analytic_state(
    generate_state: Any, name: str
) -> None:
    """``bench --mode generate`` on a small variant of the hub file (Nemotron-H: Mamba-2-only, MLP-only,
    attention-only and MoE-only blocks, its time_step_limit of [0.0, Infinity] kept): the state tensors hold the
    analytic bytes, and the KV cache of the attention layers too. The context is cut to 4,096 positions: the
    model is built for its whole context (rotary tables of 10,240,000 rows for MiniMax-M1, seconds of sin and cos),
    and neither the state nor a 12-token cache depends on it."""
    pytest.importorskip("torch")
    m = generate_state(
        raw_fixture(name) | {**STATE_PASSING, **CONV_TAIL_ONLY}[name] | {"max_position_embeddings": 4096}
    )
    assert m["recurrent_state_bytes"] > 0 and m["kv_cache_bytes"] > 0


def _minimax(**changes: Any) -> dict[str, Any]:
    small = raw_fixture("minimax-m1-80k") | CONV_TAIL_ONLY["minimax-m1-80k"] | changes
    return {k: v for k, v in small.items() if v is not None or k == "sliding_window"}


@pytest.mark.torch
def test_minimax_default_layout_alternates_as_minimax_config(transformers: Any) -> None:
    """No layer_types: MiniMaxConfig puts full attention on even layers and lightning on odd ones; the count is
    transformers' on the meta device."""
    import torch

    small = _minimax(layer_types=None, num_hidden_layers=5)
    with torch.device("meta"):
        model = transformers.MiniMaxForCausalLM(hf_config(transformers, small))
    config = mapped_config(small)
    plan = config.stack_plan("decoder")
    assert [plan.block_at(i).mixer is not None for i in range(5)] == [False, True, False, True, False]
    assert sum(p.numel() for p in model.parameters()) == count_params(config).total


def test_minimax_remote_attn_type_list_alone_is_refused_with_the_layer_types() -> None:
    """MiniMax's remote code lists the layout as attn_type_list (1 = softmax), which MiniMaxConfig does not read."""
    with pytest.raises(ConfigError) as info:
        mapped_config(_minimax(layer_types=None, attn_type_list=[0, 0, 0, 1]))
    (problem,) = info.value.problems
    assert problem.path == "attn_type_list"
    assert "layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']" in (
        problem.message
    )


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_key_of_the_file_is_mapped_or_ignored_with_a_reason(name: str) -> None:
    assert unaccounted_keys(raw_fixture(name)) == set()


@pytest.mark.parametrize(
    ("change", "key"),
    [({"mamba_d_head": 96}, "mamba_d_head"), ({"mamba_d_ssm": None, "mamba_expand": 0}, "mamba_expand")],
)
def test_a_falcon_h1_file_with_an_impossible_mamba_shape_is_refused_naming_the_key(
    change: dict[str, Any], key: str
) -> None:
    """FalconH1Config refuses mamba_d_head x mamba_n_heads != the inner width; so does embedcalc, naming the key."""
    from embedcalc.sources.hf import map_hf_config

    with pytest.raises(ConfigError) as info:
        map_hf_config(raw_fixture("falcon-h1-34b-instruct") | change, "test")
    assert [p.path for p in info.value.problems] == [key]
    assert info.value.exit_code == 3
