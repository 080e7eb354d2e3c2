"""What PyTorch's CUDA caching allocator holds for each weight tensor vLLM creates (pure).

vLLM's "Model loading took" is torch.cuda.max_memory_allocated, which counts allocator blocks, not
tensor bytes. A tensor of 10 MiB or more gets its own segment rounded up to 2 MiB, and the block is
split only when more than 1 MiB would remain (c10/cuda/CUDACachingAllocator.cpp: kMinLargeAlloc,
kRoundLarge, should_split), so a tensor of 231 MiB holds 232. vLLM fuses q/k/v and gate/up into one
tensor each, and each routed-expert stack into two, so the rounding falls on those fused shapes,
per rank: 80 layers of Qwen2.5-72B at TP 4 (down 115.5 MiB, gate/up 231 MiB) hold 0.117 GiB more
than their bytes (0.116 logged), phi-4 at TP 1 0.078 (0.081 logged), Llama-3.1-8B nothing (every
fused tensor an even number of MiB; 0.001 logged). Not with PYTORCH_CUDA_ALLOC_CONF
expandable_segments (blocks then split to 512 bytes), which vLLM does not set.
"""

from __future__ import annotations

from validator.units import cdiv

MiB = 1 << 20
MIN_BLOCK = 512  # every request is rounded to this
SMALL = 1 * MiB  # a large block is split only when more than this remains
MIN_LARGE_ALLOC = 10 * MiB  # from here a request gets its own segment...
ROUND_LARGE = 2 * MiB  # ...rounded up to this


def block_bytes(nbytes: int) -> int:
    """The bytes torch.cuda.memory_allocated counts for one tensor of `nbytes` (a fresh segment)."""
    size = cdiv(max(nbytes, 1), MIN_BLOCK) * MIN_BLOCK
    if size < MIN_LARGE_ALLOC:
        return size  # carved out of a shared 2 or 20 MiB segment, the rest split off
    segment = cdiv(size, ROUND_LARGE) * ROUND_LARGE
    return segment if segment - size <= SMALL else size


def rounding_bytes(tensors: list[int]) -> int:
    """What the allocator holds beyond the bytes of these tensors (one rank's)."""
    return sum(block_bytes(t) - t for t in tensors)
