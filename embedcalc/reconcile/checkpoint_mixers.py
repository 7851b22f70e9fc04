"""The shapes a recurrent mixer's checkpoint tensors must have, from the block's resolved mixer
(:class:`~embedcalc.config.mixer_plan.Mixer`): ``verify --checkpoint`` checks them tensor by tensor, as it checks
q/k/v/o and a dense MLP (:mod:`embedcalc.reconcile.checkpoint_shapes`), so a tensor that disagrees with the config
is named even where its component's total happens to agree (a reshaped or transposed tensor).

A tensor is named by its path inside the layer (``mamba.in_proj.weight``, ``linear_attn.A_log``,
``conv.conv.weight``): the mixer module (:data:`~embedcalc.reconcile.checkpoint_names._MIXER_MODULES`), then the
part and the parameter, or the parameter alone. The widths are the mixer's own (``in_width``, ``conv_dim``,
``inner``, ``num_heads``: :mod:`embedcalc.config.mixer_spec`); the layout of each kind's tensors is transformers':

- mamba2 (``GraniteMoeHybridMambaLayer``, ``NemotronHMamba2Mixer``, ``FalconH1Mixer``): ``in_proj`` (in_width, d),
  ``conv1d`` (conv_dim, 1, K), ``A_log`` / ``D`` / ``dt_bias`` (H,), ``norm`` (inner,);
- mamba (``JambaMambaMixer``): ``in_proj`` (2 I, d), ``conv1d`` (I, 1, K), ``x_proj`` (R + 2 N, I), ``dt_proj``
  (I, R) and its bias (I,), ``A_log`` (I, N), ``D`` (I,), ``dt/b/c_layernorm`` (R,), (N,), (N,);
- gated_deltanet (``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` (2 key_dim + 2 inner, d), ``in_proj_ba`` (2 H, d)
  (``Qwen3_5GatedDeltaNet``: unfused, ``in_proj_qkv`` (2 key_dim + inner, d), ``in_proj_z`` (inner, d),
  ``in_proj_b`` and ``in_proj_a`` (H, d)),
  ``conv1d`` (conv_dim, 1, K), ``A_log`` / ``dt_bias`` (H,), ``norm`` (head_dim,);
- short_conv (``Lfm2ShortConv``): ``in_proj`` (3 I, d), ``conv`` (I, 1, K);
- lightning (``MiniMaxLightningAttention``): ``qkv_proj`` (3 inner, d), ``output_gate`` (inner, d), ``norm``
  (inner,);
- kda (``KimiLinearDeltaAttention``, the checkpoint's names): ``q_proj`` / ``k_proj`` / ``v_proj`` (inner, d),
  ``b_proj`` (H, d), ``q_conv1d`` / ``k_conv1d`` / ``v_conv1d`` (inner, 1, K), ``f_a_proj`` / ``g_a_proj`` (h, d),
  ``f_b_proj`` / ``g_b_proj`` (inner, h), ``A_log`` (1, 1, H, 1), ``dt_bias`` (inner,), ``o_norm`` (h,), ``o_proj``
  (d, inner);

and for every kind ``out_proj`` (d, inner); a bias has the weight's first dimension.
"""

from __future__ import annotations

from embedcalc.config.mixer_plan import Mixer

Shape = tuple[tuple[int, ...], str]


