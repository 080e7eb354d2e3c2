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
  queue (least recently used first out), uncached ones to its head (reused first); a hash cached
  in several blocks resolves to the first cached (BlockHashToBlockMap.get_one_block);
- beside sliding-window groups (gpt-oss, Gemma 4), each group holds its own blocks from the same
  pool, taken and freed in vLLM's group order: a hit needs the full groups' run and the windows'
  `cdiv(window - 1, block)` blocks before it, in every group of a kind (identical groups are looked
  up together); the window groups cache only their checkpoints (the tail before the last prompt
  token and before a shared-prefix junction they found uncached: retention interval 0), and each
  decode step first frees the windows' blocks wholly behind them. Where the kinds' blocks differ
  (Gemma 4: 64 beside 32), a hit and what any group caches end on both kinds' block boundaries
  (their least common multiple, vLLM's scheduler_block_size; get_num_cacheable_tokens).
- sliding-window layers alone (Mistral-7B-v0.1: one group, UnitaryKVCacheCoordinator): the window's
  run is looked for over the whole prompt, right to left (a run anywhere in the prompt's chain is a
  hit, whatever before it was evicted), and only the tail before the last prompt token is cached.
- beside state groups in align mode (Qwen3-Next, LFM2), a prompt is computed a checkpoint a step,
  each step freeing the state pages behind it first (replaychunks.py);
- beside chunked-local groups (Llama 4), which cache every block as a full group does: each decode
  step first frees a chunk group's blocks of the chunks behind the current one, and a lookup needs
  the chunk groups' blocks only from the start of the chunk the full groups' hit ends in (those
  before it are null blocks: a prefix whose early chunk blocks were evicted is still hit).

The client's clock orders these events: a request is scheduled just before its first token arrives
(the latest it can be), a decode step's block just after the previous token, a finish just before
the last token. Requests sent within 50 ms of each other, before the earlier ones had a first token,
may have reached the engine in either order: within such a group the one the server gave fewer hits
is taken to be first (the server's order is the only unknown; the hits each order implies are still
exact). No more than max_num_seqs requests run, and no block is taken that is not free: a client
that read its streams in a burst cannot make the replay run what the server could not.

A request's lookup is placed late, just before its first token. Only one kind of eviction can have
come after it in truth: a running request's decode step near that first token (tokens of one step
reach the client in either order, and async scheduling allocates a step ahead), or any decode after
the send when the prompt may have been prefilled in chunks (looked up at its first chunk) and vLLM
did not say how long before its first token it was scheduled (--enable-per-request-metrics). Such an
eviction widens the prediction to a range instead of guessing. Evictions by requests scheduled
earlier (FCFS) or by a request that had to finish to make room are certain and never widen it.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterator

from validator.judge.arrivals import Prediction, SimRequest, arrival_order
from validator.judge.blockpool import BlockPool, Overflow
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup
from validator.judge.predict import block_keys, checkpoint_blocks
from validator.judge.replaychunks import Prefills, from_send, spanning
from validator.judge.replaylookup import Lookups
from validator.units import cdiv


