"""A sweep step's first wave as vLLM 0.32's scheduler runs it, on a layout whose window or chunk
groups give blocks back (gpt-oss, Llama 4, Gemma 4): who it admits, who waits, whether it preempts.

One full-attention group has a closed form (judge/sweep.py's docstring). Beside a window or a chunk
group it has none: a request's prefill holds its whole prompt in every group, its decode frees the
blocks that leave the window or the chunk, and the scheduler admits a new request while its
reservation fits the free blocks. So the ledger runs vLLM's loop (v1/core/sched/scheduler.py,
kv_cache_manager.allocate_slots), step by step, on n requests of P + O tokens sent at once:

- running requests first, in order: each schedules its prefill's rest or one decode token within the
  step's `max_num_batched_tokens`; its window or chunk blocks computed past are freed first
  (remove_skipped_blocks, on the tokens computed before the step); if the new blocks do not fit, the
  newest running request is preempted (its blocks freed, back to the front of the queue), and so on;
- then, only in a step that preempted nobody, waiting requests in order while fewer than
  `max_num_seqs` run and tokens remain: one is admitted when its reservation fits the free blocks
  (every group's blocks for its whole prompt, a window or chunk group's capped at what one request
  may hold there: vLLM's max_admission_blocks_per_request, plan.json's `blocks_per_request`) and
  its chunk's blocks do;
- beside align-mode state a prefill chunk stops at the block boundary before the request's last
  token, and one the budget cut at a block boundary (_mamba_block_aligned_split): a prompt past one
  block takes two steps, the page for that checkpoint taken in the first;
- a request whose prompt is computed yields a token a step; one with all its tokens frees its blocks.

The wave is run until the first request finishes (the closed loop then sends the next one, at a
time the ledger does not know) or the first preemption. The client cannot send n requests in one
instant: the first one may be scheduled a step ahead (a freeze sees it one token ahead), so the wave
is also run with the others a step late; sweepstep.predict_wave makes a prediction from these runs
where they agree, or from the one the freeze shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from validator.judge.layout import HeldGroup, align_block
from validator.units import cdiv

MAX_STEPS = 1_000_000  # a step's run is bounded: its prefill chunks plus its outputs, far below this
MAX_WORK = 3_000_000  # requests scheduled, summed over steps: past this the run is cut (not known)


@dataclass(frozen=True)
class Wave:
    """n requests of `prompt` + `output` tokens sent at once, and what the scheduler works within."""

    n: int
    prompt: int
    output: int
    max_num_seqs: int
    budget: int  # max_num_batched_tokens
    usable: int  # the pool's blocks (the null block apart)
    block_size: int
    caps: tuple[int | None, ...]  # each group's admission cap in blocks (None: its whole prompt)
    total: int = 0  # requests in the step (the closed loop sends one as one finishes); 0: n


@dataclass(frozen=True)
class WaveState:
    """After one step: requests running and waiting, the tokens the first request has, preemptions so far."""

    step: int
    running: int
    waiting: int
    leader_tokens: int
    preempted: int


@dataclass
class _Req:
    tokens: int  # prompt + tokens produced (vLLM's num_tokens)
    computed: int = 0
    produced: int = 0
    listed: list[int] = field(default_factory=list)  # blocks listed a group (freed ones as null blocks)
    freed: list[int] = field(default_factory=list)  # of those, the ones a window or a chunk gave back


class _Pool:
    def __init__(self, groups: tuple[HeldGroup, ...], wave: Wave):
        self.groups, self.wave, self.free = groups, wave, wave.usable
        self.aligned = align_block(groups, wave.block_size)

    def sizes(self) -> list[int]:
        return [g.size(self.wave.block_size) for g in self.groups]

    def drop_skipped(self, r: _Req) -> None:
        """remove_skipped_blocks: blocks wholly before the window, or the chunk, of the next token; a
        state group's pages but the last state."""
        for i, g in enumerate(self.groups):
            if (g.frees or g.state == "align") and r.listed[i]:
                gone = min(g.first_held(r.computed, self.wave.block_size), r.listed[i])
                if gone > r.freed[i]:
                    self.free += gone - r.freed[i]
                    r.freed[i] = gone

    def split(self, r: _Req, new: int) -> int:
        """_mamba_block_aligned_split beside align-mode state: a prefill chunk stops at the block boundary
        before the request's last token (its state cached there), one the budget cut at a block boundary
        (0: not scheduled this step)."""
        start, end, done, bs = r.computed, r.computed + new, max(self.wave.prompt, r.tokens - 1), self.aligned
        if bs is None or start >= done:
            return new
        if end < done and (end // bs * bs > start or bs <= self.wave.budget):
            end = end // bs * bs
        stops = ((start // bs + 1) * bs if start % bs else 0, (r.tokens - 1) // bs * bs)
        return min((s for s in stops if start < s < end), default=end) - start

    def grow(self, r: _Req, new: int) -> bool:
        listed = [max(cdiv(r.computed + new, bs), r.listed[i]) for i, bs in enumerate(self.sizes())]
        need = [n - a for n, a in zip(listed, r.listed, strict=True)]
        nulls = [0] * len(need)
        for i, g in enumerate(self.groups):
            if g.state is not None and need[i]:
                # align mode takes one page, the state at the step's end, and the prefill's checkpoint
                # page where its last step crosses a block boundary past its start; the rest are null
                end, bs = r.computed + new, self.sizes()[i]
                checkpoint = end >= self.wave.prompt and (end - 1) // bs * bs > r.computed and listed[i] >= 2
                nulls[i] = need[i] - min(need[i], 1 + int(checkpoint))
        if sum(need) - sum(nulls) > self.free:
            return False
        self.free -= sum(need) - sum(nulls)
        r.listed = listed
        r.freed = [a + b for a, b in zip(r.freed, nulls, strict=True)]
        return True

    def quiet_steps(self, running: list[_Req], output: int) -> int:
        """Decode steps every running request takes with no block taken or given back and none finishing
        (0 while one is in its prefill): the free blocks, and so every admission, stay as they are."""
        quiet = MAX_STEPS
        for r in running:
            c = r.computed
            if c != r.tokens - 1:
                return 0
            quiet = min(quiet, output - r.produced - 1)
            for i, (g, bs) in enumerate(zip(self.groups, self.sizes(), strict=True)):
                quiet = min(quiet, r.listed[i] * bs - c)  # its next token's slot in a block it has
                if g.frees or g.state == "align":
                    if min(g.first_held(c, self.wave.block_size), r.listed[i]) != r.freed[i]:
                        return 0
                    # the next token computed that frees a block: past the window's edge (a state's: 2
                    # tokens, the last state kept), or a new chunk
                    chunk, window = g.chunk or 1, g.window or (2 if g.state else None)
                    edge = (r.freed[i] + 1) * bs + window - 1 if window else (c // chunk + 1) * chunk
                    quiet = min(quiet, edge - c)
        return max(quiet, 0)

    def release(self, r: _Req) -> None:
        self.free += sum(a - b for a, b in zip(r.listed, r.freed, strict=True))
        r.listed, r.freed = [0] * len(self.groups), [0] * len(self.groups)

    def reservation(self, r: _Req) -> int:
        """get_num_blocks_to_allocate(apply_admission_cap=True) for a request with nothing computed."""
        full = min(r.tokens, self.wave.prompt + self.wave.output)
        return sum(
            cdiv(full, bs) if cap is None else min(cdiv(full, bs), cap)
            for bs, cap in zip(self.sizes(), self.wave.caps, strict=True)
        )


def run_wave(
    groups: tuple[HeldGroup, ...], wave: Wave, late: bool = False, delay: int | None = None, upto: int | None = None
) -> tuple[list[WaveState], bool]:
    """The states after each step until the first preemption (that step included), and whether the run
    got to its end. `late`: the first request arrives a step before the others. `delay`: None stops at
    the first request to finish; else the closed loop: each one finished brings the next of the step's
    `total` that many steps later, and the run goes on until every one has finished. `upto`: stop once
    the first request has that many tokens (the run then not at its end)."""
    pool = _Pool(groups, wave)
    total = max(wave.total, wave.n) if delay is not None else wave.n
    fresh = iter([_Req(wave.prompt, listed=[0] * len(groups), freed=[0] * len(groups)) for _ in range(total)])
    reqs = [next(fresh) for _ in range(wave.n)]
    leader = reqs[0]
    waiting = reqs[:1] if late else list(reqs)
    behind = reqs[1:] if late else []  # the rest of the first wave, a step behind the first
    due: dict[int, int] = {}  # step -> requests of the closed loop arriving before it
    running: list[_Req] = []
    states: list[WaveState] = []
    preempted = work = step = 0
    while step < MAX_STEPS:
        step += 1
        if step == 2:
            waiting += behind
        waiting += [r for _ in range(due.pop(step, 0)) if (r := next(fresh, None)) is not None]
        budget, scheduled, preempted_now = wave.budget, [], False
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = pool.split(r, min(r.tokens - r.computed, budget))
            if not new:  # too little budget for an aligned chunk: the next one is tried
                i += 1
                continue
            pool.drop_skipped(r)
            while not pool.grow(r, new):
                victim = running.pop()  # the newest running one (FCFS), never one scheduled before it
                pool.release(victim)
                victim.computed = 0
                waiting.insert(0, victim)
                preempted, preempted_now = preempted + 1, True
                if victim is r:
                    break
            else:
                scheduled.append((r, new))
                budget -= new
                i += 1
                continue
            break
        admitted = 0
        while not preempted_now and waiting and len(running) < wave.max_num_seqs and budget > 0:
            r = waiting[0]
            new = pool.split(r, min(r.tokens - r.computed, budget))
            if not new or pool.reservation(r) > pool.free or not pool.grow(r, new):
                break
            running.append(waiting.pop(0))
            admitted += 1
            scheduled.append((r, new))
            budget -= new
        done = []
        for r, new in scheduled:
            r.computed += new
            if r.computed >= r.tokens:  # its prompt (or its last token) computed: one more token
                r.produced += 1
                r.tokens += 1
                if r.produced >= wave.output:
                    done.append(r)
        work += len(scheduled)
        states.append(WaveState(step, len(running), len(waiting), leader.produced, preempted))
        if preempted or (done and delay is None):
            return states, True
        for r in done:  # freed when the step's output is processed, before the next one is scheduled
            pool.release(r)
            running.remove(r)
        if done:
            due[step + max(delay or 1, 1)] = due.get(step + max(delay or 1, 1), 0) + len(done)
        if not running and not waiting and not due and (step >= 2 or not behind):
            return states, True
        if not scheduled and not due and (step >= 2 or not behind):
            return states, False  # nothing can be scheduled and nothing will arrive: vLLM would wait forever
        if work > MAX_WORK or (upto is not None and leader.produced >= upto):
            return states, False
        # a waiting request's admission is tried again with the same free blocks and budget only after a
        # step of decodes alone that admitted no one
        same = not waiting or len(running) >= wave.max_num_seqs or all(k == 1 for _, k in scheduled)
        quiet = pool.quiet_steps(running, wave.output) if step >= 2 and not done and same and not admitted else 0
        quiet = min([quiet] + [d - step - 1 for d in due])
        if quiet > 1:  # nothing taken, given back, admitted or finished meanwhile: skip those steps
            for r in running:
                r.computed, r.tokens, r.produced = r.computed + quiet, r.tokens + quiet, r.produced + quiet
            step += quiet
            states.append(WaveState(step, len(running), len(waiting), leader.produced, preempted))
    return states, False
