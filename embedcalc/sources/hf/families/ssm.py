"""Attention-free state-space language models: Mamba (MambaForCausalLM; Gu & Dao 2023, "Mamba: Linear-Time Sequence
Modeling with Selective State Spaces", arXiv:2312.00752), Falcon-Mamba (FalconMambaForCausalLM; TII 2024,
arXiv:2410.05355) and Mamba-2 (Mamba2ForCausalLM; Dao & Gu 2024, "Transformers are SSMs", arXiv:2405.21060).
Transformers' ``configuration_mamba.py`` / ``modeling_mamba.py``, ``..._falcon_mamba.py`` and ``..._mamba2.py``.

Every layer is one pre-norm residual block: an RMSNorm of hidden_size and the mixer, nothing else (no attention, no
MLP: the layer model's ``ffn: none`` beside a recurrent mixer, DESIGN.md §16); then a final RMSNorm (``norm_f``) and
the LM head, tied as ``tie_word_embeddings`` says. No positional encoding.

- ``MambaMixer`` (Mamba-1): in_proj d -> 2 x inner (bias ``use_bias``), a depthwise conv of ``conv_kernel`` taps over
  inner channels (bias ``use_conv_bias``), x_proj inner -> dt_rank + 2 x ``state_size`` (no bias), dt_proj
  dt_rank -> inner (biased), A_log (inner x state) and D (inner), out_proj inner -> d (bias ``use_bias``). inner is
  the config's ``intermediate_size``: ``MambaConfig.__post_init__`` sets expand x hidden_size, and a file that
  writes ``intermediate_size`` overrides it (the attribute the base class sets from the file comes after; the
  published Falcon-Mamba-7B writes expand 16 beside intermediate_size 8192, and transformers builds 8192).
  dt_rank is ``time_step_rank`` ("auto": ceil(hidden_size / 16)).
- ``FalconMambaMixer``: the same module plus RMSNorms of dt, B and C **without weights**
  (``FalconMambaWeightlessRMSNorm``): element-wise only, no parameters; its ``mixer_rms_eps`` is their epsilon.
- ``Mamba2Mixer``: in_proj d -> inner + conv_dim + heads (bias ``use_bias``), conv_dim = inner + 2 x ``n_groups`` x
  ``state_size`` (a depthwise conv of ``conv_kernel`` taps, bias ``use_conv_bias``), dt_bias, A_log and D per head,
  a gated RMSNorm over inner in ``n_groups`` groups (gate first, then the norm), out_proj inner -> d (bias
  ``use_bias``), with inner = expand x hidden_size = ``num_heads`` x ``head_dim`` (``Mamba2Config`` refuses the file
  otherwise). Its ``time_step_rank`` sizes nothing (Mamba2Mixer has no dt projection).

The scan's state is kept in float32 by transformers' torch paths (A = -exp(A_log.float()) makes the scan float32,
and the cache keeps what it returns; :data:`~embedcalc.sources.hf.families.hybrid.TORCH_STATE_DTYPE`), the
convolution window in the model's dtype: measured on transformers' cache in tests/sources/hf/test_hf_ssm.py.

No attention: the layer model still wants a head count; the reader sets ``num_heads`` to 1 (the family's value,
noted), which no layer reads, and the head-size advisories stay silent for a model without attention. Nor does any
of these configs declare a context length (no position table, a state of fixed size): ``max_seq_len`` is set to
:data:`NO_CONTEXT_LIMIT` so that no length is refused or warned about (``--set max_seq_len=N`` to state the context
a checkpoint was trained at).
"""

from __future__ import annotations

import math
from typing import Any

from embedcalc.sources.hf import keys as hf_keys
from embedcalc.sources.hf.families.hybrid import TORCH_STATE_DTYPE, positive
from embedcalc.sources.hf.layered import origin
from embedcalc.sources.hf.reader import Family, KeyReader

NO_CONTEXT_LIMIT = 1 << 20
"""max_seq_len of a model whose config declares no context length (module docstring)."""

