"""The block pool replay's prefix-cache lookup (prefixsim.py): a request's hit in the groups it has
(the full groups' leading cached blocks, then a window's or a state's run, or a chunk's), and
whether an eviction may have come after the lookup in truth (the prediction's range)."""

from __future__ import annotations

from typing import Any

from validator.judge.arrivals import SimRequest
from validator.judge.blockpool import BlockPool
from validator.judge.predict import window_hit

STEP_SLACK = 2  # decode steps by which the client's view of a step may be off (same-step order, async scheduling)
BURST_S = 0.005  # tokens read closer than this may be one burst of buffered steps, in any order


class Lookups:
    """What _Replay looks a prompt up with: its pool and groups, set by _Replay."""

    pool: BlockPool
    order: list[SimRequest]
    watch: frozenset[str]
    one_chunk: bool
    fulls: list[int]
    wins: list[int]
    chunks: list[int]
    bf: int
    bw: int
    align: int
    need: int
    chunk: int

    def may_follow(self, r: SimRequest, key: Any) -> bool:
        """Whether the eviction of `key` may have come after r's lookup in truth (see the module's doc)."""
        ev = self.pool.evicted_by.get(key)
        if ev is None or ev[0] < r.sent:
            return False
        lead = r.lead if r.lead is not None else (0.0 if self.one_chunk else None)
        if lead is None:
            return True
        _, j, k = ev  # j's step for token k + 1: certainly earlier if j had token k + 1 + STEP_SLACK before the lookup
        later = self.order[j].token_times
        return not (k + STEP_SLACK < len(later) and later[k + STEP_SLACK] < r.token_times[0] - lead - BURST_S)

    def held(self, key: Any, groups: list[int], r: SimRequest | None = None) -> bool:
        """Whether every group of `groups` has `key` cached (a lookup finds identical groups together);
        with `r`, or may have had it when r was looked up."""
        return all(
            self.pool.cached((g, key)) is not None or (r is not None and self.may_follow(r, (g, key))) for g in groups
        )

    def hit(self, keys: tuple[list[int], list[int]], cap: int, r: SimRequest | None) -> tuple[int, int]:
        """(the hit, the full groups' aligned hit) in tokens: the full groups' leading cached blocks,
        aligned, then the window groups' run within them (SlidingWindowManager.find_longest_cache_hit),
        or the chunk groups' run from the start of the chunk the full hit ends in: the chunks before
        it are not looked at (ChunkedLocalAttentionManager: null blocks)."""
        ksf, ksw = keys
        full = 0
        while full < cap and self.held(ksf[full], self.fulls, r):
            full += 1
        # window groups alone are looked up over the whole prompt (UnitaryKVCacheCoordinator)
        full = (full if self.fulls else cap) * self.bf // self.align * self.align
        if self.chunks:
            j = full // self.chunk * self.chunk // self.bf
            while j < full // self.bf and self.held(ksf[j], self.chunks, r):
                j += 1
            return j * self.bf, full
        if not self.wins:
            return full, full
        step = self.align // self.bw
        run = window_hit(ksw, full // self.bw, self.need, lambda k: self.held(k[1], self.wins, r), step)  # type: ignore[index]
        # alone, no other group's longer hit leaves a junction for the window to pin (num_uncached 0)
        return run * self.bw, full if self.fulls else run * self.bw

    def first_copies(
        self, i: int, rid: str, tokens: int, tail: list[int], ksf: list[int], ksw: list[int]
    ) -> dict[str, frozenset[int]] | None:
        """For a request a freeze caught: the blocks it caches whose key no block held (the copy later hits share)."""
        if rid not in self.watch:
            return None
        p = len(self.order[i].prompt)
        new, dense = p // self.align * self.align // self.bf, self.fulls + self.chunks
        kinds = (("full", dense, range(tokens // self.bf, new), ksf), ("window", self.wins, tail, ksw))
        # only the kinds this layout has: a missing kind is not an empty copy
        return {k: frozenset(j for j in js if self.pool.cached((g[0], ks[j])) is None) for k, g, js, ks in kinds if g}
