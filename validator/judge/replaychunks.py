"""The block pool replay's prefill chunks beside align-mode state (prefixsim.py; Qwen3-Next, LFM2).

vLLM 0.32 computes such a prompt a checkpoint a step (Scheduler._mamba_block_aligned_split): a chunk
ends at each position whose state it caches (the block boundary before the prompt's last token, and
the junction of a prefix the attention groups had cached without its state), the last one at the
prompt's end. Each step first frees the state pages behind the chunk (remove_skipped_blocks), then
takes one page a state group for the chunk's end and the attention blocks up to it. So a hit's state
pages go back to the free queue during the prefill, before the other requests of its step have taken
their last chunk's pages and their first decode step's: a nearly full pool evicts them there (a tiny
Qwen3-Next at 45-53 blocks: the first request of every wave of 4 missed the primed prefix, which
the prompt taken whole at its first token kept). The client sees none of these steps: they are
spread evenly from vLLM's scheduling of the request (its per-request TTFT back from the first
token) to its first token. Where vLLM did not say (a server without --enable-per-request-metrics),
the run is replayed with them all just before the first token and spread from the send, and each
request's prediction spans the two."""

from __future__ import annotations

import heapq
from dataclasses import replace

from validator.judge.arrivals import Prediction, SimRequest
from validator.judge.layout import HeldGroup


class Prefills:
    """Set by _Replay: its pending chunks, and the step that runs one (`advance`)."""

    prefills: dict[int, list[tuple[float, int, int, frozenset[int]]]]  # per request: (time, start, end, tail)
    due: list[tuple[float, int]]  # (time, request) of every pending chunk: a heap

    def advance(
        self, i: int, start: int, n: int, t: float, k: int | None = None, tail: frozenset[int] = frozenset()
    ) -> None:
        raise NotImplementedError

    def plan_prefill(
        self, i: int, t: float, first_token: float, tokens: int, ends: list[int], tail: frozenset[int]
    ) -> None:
        """Request i, looked up at t with `tokens` hit, computes up to each of `ends` (the last: the
        prompt), a step each, the first now and the others spread until its first token."""
        span = max(first_token - t, 0.0) / len(ends)
        starts = [tokens, *ends[:-1]]
        self.prefills[i] = [(t + k * span, a, e, tail) for k, (a, e) in enumerate(zip(starts, ends, strict=True))]
        for when, _, _, _ in self.prefills[i][1:]:
            heapq.heappush(self.due, (when, i))
        self.prefill_chunks(i, t)

    def run_due(self, before: float) -> None:
        """Every pending chunk due before `before`, in time order."""
        while self.due and self.due[0][0] < before:
            when, i = heapq.heappop(self.due)
            self.prefill_chunks(i, when)

    def prefill_chunks(self, i: int, until: float) -> None:
        """Request i's chunks due by `until` (all of them before it decodes or finishes)."""
        left = self.prefills.get(i, [])
        while left and left[0][0] <= until:
            t, start, end, tail = left.pop(0)
            self.advance(i, start, end, t, tail=tail)
        if not left:
            self.prefills.pop(i, None)


def from_send(reqs: list[SimRequest], groups: tuple[HeldGroup, ...]) -> list[SimRequest] | None:
    """Beside align-mode state, where vLLM did not say when some request was scheduled: the
    requests with those scheduled at their send (the earliest they can be); else None."""
    if not any(g.state for g in groups) or all(r.lead is not None for r in reqs):
        return None
    return [r if r.lead is not None else replace(r, lead=r.token_times[0] - r.sent) for r in reqs if r.token_times]


def spanning(late: dict[str, Prediction], early: dict[str, Prediction]) -> dict[str, Prediction]:
    """Each request's prediction over both replays: from the lower hit to the higher."""
    out = {}
    for rid, a in late.items():
        b = early.get(rid, a)
        out[rid] = replace(a, hits=min(a.hits, b.hits), upper=max(a.upper, b.upper))
    return out
