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
token) to its first token, but for the last, which ran in the step that made the first token
(`last_step`). A step budget below the prompt splits it further, a block a step; those
steps are not replayed: each takes a state page that the next frees to the head of the free queue
and takes again (measured exact at 48 tokens a step, block 32: docs/kv-accounting.md). Where vLLM
did not say (a server without --enable-per-request-metrics), the run is replayed with them all just
before the first token and spread from the send, and each request's prediction spans the two.

A chunk starts at a step boundary: the end of the step before it, where each running request got
a token and then decoded again or finished. The scheduler takes its running requests first, in the
order it scheduled them, and a finished request's blocks are freed before the next step: a chunk
whose spread time falls within half a step of such a decode step or finish is put there, after it.
Spread evenly, a chunk can land a fraction of a millisecond before a finish or a decode step it
followed in truth, and the pool's free queue then holds its freed state pages in the wrong order: a
tiny Qwen3-Next's request freed its hit's state pages ahead of another's checkpoint pages (1 request
of 48 wrong in 1 CI run of the trace), a tiny LFM2's freed its hit's ahead of a finishing request's
13 cached blocks (1 of 48, in 1 run of 6), and later prefills evicted the hit instead."""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from dataclasses import replace

from validator.judge.arrivals import Prediction, SimRequest
from validator.judge.layout import HeldGroup


class Prefills:
    """Set by _Replay: its pending chunks, and the step that runs one (`advance`)."""

    prefills: dict[int, list[tuple[float, int, int, frozenset[int]]]]  # per request: (time, start, end, tail)
    due: list[tuple[float, int]]  # (time, request) of every pending chunk: a heap
    own: list[array[float]]  # per request, its events' times: scheduled, each decode step, finished
    blocks: dict[int, list[list[int | None]]]  # the running requests (their blocks)
    order: list[SimRequest]  # the requests in arrival order (their token times)
    budget: int | None  # the step's token budget (max_num_batched_tokens)

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
        last = self.last_step(i, t, first_token, ends[-1] - starts[-1]) if len(ends) > 1 else None
        times = [t]
        for k in range(1, len(ends)):
            times.append(max(self.step_of(i, t + k * span, span / 2), times[-1]))
        if last is not None:  # the earlier chunks stay spread, none after the last
            times = [min(w, last) for w in times[:-1]] + [last]
        self.prefills[i] = [(w, a, e, tail) for w, a, e in zip(times, starts, ends, strict=True)]
        for when, _, _, _ in self.prefills[i][1:]:
            heapq.heappush(self.due, (when, i))
        self.prefill_chunks(i, t)

    def last_step(self, i: int, t: float, first_token: float, size: int) -> float | None:
        """The step of request i's last chunk, counted back from its first token: the step that gave a
        request running before it the token the client had at the same moment (one step's tokens reach
        it together, its steps apart), whose decode step the chunk follows. Spread evenly instead, a
        last chunk of 9 tokens after one of 160 fell 72 ms before the decode step it followed (half a
        step is 52 ms there: a tiny Qwen3-Next on a 2-core host without AVX-512 BF16). None where no
        such token is seen, or where the step's token budget may split the chunk further."""
        if self.budget is not None and size + len(self.blocks) - 1 > self.budget:
            return None
        best: float | None = None
        for j in self.blocks:
            times, steps = self.order[j].token_times, self.own[j]
            if j >= i or len(times) < 2:
                continue
            q = bisect_left(times, first_token)
            for x in (q - 1, q):  # token x + 1, made in j's decode step steps[x] (1 <= x <= its output - 1)
                if not 1 <= x < min(len(times), len(steps) - 1):
                    continue
                gap = min(abs(times[x] - times[y]) for y in (x - 1, x + 1) if 0 <= y < len(times))
                if 2 * abs(times[x] - first_token) < gap and steps[x] > t:
                    best = steps[x] if best is None else max(best, steps[x])
        return best

    def step_of(self, i: int, when: float, within: float) -> float:
        """The step boundary within `within` of `when` among the requests running before request i:
        the latest of their events there (each one's decode step or finish after a token of that
        step), which the chunk then follows; else `when`."""
        best: float | None = None
        for j in self.blocks:
            if j >= i:
                continue
            steps = self.own[j]
            k = bisect_left(steps, when)
            near = [e for e in steps[max(k - 1, 1) : k + 1] if abs(e - when) <= within]  # not its schedule
            if near:
                mine = min(near, key=lambda e: abs(e - when))
                best = mine if best is None else max(best, mine)
        return when if best is None else best

    def run_due(self, before: float, request: int) -> None:
        """Every pending chunk due before the event of `request` at `before`, in time order; at that very
        time (a chunk put in a running request's step), those of requests scheduled before it."""
        while self.due and self.due[0] < (before, request):
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
