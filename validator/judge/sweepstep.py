"""One sweep step's prediction (pure): who runs and waits when its first wave is frozen, and whether
the step preempts; on one full-attention group from the closed form (judge/sweep.py), beside window
or chunk groups from the ledger's run of vLLM's scheduler (judge/wave.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from validator.judge.checkpoints import plan_layout
from validator.judge.freezecheck import settled_freezes
from validator.judge.layout import BlockLayout, HeldGroup
from validator.judge.wave import Wave, WaveState, run_wave
from validator.plan.kv_spec import ChunkedLocalSpec, SlidingWindowSpec
from validator.plan.record import PlanRecord
from validator.rundir.rundata import RunData
from validator.units import cdiv


@dataclass(frozen=True)
class WavePrediction:
    """What the ledger says of the step: the first wave's running and waiting once every admitted request
    has a token (None: not one state), whether the step preempts (None: not known), and why."""

    admitted: int | None
    waiting: int | None
    preempts: bool | None
    held: int  # requests of this shape the pool holds at their largest (a decode step's blocks)
    why: str
    catchable: bool = True  # False: vLLM preempts in the step after the first tokens, before a freeze can hold it
    first_admitted: int | None = None  # running once the first tokens are out (shown where not catchable)
    most_running: int | None = None  # the most run at once up to the freeze (None: not known)


def decode_peak(groups: tuple[HeldGroup, ...], block_size: int, prompt: int, output: int) -> int:
    """The most blocks one request holds while decoding: KV for t tokens, t up to prompt + output - 1
    (the last token sampled has none), its window or chunk from the tokens computed before."""
    return max(
        (
            sum(cdiv(t, g.size(block_size)) - g.first_held(t - 1, block_size) for g in groups)
            for t in range(prompt + 1, prompt + output)
        ),
        default=sum(prefill_blocks(g, block_size, prompt) for g in groups),
    )


def prefill_blocks(group: HeldGroup, block_size: int, prompt: int) -> int:
    """The blocks a prefill of `prompt` tokens in one step takes in a group: every block of it, but
    in a state group its last state and a checkpoint (the pages the plan reserves, at most)."""
    blocks = cdiv(prompt, group.size(block_size))
    return min(blocks, group.peak or 1) if group.state is not None else blocks


def state_at(states: list[WaveState], leader_tokens: int) -> WaveState | None:
    """The state once the first request has that many tokens, if the wave got there unpreempted."""
    at = next((s for s in states if s.leader_tokens >= leader_tokens), None)
    return None if at is None or at.preempted else at


def never_preempts(groups: tuple[HeldGroup, ...], wave: Wave, peak: int) -> tuple[bool, str]:
    """Whether no order of arrivals can make vLLM preempt: every request running at its largest. A
    prefill scheduled whole is admitted only when it fits, so it never preempts, but it holds its whole
    prompt until its next step frees the window: one such beside the others at their decode peak. A
    prefill split over steps may preempt for its next chunk: then each may hold its whole prompt."""
    at_once = min(wave.n, wave.max_num_seqs)
    prompt_blocks = sum(prefill_blocks(g, wave.block_size, wave.prompt) for g in groups)
    if at_once * wave.prompt <= wave.budget:
        most = (at_once - 1) * peak + max(peak, prompt_blocks)
        largest = max(peak, prompt_blocks)
        return most <= wave.usable, f"{at_once} at once hold at most {at_once - 1} x {peak} + {largest}"
    most = at_once * max(peak, prompt_blocks)
    return most <= wave.usable, f"{at_once} at once hold at most {at_once} x {max(peak, prompt_blocks)}"


@functools.lru_cache(maxsize=64)  # the judge asks once for the checks and once for the summary
def predict_wave(
    groups: tuple[HeldGroup, ...],
    wave: Wave,
    leader_tokens: int = 1,
    admission_only: bool = False,
    ahead: bool | None = None,
) -> WavePrediction:
    """The step's prediction, from both arrivals (together, and the first a step ahead) and, past the
    first wave, the next request arriving 1 or 2 steps after one finishes: a figure where they agree.
    `ahead`: which arrival the freeze shows (its first request a token ahead of the next, or level
    with it); None: not known, both must agree. `admission_only`: who runs and waits at the first
    tokens, not whether it preempts (None)."""
    peak = max(decode_peak(groups, wave.block_size, wave.prompt, wave.output), 1)
    held = wave.usable // peak
    safe, bound = never_preempts(groups, wave, peak)
    # the states a freeze can read come early: run the whole first wave only to see whether it preempts
    horizon = max(leader_tokens, 2) + 1 if safe or admission_only else None
    first_waves = [run_wave(groups, wave, late, upto=horizon)[0] for late in (False, True)]
    # the first a step ahead has a token before the others are scheduled: a freeze of that wave shows it
    # with 2 at least (with 1, the others would be pending)
    a, b = state_at(first_waves[0], leader_tokens), state_at(first_waves[1], max(leader_tokens, 2))
    # the most running at once up to the freeze, in the arrivals it may have followed
    upto = [(first_waves[0], leader_tokens), (first_waves[1], max(leader_tokens, 2))]
    if ahead is not None:  # the arrival the freeze shows: its state alone
        a = b = b if ahead else a
        upto = [upto[1] if ahead else upto[0]]
    agree = a is not None and b is not None and (a.running, a.waiting) == (b.running, b.waiting)
    reached = [state_at(st, lead) for st, lead in upto]
    most = (
        max(s.running for (st, lead), end in zip(upto, reached, strict=True) for s in st if s.step <= end.step)  # type: ignore[union-attr]
        if all(reached)
        else None
    )
    preempts: bool | None
    if admission_only:
        preempts, why = None, "admission only"
    elif safe:
        preempts, why = False, f"{bound} blocks of {wave.usable}"
    elif all(s and s[-1].preempted for s in first_waves):
        preempts, why = True, "the first wave preempts"
    else:
        runs = [run_wave(groups, wave, late, delay) for late in (False, True) for delay in (1, 2)]
        seen = {bool(st[-1].preempted) if st and ended else None for st, ended in runs}
        preempts = seen.pop() if len(seen) == 1 else None
        why = (
            f"the closed loop {'preempts' if preempts else 'ends unpreempted'} however the next requests arrive"
            if preempts is not None
            else "whether the closed loop preempts depends on when the next requests arrive"
            if None not in seen
            else "the closed loop was not run to its end"
        )
    catchable = state_at(first_waves[0], 2) is not None and state_at(first_waves[1], 2) is not None
    first = state_at(first_waves[0], 1)
    return WavePrediction(
        a.running if agree and a else None,
        a.waiting if agree and a else None,
        preempts,
        held,
        why,
        catchable,
        first.running if first else None,
        most,
    )


@dataclass(frozen=True)
class Step:
    run: str
    n: int  # requests in flight (the step's concurrency)
    prompt: int
    output: int
    held: int | None  # requests of this shape the KV cache holds to their last token (None: not known)
    at_once: int  # run at once at most: min(n, max_num_seqs)
    admitted: int | None  # predicted running when the first wave is frozen (None: not one figure)
    preempts: bool | None  # predicted: the step preempts (None: not known)
    why: str = ""  # how the prediction was made, or why there is none
    catchable: bool = True  # False: the first wave preempts a step after its first tokens, before any freeze
    most_running: int | None = None  # the most run at once up to its freeze, where the ledger's run knows

    @property
    def waiting(self) -> int | None:
        return None if self.admitted is None else self.n - self.admitted


def admission_caps(
    kv_groups: Any, groups: tuple[HeldGroup, ...], plan: PlanRecord, prompt: int
) -> tuple[int | None, ...] | None:
    """Each group's admission cap in blocks (None: its whole prompt), from plan.json's
    `blocks_per_request`; a plan written before that key: None where the cap cannot bind (the prompt
    within the smallest cap any in-flight budget gives), else not known (None)."""
    caps: list[int | None] = []
    for raw, g in zip(kv_groups if isinstance(kv_groups, list) else [], groups, strict=False):
        listed = raw.get("blocks_per_request") if isinstance(raw, dict) else None
        if g.state is not None:
            caps.append(g.peak)  # a state group's admission: its last state and a checkpoint
        elif not g.frees:
            caps.append(None)
        elif type(listed) is int and listed > 0:
            caps.append(listed)
        else:
            # the cap with the least in-flight budget (one batch), by the planner's formula for the spec
            shape = {"block_size": g.size(plan.block_size), "num_kv_heads": 1, "head_size": 1, "dtype_bytes": 1}
            spec = (
                SlidingWindowSpec(**shape, sliding_window=g.window)
                if g.window is not None
                else ChunkedLocalSpec(**shape, attention_chunk_size=g.chunk or 0)
            )
            if cdiv(prompt, spec.block_size) > spec.blocks_per_request(plan.max_model_len, plan.max_num_batched_tokens):
                return None
            caps.append(None)
    return tuple(caps) if len(caps) == len(groups) else None


def leader_tokens(run: RunData) -> tuple[int, bool | None]:
    """The most tokens a request had at the run's first settled freeze (1 without one), and whether
    that first request was a step ahead of the next (one token more) or level with it (None: neither,
    or one request only)."""
    settled = settled_freezes(run)
    if not settled:
        return 1, None
    got = sorted((d for r in settled[0].requests if type(d := r.get("delivered")) is int), reverse=True)
    if not got:
        return 1, None
    ahead = {0: False, 1: True}.get(got[0] - got[1]) if len(got) > 1 else None
    return max(got[0], 1), ahead


def predicted_step(
    plan: PlanRecord,
    layout: BlockLayout,
    name: str,
    n: int,
    prompt: int,
    out: int,
    lead: int,
    total: int = 0,
    admission_only: bool = False,
    ahead: bool | None = None,
) -> Step:
    """The step's prediction for n in flight (`total` requests in all, closed loop), its first freeze
    taken when the first request had `lead` tokens (`ahead`: a step ahead of the next, or level)."""
    bs, at_once = plan.block_size, min(n, plan.max_num_seqs)
    if layout.gap is None:
        held = plan.usable_blocks // cdiv(prompt + out - 1, bs)
        admitted = min(n, plan.max_num_seqs, plan.usable_blocks // cdiv(prompt, bs))
        return Step(name, n, prompt, out, held, at_once, admitted, at_once > held)
    groups = layout.groups
    if not groups or not layout.scheduled:
        return Step(name, n, prompt, out, None, at_once, None, None, f"{layout.gap}")
    caps = admission_caps(plan.shown.get("kv_groups"), groups, plan, prompt)
    if caps is None or plan.max_num_batched_tokens <= 0:
        why = "what a window or chunk group lets one request reserve is not in plan.json"
        return Step(name, n, prompt, out, None, at_once, None, None, why)
    wave = Wave(n, prompt, out, plan.max_num_seqs, plan.max_num_batched_tokens, plan.usable_blocks, bs, caps, total)
    p = predict_wave(groups, wave, lead, admission_only, ahead)
    why = f"the ledger's run of the scheduler: {p.why}"
    if not p.catchable:
        return Step(name, n, prompt, out, p.held, at_once, p.first_admitted, p.preempts, why, catchable=False)
    return Step(name, n, prompt, out, p.held, at_once, p.admitted, p.preempts, why, most_running=p.most_running)


def step_of(run: RunData, plan: PlanRecord) -> Step | None:
    """The step's prediction, from what the run directory says was sent (its planned concurrency
    and the lengths its requests asked)."""
    if run.planned is None or not run.records:
        return None
    asked = {(r.asked_prompt_tokens, r.asked_output_tokens) for r in run.records}
    if len(asked) != 1:
        return None
    ((prompt, out),) = asked
    if prompt is None or out is None:
        return None
    layout = plan_layout(plan)
    n, total = run.planned.concurrency, run.planned.requests
    lead, ahead = leader_tokens(run)
    return predicted_step(plan, layout, run.name, n, prompt, out, lead, total, ahead=ahead)
