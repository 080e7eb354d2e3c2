"""Predictions from what the client sent and saw (pure): KV blocks in use over time and
prefix-cache hits, following vLLM 0.32's block accounting.

- A request that has received k >= 1 tokens holds prompt + k - 1 positions (the last
  sampled token has no KV yet): ceil((P + k - 1) / block) blocks.
- Full blocks with identical content up to their end are one block (prefix caching), so
  shared prefixes are counted once while in use.
- A prompt hits the cache for its leading full blocks that are cached, at most
  floor((len - 1) / block) blocks: vLLM recomputes at least the last prompt token.
  Requests scheduled in the same step share the first one's blocks (measured on 0.32).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass

from validator.units import cdiv


def block_keys(tokens: list[int], block_size: int, n_blocks: int | None = None) -> list[int]:
    """Chained hashes of the full blocks of `tokens` (a block's key covers everything before it)."""
    keys, h = [], 0
    full = len(tokens) // block_size if n_blocks is None else min(n_blocks, len(tokens) // block_size)
    for b in range(full):
        h = hash((h, tuple(tokens[b * block_size : (b + 1) * block_size])))
        keys.append(h)
    return keys


class PrefixCacheModel:
    """Which full blocks vLLM has cached: an LRU of block keys bounded by the usable blocks."""

    def __init__(self, block_size: int, capacity_blocks: int):
        self.bs = block_size
        self.capacity = max(capacity_blocks, 1)
        self.cached: OrderedDict[int, None] = OrderedDict()

    def reset(self) -> None:
        self.cached.clear()

    def request(self, prompt: list[int], output: list[int] | None = None) -> int:
        """Hit tokens for this prompt; then its full blocks (prompt + known output) are cached."""
        keys = block_keys(prompt, self.bs)
        cap = (len(prompt) - 1) // self.bs
        hits = 0
        for k in keys[:cap]:
            if k not in self.cached:
                break
            self.cached.move_to_end(k)
            hits += 1
        # positions with KV at the end: prompt + output - 1
        seq = prompt + (output or [])
        for k in block_keys(seq, self.bs, n_blocks=(len(seq) - 1) // self.bs if output else None):
            self.cached[k] = None
            self.cached.move_to_end(k)
        while len(self.cached) > self.capacity:
            self.cached.popitem(last=False)
        return hits * self.bs


@dataclass
class Held:
    """One request as the KV timeline needs it (times in seconds from the run's start)."""

    sent: float
    chunk_times: list[float]  # absolute (from the run's start)
    prompt_tokens: int
    shared_keys: tuple[int, ...] = ()  # keys of its leading full blocks (shared when equal)

    def blocks_at(self, t: float, block_size: int) -> tuple[int, int]:
        """(own blocks, shared full blocks) held at time t; (0, 0) before the first token or
        after the last."""
        if not self.chunk_times or t < self.chunk_times[0] or t > self.chunk_times[-1]:
            return 0, 0
        k = bisect.bisect_right(self.chunk_times, t)
        return cdiv(self.prompt_tokens + k - 1, block_size), len(self.shared_keys)


def kv_blocks_at(held: list[Held], t: float, block_size: int) -> int:
    """Blocks in use at t, identical leading full blocks counted once."""
    total = 0
    seen: set[int] = set()
    for h in held:
        own, n_shared = h.blocks_at(t, block_size)
        if not own:
            continue
        new = [k for k in h.shared_keys[:n_shared] if k not in seen]
        seen.update(new)
        total += own - (n_shared - len(new))
    return total


def final_peak(held: list[Held], block_size: int, max_running: int | None = None) -> int:
    """Upper bound on blocks in use: at each request start, the requests the client still
    sees in flight, each at its full final length, shared blocks once, at most
    `max_running` of them (the server runs no more than max_num_seqs). The server may be
    ahead of what the client has seen, never past this."""

    def full(h: Held) -> int:
        return cdiv(h.prompt_tokens + len(h.chunk_times) - 1, block_size)

    done = [h for h in held if h.chunk_times]
    best = 0
    for h in done:
        active = [g for g in done if g.sent <= h.sent <= g.chunk_times[-1]]
        active.sort(key=full, reverse=True)
        if max_running:
            active = active[:max_running]
        seen: set[int] = set()
        total = 0
        for g in active:
            new = [k for k in g.shared_keys if k not in seen]
            seen.update(new)
            total += full(g) - (len(g.shared_keys) - len(new))
        best = max(best, total)
    return best
