"""The resolved view of the layer model (DESIGN.md §9, §16) that both implementations read: one block's
:class:`Attention`, :class:`FFN` and recurrent mixer (:class:`~embedcalc.config.mixer_spec.Mixer`) with every default
filled in, the :class:`Block` they make, and a stack's layers as runs of blocks (:class:`StackPlan`), counted in
closed form. :mod:`embedcalc.config.block_spec` holds the specs a config writes and re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass

from embedcalc.config.kinds import AttentionKind, FFNKind, Projected, QKNorm
from embedcalc.config.mixer_plan import Mixer

LATENT_KINDS = frozenset({"mla", "sparse"})  # the kinds built on multi-head latent attention


@dataclass(frozen=True)
class Attention:
    """One block's self-attention, every default resolved."""

    kind: AttentionKind
    num_heads: int
    num_kv_heads: int
    head_dim: int  # standard: per-head width; mla, sparse: qk_nope_head_dim + qk_rope_head_dim
    qkv_bias: bool
    out_bias: bool
    qk_norm: QKNorm
    sinks: bool
    window: int | None
    chunk: int | None
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0  # mla, sparse: per-head value width; standard: its own value width (0: head_dim)
    output_gate: bool = False
    head_gate: bool = False  # a bias-free Linear(d, heads) gating each head's context (Laguna)
    index_heads: int = 0  # sparse: the lightning indexer's heads, head width, and keys kept per query
    index_head_dim: int = 0
    index_topk: int = 0
    index_shared: bool = False  # sparse: reuses the previous layer's selection (no indexer of its own)
    query_scale: bool = (
        False  # mla, sparse: a learned per-head scale of the queries by log position (2 h, 2 H_I)
    )
    index_block_size: int = (
        0  # standard: block-sparse (MiniMax-M3): index_topk blocks of this many keys per query
    )
    own_head_dim: bool = False  # standard: head_dim is the block's own, not the flat (swept) one
    own_kv_heads: bool = False  # standard: num_kv_heads is the block's own, likewise
    own_heads: bool = False  # standard: num_heads is the block's own (Laguna's per-layer heads), likewise
    values_from_keys: bool = (
        False  # standard: no value projection, V is K's projection (Gemma 4 attention_k_eq_v)
    )
    # standard: K and V are not its own (an earlier layer's, or with kv_external another model's): no K/V
    # projections or key norm, no KV cache; every count reads this flag
    kv_shared: bool = False
    kv_external: bool = (
        False  # the K and V come from another model (a drafter's target): no earlier layer to link
    )
    full_cache: bool = False  # the KV cache keeps every token whatever the window (GPT-Neo's local layers)
    context: int = 0  # cross-attention over an external sequence of this many tokens (0: self-attention)
    tanh_gates: bool = False  # tanh-gated attention and FFN outputs, one learned scalar each (Mllama)
    compress_rate: int = (
        0  # compressed (DeepSeek-V4): one pooled entry every this many tokens (0: window only)
    )
    compress_overlap: bool = (
        False  # compressed: overlapping windows (two series per token), the indexer's kind
    )
    out_groups: int = 0  # a grouped low-rank output projection: groups of heads (0: one output projection)
    out_rank: int = 0  # and each group's output width (DeepSeek-V4's o_groups, o_lora_rank)

    @property
    def external(self) -> bool:
        """Cross-attention over an external sequence (the vision tokens of Llama-3.2-Vision): K and V are
        projected from ``context`` tokens that are not the layer's input; every query sees all of them."""
        return self.context > 0

    @property
    def latent(self) -> bool:
        """Multi-head latent attention, dense (mla) or over the indexer's top-k keys (sparse)."""
        return self.kind in LATENT_KINDS

    @property
    def compressed(self) -> bool:
        """DeepSeek-V4's attention: shared-KV MQA (the key is the value) over a window, plus pooled entries."""
        return self.kind == "compressed"

    @property
    def compressed_kv_copies(self) -> int:
        """Copies of a compressed layer's one key/value per token in its cache: transformers' DeepSeek-V4 cache
        layers with a compressor keep the tensor once (``DeepseekV4HCACache.update``: values = keys), a
        sliding-window-only layer's ``DynamicSlidingWindowLayer`` keeps keys and values apart (two copies)."""
        return 1 if self.compress_rate else 2

    @property
    def compressed_indexer(self) -> bool:
        """Whether this compressed layer's lightning indexer keeps the index_topk best pooled entries per query."""
        return self.compressed and self.compress_overlap and self.index_heads > 0

    @property
    def indexer(self) -> bool:
        """Whether this layer runs a lightning indexer of its own (sparse, not sharing the previous selection)."""
        return self.kind == "sparse" and not self.index_shared

    @property
    def block_indexer(self) -> bool:
        """Whether this standard layer is block-sparse: a block indexer selects the key blocks its queries see
        (MiniMax-M3's sparse attention)."""
        return self.index_block_size > 0

    @property
    def index_cache_width(self) -> int:
        """Values the indexer caches per token: one key of index_head_dim (0 without an indexer of its own)."""
        return self.index_head_dim if self.indexer or self.block_indexer else 0

    @property
    def q_dim(self) -> int:
        """Width of all query heads together."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or value) heads of standard attention."""
        return self.num_kv_heads * self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Per-head value width: v_head_dim (latent attention, or standard attention with its own), else
        head_dim."""
        return self.v_head_dim if self.latent or self.v_head_dim else self.head_dim

    @property
    def value_dim(self) -> int:
        """Width of all value heads together: the input of the output projection."""
        return self.num_heads * self.value_head_dim

    @property
    def v_kv_dim(self) -> int:
        """Width of all value heads of standard attention (the value projection's output)."""
        return self.num_kv_heads * self.value_head_dim

    @property
    def kv_cache_width(self) -> int:
        """Values cached per token per layer: K and V of every KV head, or MLA's compressed latent and rope key (and
        a sparse layer's indexer key)."""
        if self.latent:
            return self.kv_lora_rank + self.qk_rope_head_dim + self.index_cache_width
        if self.compressed:  # one key per token that is also its value (the pooled entries are apart)
            return self.head_dim * self.compressed_kv_copies
        return 0 if self.kv_shared else self.kv_dim + self.v_kv_dim + self.index_cache_width

    @property
    def cache_limit(self) -> int | None:
        """The most tokens this layer's KV cache holds per sequence (a window, unless the cache keeps every token,
        or a chunk), else None."""
        limits = [x for x in (None if self.full_cache else self.window, self.chunk) if x is not None]
        return min(limits) if limits else None


@dataclass(frozen=True)
class FFN:
    """One block's feed-forward sublayer, every default resolved."""

    kind: FFNKind
    gated: bool
    bias: bool
    ffn_dim: int  # dense width (0 for moe)
    num_experts: int = 0
    top_k: int = 0
    expert_dim: int = 0
    shared_dim: int = 0  # total inner width of the shared experts (num_shared_experts x shared_expert_dim)
    shared_gate: bool = False
    router_bias: bool = False
    expert_bias: bool = False
    router_scale: bool = False  # Gemma 4: the router's input scale (d) and per-expert scale (E)
    branch_norms: bool = False  # Gemma 4: norms on the shared output, the routed input and output (3 x d)
    latent_dim: int = 0  # Nemotron-3: the routed experts' width in and out (from and back to d); 0: d
    zero_experts: int = 0  # LongCat-Flash: identity experts the router also scores (no parameters, no matmul)
    out_bias: bool | None = (
        None  # a dense FFN's down projection, when it differs from ``bias`` (GTE); None: bias
    )

    @property
    def down_bias(self) -> bool:
        """Whether the dense FFN's output projection has a bias."""
        return self.bias if self.out_bias is None else self.out_bias

    @property
    def moe(self) -> bool:
        return self.kind == "moe"


@dataclass(frozen=True)
class Shared:
    """A layer's use of a shared block (Zamba2's shared transformer; :mod:`embedcalc.config.shared_spec`): the
    block's attention and FFN are the layer's own ``attention`` and ``ffn``, run on its input (concatenated with the
    token embeddings when ``embeddings``) before the recurrent mixer; their weights exist ``copies`` times."""

    copies: int
    embeddings: bool
    adapter_rank: int
    attention_adapters: bool
    ffn_adapters: bool

    def input_width(self, embed_dim: int) -> int:
        """Width of what the shared block reads: embed_dim, doubled by the concatenated embeddings."""
        return 2 * embed_dim if self.embeddings else embed_dim

    def sets(self, layers: int) -> int:
        """The weight sets ``layers`` uses of this block hold (the j-th use runs set j mod copies)."""
        return min(self.copies, layers)


@dataclass(frozen=True)
class Block:
    """One layer: its token mixer (attention, a recurrent ``mixer``, both in parallel, a projection, or neither) and
    its FFN (or a projection, or none); with ``shared``, a recurrent mixer after a shared block whose attention and FFN
    are ``attention`` and ``ffn``.

    ``projections`` names the sublayers replaced by one bias-free embed_dim x embed_dim linear behind their own
    norm (DeciLM's ``replace_with_linear``, NVIDIA's Nemotron NAS models): ``mixer`` in place of the token mixer
    (then ``attention`` and ``mixer`` are None), ``ffn`` in place of the FFN (then ``ffn`` is None)."""

    name: str
    attention: Attention | None
    ffn: FFN | None
    mixer: Mixer | None = None
    projections: tuple[Projected, ...] = ()
    shared: Shared | None = None  # attention and FFN are a shared block run before the mixer (Zamba2)

    @property
    def parallel_mixers(self) -> bool:
        """Whether attention and a recurrent mixer run side by side on one normalised input (Falcon-H1)."""
        return self.attention is not None and self.mixer is not None and self.shared is None

    @property
    def mixer_kind(self) -> str:
        """attention, the recurrent mixer's kind, attention+KIND for the two in parallel, or none."""
        if self.shared is not None and self.mixer is not None:
            return f"shared+{self.mixer.kind}"
        if self.parallel_mixers:
            assert self.mixer is not None
            return f"attention+{self.mixer.kind}"
        if self.attention is not None:
            return "attention"
        if "mixer" in self.projections:
            return "projection"
        return self.mixer.kind if self.mixer is not None else "none"


@dataclass(frozen=True)
class StackPlan:
    """The layers of one stack as runs of a pattern of resolved blocks: ``((pattern, repeat), ...)``.

    Counts are arithmetic over the runs (never a list per layer), so ``num_layers`` of any size costs nothing.
    """

    runs: tuple[tuple[tuple[Block, ...], int], ...]

    @property
    def num_layers(self) -> int:
        return sum(len(pattern) * repeat for pattern, repeat in self.runs)

    def counts(self, start: int = 0, stop: int | None = None) -> list[tuple[Block, int]]:
        """Each distinct block of layers ``start`` to ``stop`` (default: all) with how many layers are it,
        in order of first appearance."""
        stop = self.num_layers if stop is None else stop
        out: dict[Block, int] = {}
        offset = 0
        for pattern, repeat in self.runs:
            size = len(pattern)
            lo, hi = max(start - offset, 0), min(stop - offset, size * repeat)
            if lo < hi:
                for j, block in enumerate(pattern):
                    # layers offset + j + size * k for k in [0, repeat) that fall in [lo, hi)
                    first = max(0, -(-(lo - j) // size))
                    last = (hi - 1 - j) // size
                    if last >= first:
                        out[block] = out.get(block, 0) + last - first + 1
            offset += size * repeat
        return list(out.items())

    def block_at(self, layer: int) -> Block:
        """The block of layer ``layer`` (0-based)."""
        offset = 0
        for pattern, repeat in self.runs:
            if layer < offset + len(pattern) * repeat:
                return pattern[(layer - offset) % len(pattern)]
            offset += len(pattern) * repeat
        raise IndexError(f"layer {layer} is past the stack's {self.num_layers} layers")

    @property
    def blocks(self) -> list[Block]:
        """The distinct blocks of the stack, in order of first appearance."""
        return [block for block, _ in self.counts()]