_TIME_STEP = "initialises the time-step projection's bias (dt); no effect on sizes or FLOPs"
_IGNORED = {
    "hidden_act": "the activation after the convolution (and of the gate); element-wise only",
    "residual_in_fp32": "the residual stream's precision; the same matmuls",
    "rescale_prenorm_residual": "an initialisation scheme; no effect on sizes or FLOPs",
    "time_step_scale": _TIME_STEP,
    "time_step_min": _TIME_STEP,
    "time_step_max": _TIME_STEP,
    "time_step_floor": _TIME_STEP,
    "time_step_init_scheme": _TIME_STEP,
    "time_step_limit": "clamps the Mamba-2 time step; element-wise only (its upper bound may be Infinity)",
    "use_mambapy": "the mamba.py fallback scan in training; the same computation",
    "use_falcon_mambapy": "the mamba.py fallback scan in training; the same computation",
    "use_associative_scan": "a parallel scan under torch.compile; the same computation",
    "mixer_rms_eps": hf_keys.EPSILON + " (Falcon-Mamba's weightless RMSNorms of dt, B and C)",
    # keys of the original state-spaces checkpoints' files, which the transformers classes never read
    "d_model": "an original mamba_ssm key; the transformers class reads hidden_size",
    "n_layer": "an original mamba_ssm key; the transformers class reads num_hidden_layers",
    "d_inner": "an original mamba_ssm key; the transformers class reads intermediate_size (expand x hidden_size)",
    "ssm_cfg": "the original mamba_ssm block settings; the transformers class reads its own keys",
    "rms_norm": "an original mamba_ssm switch; the transformers class always builds RMSNorm",
    "fused_add_norm": "an original mamba_ssm kernel switch; the same computation",
    "pad_vocab_size_multiple": "an original mamba_ssm setting; the transformers class reads vocab_size as it is",
}


def _common(r: KeyReader) -> None:
    """The stack every family here shares: pre-norm RMSNorm blocks of the mixer alone, no positions, an LM head."""
    for name, value in (("architecture", "decoder"), ("norm", "rmsnorm"), ("norm_placement", "pre"),
                        ("embedding_norm", False), ("position", "none"), ("bias", False),
                        ("lm_head", True)):  # fmt: skip
        r.fixed(name, value)
    r.copy("vocab_size", "vocab_size")
    r.copy("hidden_size", "embed_dim")
    r.copy("num_hidden_layers", "num_layers")
    r.copy("tie_word_embeddings", "tie_embeddings")
    r.fixed(
        "num_heads", 1, "no attention in any layer: a placeholder the layer model requires; no layer reads it"
    )
    r.fixed(
        "max_seq_len",
        NO_CONTEXT_LIMIT,
        f"{r.family.config_class} declares no context length (no position "
        "table; a state of fixed size): no length is refused or warned about; --set max_seq_len=N states one",
    )
    r.fixed("ffn", {"kind": "none"}, "every block is the norm and the mixer alone: no MLP")
    for key, reason in _IGNORED.items():
        r.ignore(key, reason)


def _read_mamba(r: KeyReader) -> None:
    _common(r)
    hidden = r.data.get("embed_dim")
    state, conv = positive(r, "state_size"), positive(r, "conv_kernel")
    inner_key, inner = r.lookup("intermediate_size")
    if inner_key in r.raw and inner is not None:
        inner = positive(r, "intermediate_size")
        r.ignore(
            "expand", f"intermediate_size ({inner}) is written: it overrides expand x hidden_size on load"
        )
    else:
        expand = positive(r, "expand")
        inner = expand * hidden if expand is not None and isinstance(hidden, int) else None
        inner_key = "expand"
    rank_key, rank, _ = r.value("time_step_rank")
    if rank == "auto" and isinstance(hidden, int):
        rank = math.ceil(hidden / 16)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        r.problem(
            rank_key, f"{rank_key} = {rank!r} must be a positive integer or 'auto' (ceil(hidden_size / 16))"
        )
        return
    flags = {
        name: bool(r.value(key)[1]) for name, key in (("conv_bias", "use_conv_bias"), ("bias", "use_bias"))
    }
    if state is None or conv is None or inner is None:
        return
    spec = {"kind": "mamba", "state_size": state, "inner_dim": inner, "dt_rank": rank, "conv_kernel": conv,
            **flags, "ssm_state_dtype": TORCH_STATE_DTYPE}  # fmt: skip
    used = ", ".join(k for k in (inner_key, "state_size", "conv_kernel", "time_step_rank", "use_conv_bias",
                                 "use_bias"))  # fmt: skip
    mixer = "FalconMambaMixer (Mamba-1, weightless dt/B/C norms)" if r.family.model_type == "falcon_mamba" else (
        "MambaMixer (Mamba-1)")  # fmt: skip
    r.put("mixer", spec, used, origin(r, used), f"every layer: {mixer}")


