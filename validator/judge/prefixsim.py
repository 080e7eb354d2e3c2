"""vLLM 0.32's block pool replayed from what the client saw (pure): which prefix-cache hit each
request of a run must get, request by request, eviction included.

What is followed (vllm/v1/core/block_pool.py, kv_cache_manager.py, single_type_kv_cache_manager.py):

- a request is looked up once, when it is first scheduled, in arrival order (FCFS): its leading
  full prompt blocks that are cached, at most floor((P - 1) / block) of them (the last prompt token
  is always computed). Hit blocks leave the free queue while in use;
- it then takes cdiv(P, block) - hits blocks from the head of the free queue (a cached block taken
  there is evicted), and its full prompt blocks are cached at once, so a request scheduled later in
  the same step already hits them;
- while decoding it takes one block whenever its positions cross a block boundary, and each block
  that fills is cached (generated content: never matched by a prompt here);
- when it finishes its blocks are freed last to first: cached ones go to the tail of the free
  queue (least recently used first out), uncached ones to its head (reused first).

The client's clock orders these events: a request is scheduled just before its first token arrives
(the latest it can be), a decode step's block just after the previous token, a finish just before
the last token. Requests sent before an earlier one had its first token may have reached the engine
in either order: within such a group the one the server gave fewer hits is taken to be first (the
server's order is the only unknown; the hits each order implies are still exact). A hit the server
could have had if its lookup came earlier than assumed (a block evicted between the request's send
and its first token) widens that request's prediction to a range instead of guessing.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from validator.judge.predict import block_keys
from validator.units import cdiv


@dataclass(frozen=True)
class SimRequest:
    id: str
    prompt: list[int]  # token ids as the server computed them
    output: int  # tokens generated
    sent: float  # seconds from the run's start
    token_times: tuple[float, ...]  # when the client had token 1, 2, ..., output (same clock)
    observed: int | None = None  # usage.prompt_tokens_details.cached_tokens


@dataclass(frozen=True)
class Prediction:
    id: str
    hits: int  # predicted cached tokens
    upper: int  # >= hits: the hit the request could also have had if scheduled earlier
    prompt_tokens: int
    order: int  # its place in the arrival order the judge assumed

    @property
    def exact(self) -> bool:
        return self.hits == self.upper

    def admits(self, observed: int) -> bool:
        return self.hits <= observed <= self.upper and observed % 1 == 0


class Overflow(RuntimeError):
    """The pool ran out: vLLM would have preempted or kept a request waiting, which the client cannot see."""


class BlockPool:
    """The usable blocks, the free queue (head: reused first) and the cached hashes."""

    def __init__(self, usable: int):
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, usable + 1))
        self.key_of: dict[int, Any] = {}
        self.blocks_of: dict[Any, set[int]] = {}
        self.ref: dict[int, int] = {}
        self.evicted_at: dict[Any, float] = {}

    def cached(self, key: Any) -> int | None:
        held = self.blocks_of.get(key)
        return min(held) if held else None

    def take(self, now: float) -> int:
        if not self.free:
            raise Overflow("no free block")
        b, _ = self.free.popitem(last=False)
        key = self.key_of.pop(b, None)
        if key is not None:  # evicted: the block is reused for new content
            self.blocks_of[key].discard(b)
            if not self.blocks_of[key]:
                del self.blocks_of[key]
                self.evicted_at[key] = now
        self.ref[b] = 1
        return b

    def touch(self, b: int) -> None:
        if self.ref.get(b, 0) == 0:
            self.free.pop(b, None)
        self.ref[b] = self.ref.get(b, 0) + 1

    def cache(self, b: int, key: Any) -> None:
        if b in self.key_of:
            return
        self.key_of[b] = key
        self.blocks_of.setdefault(key, set()).add(b)

    def release(self, ordered: list[int]) -> None:
        """free_blocks(): `ordered` by eviction priority (a request's blocks, last first)."""
        front: list[int] = []
        back: list[int] = []
        for b in ordered:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (back if b in self.key_of else front).append(b)
        for b in reversed(front):  # prepend_n: front[0] ends up at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)
        for b in back:
            self.free[b] = None


def arrival_order(reqs: list[SimRequest]) -> list[SimRequest]:
    """By send time; a request sent before an earlier one's first token may have overtaken it, so
    within such a group the one with fewer observed hits goes first."""
    by_sent = sorted(reqs, key=lambda r: r.sent)
    out: list[SimRequest] = []
    group: list[SimRequest] = []
    horizon = float("-inf")
    for r in by_sent:
        if group and r.sent >= horizon:
            out += sorted(group, key=lambda g: (g.observed if g.observed is not None else -1, g.sent))
            group = []
            horizon = float("-inf")
        group.append(r)
        horizon = max(horizon, r.token_times[0] if r.token_times else float("inf"))
    out += sorted(group, key=lambda g: (g.observed if g.observed is not None else -1, g.sent))
    return out


def simulate(reqs: list[SimRequest], block_size: int, usable_blocks: int) -> list[Prediction]:
    """Predicted cached tokens of each request (a cold cache at the start). Raises Overflow."""
    eps = 1e-6
    order = arrival_order(reqs)
    events: list[tuple[float, int, int, int]] = []  # (time, class, sequence, payload)
    last = float("-inf")
    for i, r in enumerate(order):
        if not r.token_times:
            raise Overflow(f"{r.id} has no token")
        last = max(r.token_times[0] - eps, last)
        events.append((last, 1, i, -1))  # scheduled, FCFS, just before its first token
        t = last
        for k in range(1, r.output):  # the step for token k + 1, after token k (tokens of one chunk: in order)
            t = max(r.token_times[min(k, len(r.token_times)) - 1] + eps, t + eps)
            events.append((t, 2, i, k))
        events.append((max(r.token_times[-1] - 2 * eps, t + eps), 0, i, -2))  # finished: freed before the next step
    events.sort()
    pool = BlockPool(usable_blocks)
    blocks: dict[int, list[int]] = {}
    keys: dict[int, list[Any]] = {}
    out: dict[str, Prediction] = {}
    for t, _, i, what in events:
        r = order[i]
        p = len(r.prompt)
        if what == -1:
            ks = block_keys(r.prompt, block_size)
            cap = (p - 1) // block_size
            hits = 0
            while hits < min(cap, len(ks)) and pool.cached(ks[hits]) is not None:
                hits += 1
            upper = hits
            while upper < min(cap, len(ks)) and (
                pool.cached(ks[upper]) is not None or pool.evicted_at.get(ks[upper], float("-inf")) >= r.sent
            ):
                upper += 1
            held = []
            for k in ks[:hits]:
                b = pool.cached(k)
                assert b is not None
                pool.touch(b)
                held.append(b)
            held += [pool.take(t) for _ in range(cdiv(p, block_size) - hits)]
            for j in range(hits, len(ks)):
                pool.cache(held[j], ks[j])
            blocks[i], keys[i] = held, list(ks)
            out[r.id] = Prediction(r.id, hits * block_size, upper * block_size, p, i)
        elif what == -2:
            pool.release(list(reversed(blocks.pop(i))))
        elif i in blocks:
            n = p + what  # positions with KV once the step for token what + 1 has run
            if cdiv(n, block_size) > len(blocks[i]):
                blocks[i].append(pool.take(t))
            if n % block_size == 0:  # a generated block filled: cached, never matched by a prompt
                keys[i].append(("generated", r.id, n // block_size))
                pool.cache(blocks[i][n // block_size - 1], keys[i][-1])
    return [out[r.id] for r in reqs if r.id in out]
