"""vLLM's KV-cache capacity, computed as vLLM 0.32 computes it (no vLLM import).

``v1/core/kv_cache_utils.py`` groups layers, sizes one pool block as the
widest group's pages, divides the KV byte budget by it, holds one block back
(the null block), and reports capacity per request at ``max_model_len``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

from validator.errors import InputError, NotModelled
from validator.plan.kv_spec import ChunkedLocalSpec, FullAttentionSpec, KVSpec, MambaSpec, MLASpec, SlidingWindowSpec
from validator.plan.layer_kinds import CHUNKED, FULL, LINEAR, NO_CACHE, SLIDING
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.quant_config import KV_FROM_CHECKPOINT
from validator.units import cdiv

# the --kv-cache-dtype values modelled (their sizes are in DTYPE_BYTES)
KV_CACHE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "int8", "bfloat16", "float16", "half", "float32", "float")


# the first vLLM whose "GPU KV cache size" is int(max_concurrency x max_model_len) (see kv_cache_tokens)
PER_REQUEST_TOKENS_FROM = (0, 20, 1)


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    if kv_cache_dtype == "auto":
        return DTYPE_BYTES[model_dtype]
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise NotModelled(
            f"kv_cache_dtype {kv_cache_dtype!r} (modelled: auto, " + ", ".join(sorted(KV_CACHE_DTYPES)) + ")"
        )
    return DTYPE_BYTES[kv_cache_dtype]


def auto_kv_dtype(given: str, checkpoint: str | None, version: tuple[int, int, int]) -> tuple[str, str | None]:
    """The KV dtype planned for `given` when the checkpoint names one for auto (a ModelOpt
    checkpoint's kv_cache_quant_algo, plan/quant_config.py), with the note saying so."""
    if given != "auto" or not checkpoint:
        return given, None
    asked = f"the checkpoint's quantization_config asks for a {checkpoint} KV cache"
    if version[:2] < KV_FROM_CHECKPOINT:
        return given, f"{asked}, which vLLM before 0.14 ignores for auto: planned in the model's dtype"
    if checkpoint not in KV_CACHE_DTYPES:
        raise NotModelled(
            f"kv_cache_dtype {checkpoint}, which the checkpoint's quantization_config asks for and vLLM takes for "
            "auto; set cache.kv_cache_dtype "
            "(--kv-cache-dtype) to fp8 or the model's dtype to plan that instead"
        )
    return checkpoint, f"{asked}, which vLLM takes for kv_cache_dtype auto: planned in it"


def kv_heads_per_rank(shape: ModelShape, tp: int, kv_heads: int | None = None) -> int:
    """vLLM splits KV heads across ranks, and replicates them when TP > KV heads."""
    if shape.num_attention_heads % tp:
        raise InputError(
            f"tensor_parallel_size: {tp} does not divide num_attention_heads "
            f"({shape.num_attention_heads}); pick a divisor"
        )
    h = kv_heads or shape.num_kv_heads
    if h % tp and tp % h:
        raise InputError(f"tensor_parallel_size: {tp} and num_key_value_heads ({h}) must divide one another")
    return max(1, h // tp)


# the smallest kernel block of the attention backend vLLM 0.32 picks: CPU attention MultipleOf(32),
# FlashAttention (the GPU default) MultipleOf(16)
KERNEL_BLOCK = {"cpu": 32, "gpu": 16}


@dataclass(frozen=True)
class StateSetup:
    """How vLLM stores per-request state for a model with LINEAR layers."""

    platform: str = "cpu"
    prefix_caching: bool = True  # vLLM's "align" mode keeps block-boundary states
    ssm_dtype: str = "auto"  # --mamba-ssm-cache-dtype as resolved (auto: the model's dtype)
    spec_tokens: int = 0  # --speculative-config num_speculative_tokens: more conv rows and state pages


def hybrid_block_size(attn_bytes_per_token: int, state_bytes: int, block_size: int, platform: str) -> int:
    """vLLM's Platform.update_block_size_for_backend: the smallest attention block, a multiple of
    the kernel block, whose page holds one layer's state (the state is then padded to it)."""
    align = max(KERNEL_BLOCK[platform], block_size)
    need = align * cdiv(state_bytes, align * attn_bytes_per_token)
    return max(block_size, need)


def _state_specs(
    shape: ModelShape, block_size: int, kv_bytes: int, tp: int, setup: StateSetup
) -> tuple[int, MambaSpec]:
    """The attention block size and the state layers' spec (one rank)."""
    assert shape.state is not None
    conv = DTYPE_BYTES[shape.dtype]  # --mamba-cache-dtype auto: the model's dtype
    ssm = setup.ssm_dtype if setup.ssm_dtype != "auto" else (shape.ssm_dtype or shape.dtype)
    state = shape.state.bytes(tp, conv, DTYPE_BYTES[ssm], setup.spec_tokens)
    if not {FULL, SLIDING, CHUNKED} & set(shape.layer_kinds):
        # attention-free (Mamba): prefix caching off, one state per request, mamba_block_size =
        # max_model_len (block_size 0 here: the plan reports max_model_len)
        return 0, MambaSpec(
            block_size=0,
            state_bytes=state,
            page_bytes=state,
            blocks_held=1 + setup.spec_tokens,
            speculative_blocks=setup.spec_tokens,
        )
    per_token = 2 * kv_heads_per_rank(shape, tp) * shape.head_dim * kv_bytes
    block = hybrid_block_size(per_token, state, block_size, setup.platform)
    # MambaSpec.max_memory_usage_bytes: the running state (and in align mode the last block-boundary
    # one and a prefill checkpoint), plus one page a draft token (num_speculative_blocks)
    held = (2 + shape.state.prefill_checkpoint_blocks if setup.prefix_caching else 1) + setup.spec_tokens
    return block, MambaSpec(
        block_size=block,
        state_bytes=state,
        page_bytes=block * per_token,
        blocks_held=held,
        align=setup.prefix_caching,
        speculative_blocks=setup.spec_tokens,
    )


def layer_specs(
    shape: ModelShape, block_size: int, kv_cache_dtype: str = "auto", tp: int = 1, setup: StateSetup | None = None
) -> list[KVSpec]:
    """One spec per decoder layer that holds KV or state, as one rank sees it."""
    if shape.kv_shared_layers:
        raise NotModelled("cross-layer KV sharing (num_kv_shared_layers)")
    b = kv_dtype_bytes(kv_cache_dtype, shape.dtype)
    specs: list[KVSpec] = []
    state_spec = None
    if LINEAR in shape.layer_kinds and shape.state is not None and shape.mla is None:
        block_size, state_spec = _state_specs(shape, block_size, b, tp, setup or StateSetup())
    for i, kind in enumerate(shape.layer_kinds):
        if kind == NO_CACHE:
            continue
        if kind == LINEAR and state_spec is not None:
            specs.append(state_spec)
            continue
        if kind not in (FULL, SLIDING, CHUNKED):
            raise NotModelled(
                f"{kind} layers ({shape.architecture}: a per-request state kvgate has no shape for); "
                "read the capacity from vLLM's start-up log"
            )
        if shape.mla is not None:
            if kind != FULL:
                raise NotModelled(f"{kind} MLA layers")
            specs.append(MLASpec(block_size=block_size, latent_size=shape.mla.latent_dim, dtype_bytes=b))
            continue
        head, kv = shape.layer_heads[i] if shape.layer_heads else (shape.head_dim, shape.num_kv_heads)
        attn = dict(block_size=block_size, num_kv_heads=kv_heads_per_rank(shape, tp, kv), head_size=head)
        if kind == SLIDING:
            assert shape.sliding_window is not None  # model_shape refuses sliding layers without a window
            specs.append(SlidingWindowSpec(**attn, dtype_bytes=b, sliding_window=shape.sliding_window))
        elif kind == CHUNKED:
            assert shape.attention_chunk_size is not None  # model_shape makes chunked layers full without one
            specs.append(ChunkedLocalSpec(**attn, dtype_bytes=b, attention_chunk_size=shape.attention_chunk_size))
        else:
            specs.append(FullAttentionSpec(**attn, dtype_bytes=b))
    return specs


@dataclass(frozen=True)
class KVGroup:
    spec: KVSpec
    num_layers: int


def unify_page_sizes(specs: list[KVSpec]) -> list[KVSpec]:
    """vLLM's unify_kv_cache_spec_page_size: where attention layers' pages differ in size (Gemma 4's
    full layers beside its sliding ones), the smaller pages' block size is raised until each page is
    as large as the largest (recorded: a tiny Gemma 4's sliding groups at 256 tokens a block beside
    its full group at 128). Pages that do not divide the largest, or beside state or MLA layers, vLLM
    pads or packs otherwise: refused."""
    pages = {s.page_size_bytes for s in specs}
    if len(pages) == 1:
        return specs
    largest = max(pages)
    if any(isinstance(s, (MambaSpec, MLASpec)) for s in specs) or any(largest % p for p in pages):
        raise NotModelled("layers with different page sizes beside state or MLA layers, or not dividing the largest")
    return [
        s if s.page_size_bytes == largest else replace(s, block_size=s.block_size * largest // s.page_size_bytes)
        for s in specs
    ]


def group_layers(specs: list[KVSpec]) -> tuple[KVGroup, ...]:
    """vLLM's KV cache groups: one for uniform models; for hybrids, each kind
    split into groups of equal layer count (the "1" of an n:1 pattern, or the
    larger count when the two are within 1.5x)."""
    counts = Counter(unify_page_sizes(specs))  # frozen dataclasses: equal specs merge
    if len(counts) == 1:
        spec, n = next(iter(counts.items()))
        return (KVGroup(spec, n),)
    sizes = list(counts.values())
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups = []
    for spec, n in counts.items():
        num_groups = cdiv(n, group_size)
        for i in range(num_groups):
            groups.append(KVGroup(spec, len(range(i, n, num_groups))))
    return tuple(groups)


@dataclass(frozen=True)
class KVLayout:
    """The model's KV cache as vLLM lays it out on one rank."""

    groups: tuple[KVGroup, ...]
    max_concurrent_batches: int = 1  # 2 with async scheduling (the GPU default), 1 on CPU

    @classmethod
    def from_specs(cls, specs: list[KVSpec], max_concurrent_batches: int = 1) -> KVLayout:
        if not specs:
            raise NotModelled("a model without attention layers")
        return cls(group_layers(specs), max_concurrent_batches)

    @property
    def block_size(self) -> int:
        """The block the launch asks for: the groups' smallest (the others' were raised to match pages)."""
        return min(g.spec.block_size for g in self.groups)

    @cached_property
    def bytes_per_block(self) -> int:
        """One pool block: the widest group's pages side by side (vLLM's divisor)."""
        return max(g.num_layers * g.spec.page_size_bytes for g in self.groups)

    @property
    def kv_bytes_per_token(self) -> int:
        """c_KV: bytes one position adds across all layers while it is held."""
        return sum(g.num_layers * g.spec.bytes_per_token for g in self.groups)

    def num_blocks(self, kv_bytes: int, override: int | None = None) -> int:
        if override is not None:
            return override
        return max(kv_bytes // self.bytes_per_block, 0)

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int) -> int:
        in_flight = self.max_concurrent_batches * max_num_batched_tokens
        return sum(g.spec.blocks_per_request(max_model_len, in_flight) for g in self.groups)

    def decode_peak(self, tokens: int) -> int:
        """The most blocks one request holds as it decodes up to KV for `tokens` positions: every block
        in a full group, from its window or chunk on in one that gives blocks back. Past a window or a
        chunk those repeat every `period` tokens while the full groups only grow, so the largest is
        within the last periods' least common multiple and a window back."""
        periods = [g.spec.period for g in self.groups if g.spec.period]
        windows = [g.spec.sliding_window for g in self.groups if isinstance(g.spec, SlidingWindowSpec)]
        reach = math.lcm(*periods) + max(windows, default=0) if periods else 0
        span = range(max(1, tokens - reach), tokens + 1) if reach else range(tokens, tokens + 1)
        return max(sum(g.spec.held_blocks(t) for g in self.groups) for t in span)

    def max_concurrency(self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int) -> float:
        """vLLM's figure: all blocks (null block included) over blocks per request."""
        return num_blocks / self.blocks_per_request(max_model_len, max_num_batched_tokens)

    def kv_cache_tokens(
        self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int, per_group: bool = False
    ) -> int:
        """vLLM's "KV cache size: N tokens" = int(max_concurrency * max_model_len); before vLLM 0.20.1
        (per_group) the blocks split evenly among the groups: num_blocks // groups * block size (the
        0.19 start-ups of Gemma 2 and 3, 2 to 7 groups, to the token; vLLM issue #43308 saw Gemma 4's
        figure grow tenfold from 0.20.0 to 0.21.0 on the same memory, and a 0.20.1 start-up of
        Qwen3.6-27B, club-3090#91, logs the per-request figure: 619,479 tokens, not 168,000)."""
        if per_group:
            return num_blocks // len(self.groups) * min(g.spec.block_size for g in self.groups)
        return int(self.max_concurrency(num_blocks, max_model_len, max_num_batched_tokens) * max_model_len)

    def largest_model_len(self, usable_blocks: int, upper: int, max_num_batched_tokens: int, num_seqs: int = 1) -> int:
        """Largest length in [1, upper] whose num_seqs requests fit in usable blocks (0 if none).

        With num_seqs=1 this is vLLM's "estimated maximum model length".
        """

        def fits(n: int) -> bool:
            return num_seqs * self.blocks_per_request(n, max_num_batched_tokens) <= usable_blocks

        if upper < 1 or not fits(1):
            return 0
        lo, hi, best = 1, upper, 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if fits(mid):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best

    def payload_bytes(self, tokens: int) -> int:
        """Bytes actually written for one request of `tokens` positions (no rounding)."""
        total = 0
        for g in self.groups:
            held = tokens
            if isinstance(g.spec, MambaSpec):  # one state per request, whatever its length
                total += g.num_layers * g.spec.state_bytes
                continue
            if isinstance(g.spec, SlidingWindowSpec):
                held = min(tokens, g.spec.sliding_window)
            elif isinstance(g.spec, ChunkedLocalSpec) and tokens:  # the positions of the current chunk
                held = (tokens - 1) % g.spec.attention_chunk_size + 1
            total += g.num_layers * g.spec.bytes_per_token * held
        return total