def _read_mamba2(r: KeyReader) -> None:
    _common(r)
    r.ignore("time_step_rank", "Mamba2Mixer has no dt projection to give a rank; it never sizes anything")
    hidden = r.data.get("embed_dim")
    sizes = {name: positive(r, key) for name, key in (("num_heads", "num_heads"), ("head_dim", "head_dim"),
             ("state_size", "state_size"), ("groups", "n_groups"), ("conv_kernel", "conv_kernel"),
             ("chunk_size", "chunk_size"))}  # fmt: skip
    expand = positive(r, "expand")
    flags = {
        name: bool(r.value(key)[1]) for name, key in (("conv_bias", "use_conv_bias"), ("bias", "use_bias"))
    }
    r.ignore(
        "intermediate_size", "Mamba2Mixer's inner width is expand x hidden_size; it never reads this key"
    )
    if any(v is None for v in sizes.values()) or expand is None or not isinstance(hidden, int):
        return
    heads, head, groups = sizes["num_heads"], sizes["head_dim"], sizes["groups"]
    assert heads is not None and head is not None and groups is not None
    if heads * head != expand * hidden:
        r.problem("head_dim", f"num_heads ({heads}) x head_dim ({head}) = {heads * head} must equal expand "
                  f"({expand}) x hidden_size ({hidden}) = {expand * hidden} (Mamba2Config refuses the file "
                  "otherwise)")  # fmt: skip
        return
    if heads % groups:
        r.problem("n_groups", f"n_groups ({groups}) must divide num_heads ({heads}): each group's B and C serve "
                  "whole heads")  # fmt: skip
        return
    spec = {"kind": "mamba2", **sizes, **flags, "ssm_state_dtype": TORCH_STATE_DTYPE}
    used = (
        "num_heads, head_dim, expand, state_size, n_groups, conv_kernel, chunk_size, use_conv_bias, use_bias"
    )
    r.put("mixer", spec, used, origin(r, used), "every layer: Mamba2Mixer (SSD, a gated RMSNorm over inner)")


_MAMBA: dict[str, Any] = dict(
    vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=32, expand=2, conv_kernel=4, use_bias=False,
    use_conv_bias=True, time_step_rank="auto", tie_word_embeddings=True,
)  # fmt: skip
_MAMBA2: dict[str, Any] = dict(
    num_heads=128, head_dim=64, vocab_size=32768, hidden_size=4096, state_size=128, num_hidden_layers=64, expand=2,
    conv_kernel=4, n_groups=8, use_bias=False, use_conv_bias=True, chunk_size=256, tie_word_embeddings=False,
)  # fmt: skip
FAMILIES = (
    Family("mamba", "MambaConfig", "MambaForCausalLM (AutoModelForCausalLM)", "jamba-mini-1.7", _MAMBA,
           _read_mamba),
    Family("falcon_mamba", "FalconMambaConfig", "FalconMambaForCausalLM (AutoModelForCausalLM)", "jamba-mini-1.7",
           _MAMBA, _read_mamba),
    Family("mamba2", "Mamba2Config", "Mamba2ForCausalLM (AutoModelForCausalLM)", "granite-4.0-h-small", _MAMBA2,
           _read_mamba2, non_finite=frozenset({"time_step_limit"})),
)  # fmt: skip