def _projections(m: Mixer, d: int) -> dict[str, Shape]:
    """part -> (weight shape, why) of the mixer's linear layers and its convolution."""
    k = m.conv_kernel
    out: dict[str, Shape] = {"out_proj": ((d, m.inner), "hidden, inner")}
    if m.kda:
        qkv: Shape = ((m.inner, d), "num_heads x head_dim, hidden")
        low: Shape = ((m.head_dim, d), "head_dim, hidden")
        up: Shape = ((m.inner, m.head_dim), "num_heads x head_dim, head_dim")
        window: Shape = ((m.inner, 1, m.conv_kernel), "num_heads x head_dim, 1, conv_kernel")
        return {"q_proj": qkv, "k_proj": qkv, "v_proj": qkv, "b_proj": ((m.num_heads, d), "num_heads, hidden"),
                "f_a_proj": low, "g_a_proj": low, "f_b_proj": up, "g_b_proj": up, "q_conv1d": window,
                "k_conv1d": window, "v_conv1d": window,
                "o_proj": ((d, m.inner), "hidden, num_heads x head_dim")}  # fmt: skip
    if m.lightning:
        return out | {"qkv_proj": ((3 * m.inner, d), "3 x num_heads x head_dim, hidden"),
                      "output_gate": ((m.inner, d), "num_heads x head_dim, hidden")}  # fmt: skip
    if m.deltanet:
        out |= {"in_proj_qkvz": ((2 * m.key_dim + 2 * m.inner, d),
                                 "2 x num_k_heads x head_k_dim + 2 x num_heads x head_dim, hidden"),
                "in_proj_ba": ((2 * m.num_heads, d), "2 x num_heads, hidden"),
                # Qwen3.5's (Qwen3_5GatedDeltaNet) the same projections unfused: q, k, v; z; b; a
                "in_proj_qkv": ((2 * m.key_dim + m.inner, d),
                                "2 x num_k_heads x head_k_dim + num_heads x head_dim, hidden"),
                "in_proj_z": ((m.inner, d), "num_heads x head_dim, hidden"),
                "in_proj_b": ((m.num_heads, d), "num_heads, hidden"),
                "in_proj_a": ((m.num_heads, d), "num_heads, hidden")}  # fmt: skip
    elif m.short_conv:
        out["in_proj"] = ((m.in_width, d), "3 x inner_dim, hidden")
    elif m.mamba1:
        out |= {"in_proj": ((m.in_width, d), "2 x inner_dim, hidden"),
                "x_proj": ((m.dt_rank + 2 * m.state_size, m.inner), "dt_rank + 2 x state_size, inner_dim"),
                "dt_proj": ((m.inner, m.dt_rank), "inner_dim, dt_rank")}  # fmt: skip
    else:
        out["in_proj"] = ((m.in_width, d), "inner + conv_dim + num_heads, hidden")
    conv = "conv" if m.short_conv else "conv1d"
    return out | {conv: ((m.conv_dim, 1, k), "conv_dim, 1, conv_kernel")}


def _vectors(m: Mixer) -> dict[str, Shape]:
    """name -> (shape, why) of the mixer's own parameters and its norms' weights."""
    if m.lightning:
        return {"norm": ((m.inner,), "num_heads x head_dim")}
    if m.kda:  # A_log as KimiLinearForgetGate holds it, (1, 1, H, 1)
        return {"A_log": ((1, 1, m.num_heads, 1), "1, 1, num_heads, 1"),
                "dt_bias": ((m.inner,), "num_heads x head_dim"),
                "o_norm": ((m.head_dim,), "head_dim (one norm the heads share)")}  # fmt: skip
    if m.short_conv:
        return {}
    if m.mamba1:
        return {"A_log": ((m.inner, m.state_size), "inner_dim, state_size"), "D": ((m.inner,), "inner_dim"),
                "dt_layernorm": ((m.dt_rank,), "dt_rank"), "b_layernorm": ((m.state_size,), "state_size"),
                "c_layernorm": ((m.state_size,), "state_size")}  # fmt: skip
    heads: Shape = ((m.num_heads,), "num_heads")
    out: dict[str, Shape] = {"A_log": heads, "dt_bias": heads} | ({} if m.deltanet else {"D": heads})
    if m.deltanet:
        return out | {"norm": ((m.head_dim,), "head_dim (one norm the heads share)")}
    return out | ({"norm": ((m.inner,), "num_heads x head_dim")} if m.gate_norm else {})


def mixer_tensor_shape(m: Mixer, d: int, inside: list[str], param: str) -> Shape | None:
    """The shape the config gives the mixer tensor at ``inside`` (the module path within the layer, from the mixer
    module on) with parameter ``param``, and why; None for a tensor no rule here names."""
    if len(inside) == 1:  # the mixer module's own parameters: A_log, D, dt_bias
        return _vectors(m).get(param)
    if len(inside) != 2:
        return None
    part = inside[1]
    projections = _projections(m, d)
    if part in projections:
        shape, why = projections[part]
        if param == "weight":
            return shape, why
        return ((shape[0],), why.split(",")[0]) if param == "bias" else None
    vector = _vectors(m).get(part)
    return vector if vector is not None and param == "weight" else None