class _Replay(Lookups, Prefills):
    """The events of the run in the client's order, under the server's two constraints: no more than
    max_num_seqs requests run at once, and no block is taken that is not free (the runs judged here
    have no preemption). When the client's clock puts a request's start before an earlier one's
    finish that made room for it (a starved client reads streams in bursts), the finish is taken
    first, as the server must have."""

    def __init__(
        self,
        order: list[SimRequest],
        block_size: int,
        groups: tuple[HeldGroup, ...],
        usable: int,
        max_running: int | None,
        budget: int | None,
        watch: frozenset[str] = frozenset(),
    ):
        eps = 1e-6
        self.watch = watch  # the requests whose first copies are kept (a freeze caught them)
        self.order, self.max_running = order, max_running
        self.sizes = [g.size(block_size) for g in groups]
        self.fulls = [j for j, g in enumerate(groups) if g.window is None and g.chunk is None and g.state is None]
        # a hybrid's state groups are cached at the windows' checkpoints, a hit needing one block (the state)
        self.wins = [j for j, g in enumerate(groups) if g.window is not None or g.state is not None]
        self.states = [j for j in self.wins if groups[j].state is not None]
        self.chunks = [j for j, g in enumerate(groups) if g.chunk is not None]
        kinds = [{groups[j] for j in js} for js in (self.fulls, self.wins, self.chunks)]
        alone = not self.fulls and self.wins and not self.chunks  # sliding layers only (Mistral-7B-v0.1)
        if not (self.fulls or alone) or any(len(k) > 1 for k in kinds) or (self.wins and self.chunks):
            raise ValueError(
                "the replay holds identical full-attention groups beside identical window or chunk groups, "
                "or window groups alone"
            )
        self.bf = self.sizes[(self.fulls or self.wins)[0]]  # alone: the window's keys stand in for the full's
        self.bw = self.sizes[self.wins[0]] if self.wins else self.bf
        self.window = (groups[self.wins[0]].window or 0) if self.wins else 0
        self.chunk = (groups[self.chunks[0]].chunk or 0) if self.chunks else 0
        self.groups, self.block_size = groups, block_size
        self.frees = self.wins + self.chunks  # the groups that free blocks as a request decodes (and states)
        # a hit lands where both kinds' blocks end (scheduler_block_size), and every group caches up
        # to that alignment only (get_num_cacheable_tokens)
        self.align = math.lcm(self.bf, self.bw)
        self.need = cdiv(self.window - 1, self.bw) if self.window else int(bool(self.states))  # a hit spans
        # a prompt may be prefilled in chunks (looked up steps before its first token) unless it fits
        # the step's token budget beside the largest prompts of the others that may share that step
        longest = sorted((len(r.prompt) for r in order), reverse=True)[: max(0, (max_running or len(order)) - 1)]
        self.one_chunk = (
            budget is not None and budget > 0 and all(len(r.prompt) + sum(longest) <= budget for r in order)
        )
        self.budget = budget
        self.forcing = 0
        self.pool = BlockPool(usable)
        # per request, the times of its events in its own order: scheduled, the step of each token
        # after the first, finished (8 bytes an event: a run's tokens, not Python tuples of them)
        self.own: list[array[float]] = []
        last = float("-inf")
        for r in order:
            if not r.token_times:
                raise Overflow(f"{r.id} has no token")
            # scheduled, FCFS, just before its first token; beside align-mode state, whose prompt is
            # prefilled a checkpoint a step, at vLLM's clock's lead before it where vLLM said
            lead = r.lead if self.states and r.lead is not None and r.lead > 0 else 0.0
            last = max(r.token_times[0] - max(lead, eps), last)
            mine = array("d", [last])
            t = last
            for k in range(1, r.output):  # the step for token k + 1, after token k (one chunk's tokens: in order)
                t = max(r.token_times[min(k, len(r.token_times)) - 1] + eps, t + eps)
                mine.append(t)
            mine.append(max(r.token_times[-1] - 2 * eps, t + eps))  # finished: freed before the next step
            self.own.append(mine)
        self.pos = [0] * len(order)
        self.blocks: dict[int, list[list[int | None]]] = {}  # per request, per group (None: the null block)
        self.keys: dict[int, list[int]] = {}  # its prompt's keys at the full groups' block
        self.cached_to: dict[int, int] = {}  # the full groups' blocks it has cached
        self.state_lo: dict[tuple[int, int], int] = {}  # (request, state group): the pages before it freed
        self.out: dict[str, Prediction] = {}
        # beside align-mode state: each request's prefill chunks still to run, (time, start, end, its checkpoints)
        self.prefills: dict[int, list[tuple[float, int, int, frozenset[int]]]] = {}
        self.due: list[tuple[float, int]] = []  # (time, request) of those chunks, a heap

    def events(self, i: int) -> Iterator[tuple[float, int, int, int]]:
        """Request i's events as (time, class, i, n), in order: at one time a finish comes first,
        then a schedule, then a decode step."""
        last = len(self.own[i]) - 1
        for n, t in enumerate(self.own[i]):
            yield t, 0 if n == last else 1 if n == 0 else 2, i, n

    def what(self, i: int, n: int) -> int:
        """-1: scheduled; -2: finished; else the decode step for token n + 1."""
        return -1 if n == 0 else -2 if n == len(self.own[i]) - 1 else n

    def run(self) -> dict[str, Prediction]:
        # each request's events are in time order: merged, never all held at once
        for t, _, i, n in heapq.merge(*(self.events(i) for i in range(len(self.own)))):
            self.run_due(t, i)  # prefill chunks beside align-mode state run before what follows them
            if n == self.pos[i]:  # not done yet (a finish taken early also did the events before it)
                self.step(i, t)
        return self.out

    def step(self, i: int, t: float) -> None:
        what = self.what(i, self.pos[i])
        self.pos[i] += 1
        if what != -1:  # a request decodes once its prompt is computed
            self.prefill_chunks(i, float("inf"))
        if what == -1:
            while self.max_running and len(self.blocks) >= self.max_running:
                self.finish_one(t, i)
            self.schedule(i, t)
        elif what == -2:
            del self.keys[i], self.cached_to[i]  # nothing of a finished request is held but its blocks
            for g in self.states:
                self.state_lo.pop((i, g), None)
            for blocks in self.blocks.pop(i):  # each group in vLLM's order, its blocks last first
                self.pool.release([b for b in reversed(blocks) if b is not None])
        else:
            self.decode(i, what, t)

    def finish_one(self, t: float, exclude: int) -> None:
        """The running request whose finish the client saw first finishes now (with its last steps)."""
        running = [j for j in self.blocks if j != exclude]
        if not running:
            raise Overflow("no free block and nothing running to free one")
        j = min(running, key=lambda j: self.own[j][-1])
        self.forcing += 1  # its evictions must come before the request waiting for its room
        while j in self.blocks:
            self.step(j, t)
        self.forcing -= 1

    def take(self, t: float, i: int, decode: int | None = None) -> int:
        while not self.pool.free:
            self.finish_one(t, i)
        return self.pool.take(t, None if decode is None or self.forcing else (i, decode))

    def schedule(self, i: int, t: float) -> None:
        r, pool, bf, bw = self.order[i], self.pool, self.bf, self.bw
        p = len(r.prompt)
        ksf = block_keys(r.prompt, bf)
        ksw = ksf if bw == bf else block_keys(r.prompt, bw)
        keys = (ksf, ksw)
        cap = min((p - 1) // bf, len(ksf))
        tokens, full = self.hit(keys, cap, None)
        upper, _ = self.hit(keys, cap, r)
        mine: list[list[int | None]] = []
        for g, spec in enumerate(self.groups):  # the hits, then new blocks, each group in vLLM's order
            if spec.window is None and spec.state is None:  # a chunk group's blocks before the hit's chunk: null
                nulls = tokens // self.chunk * self.chunk // bf if spec.chunk else 0
                got: list[int | None] = [None] * nulls
                got += [pool.cached((g, k)) for k in ksf[nulls : tokens // bf]]
            else:  # blocks wholly behind the window are the null block
                nulls = max(0, tokens // bw - self.need)
                got = [None] * nulls
                got += [pool.cached((g, k)) for k in ksw[nulls : tokens // bw]]
            for b in got:
                if b is not None:
                    pool.touch(b)
            mine.append(got)
        # the window groups cache their checkpoints only (reachable_block_mask, retention interval 0)
        tail = checkpoint_blocks(p, tokens, full, self.align, bw, self.need, len(ksw)) if self.wins else []
        self.blocks[i], self.keys[i], self.cached_to[i] = mine, ksf, tokens // bf
        if self.states:  # in align mode a chunk ends at each checkpoint (_mamba_block_aligned_split)
            first = self.first_copies(i, r.id, tokens, tail, ksf, ksw)
            ends = sorted({(j + 1) * bw for j in tail} | {p})
            self.plan_prefill(i, t, r.token_times[0], tokens, ends, frozenset(tail))
        else:  # the whole prompt in one step: every group's blocks, then what it caches
            for g in range(len(self.groups)):
                mine[g] += [self.take(t, i) for _ in range(len(mine[g]), cdiv(p, self.sizes[g]))]
            first = self.first_copies(i, r.id, tokens, tail, ksf, ksw)
            self.cache_full(i, p)
            for g in self.wins:
                for j in tail:
                    pool.cache(mine[g][j], (g, ksw[j]))  # type: ignore[arg-type]
        self.out[r.id] = Prediction(r.id, tokens, upper, p, i, first)

    def cache_full(self, i: int, computed: int) -> None:
        """The full and chunk groups cache their blocks up to `computed` tokens, aligned down (a block
        that filled past the prompt holds generated content: never matched by a prompt here)."""
        ksf = self.keys[i]
        upto = computed // self.align * self.align // self.bf
        for j in range(self.cached_to[i], upto):
            key = ksf[j] if j < len(ksf) else ("generated", self.order[i].id, j)
            for g in self.fulls + self.chunks:
                if (b := self.blocks[i][g][j]) is not None:
                    self.pool.cache(b, (g, key))
        self.cached_to[i] = max(self.cached_to[i], upto)

    def decode(self, i: int, k: int, t: float) -> None:
        n = len(self.order[i].prompt) + k  # positions with KV once the step for token k + 1 has run
        self.advance(i, n - 1, n, t, k)

    def advance(
        self, i: int, start: int, n: int, t: float, k: int | None = None, tail: frozenset[int] = frozenset()
    ) -> None:
        """One step of request i computing positions start..n: a decode step (for token k + 1), or a
        prefill chunk beside align-mode state (its page at the chunk's end, cached where `tail` holds it)."""
        mine = self.blocks[i]
        for g in self.frees:  # remove_skipped_blocks on the positions computed before this step
            held = mine[g]
            gone = min(self.groups[g].first_held(start, self.block_size), len(held))
            if g in self.states:  # its pages but the last state, null blocks between them
                lo = self.state_lo.get((i, g), 0)
                self.pool.release([b for b in held[lo:gone][::-1] if b is not None])
                held[lo:gone] = [None] * max(gone - lo, 0)
                self.state_lo[(i, g)] = max(lo, gone)
            elif gone and held[gone - 1] is not None:  # blocks newly behind the window or chunk
                freed = []
                for j in range(gone - 1, -1, -1):
                    if held[j] is None:
                        break
                    freed.append(held[j])
                    held[j] = None
                self.pool.release(freed)  # type: ignore[arg-type]
        for g, size in enumerate(self.sizes):
            want = cdiv(n, size)
            if g in self.states:  # one page, at the step's end: null blocks before it
                mine[g] += [None] * (want - 1 - len(mine[g]))
            while want > len(mine[g]):
                mine[g].append(self.take(t, i, k))
        if k is None:  # a prefill chunk: its full blocks, and its state at a checkpoint
            self.cache_full(i, n)
            if (j := n // self.bw - 1) in tail:  # state groups: one block size with the full ones (state_need)
                for g in self.wins:
                    self.pool.cache(mine[g][j], (g, self.keys[i][j]))  # type: ignore[arg-type]
        elif n % self.align == 0:
            self.cache_full(i, n)


def simulate(
    reqs: list[SimRequest],
    block_size: int,
    usable_blocks: int,
    max_running: int | None = None,
    max_num_batched_tokens: int | None = None,
    groups: tuple[HeldGroup, ...] = ONE_FULL_GROUP,
    watch: frozenset[str] = frozenset(),
) -> list[Prediction]:
    """Predicted cached tokens of each request (a cold cache at the start). Raises Overflow.
    Without the step's token budget every prompt is taken to be possibly prefilled in chunks.
    `groups`: the KV cache groups in vLLM's order: identical full-attention groups, and beside them
    identical sliding-window groups caching at checkpoints, each kind at its own block where its
    HeldGroup says (Gemma 4), else at `block_size`, or identical chunked-local groups (Llama 4).
    `watch`: the requests whose first copies their predictions carry (those a freeze caught).
    Beside align-mode state, a request vLLM gave no per-request TTFT for (`lead`) is replayed both
    ways, its prefill chunks just before its first token and spread from its send: each request's
    prediction spans the two (the order of the steps the client cannot see decides the evictions)."""
    args = (block_size, groups, usable_blocks, max_running, max_num_batched_tokens, watch)
    out = _Replay(arrival_order(reqs), *args).run()
    if (early := from_send(reqs, groups)) is not None:
        out = spanning(out, _Replay(arrival_order(early), *args).run())
    return [out[r.id] for r in reqs if r.id in out]
