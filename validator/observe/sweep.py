"""The capacity sweep: one closed-loop step a concurrency, from 1 past the KV limit, each frozen
once early in its first wave (every admitted request decoding, the rest waiting) so the ledger's
prediction of who runs and who waits is read exactly, and its preemptions counted."""

from __future__ import annotations

from typing import Any

from loadgen.schedule.workload import near_limit, new_salt
from validator.errors import InputError
from validator.judge.checkpoints import plan_layout
from validator.judge.layout import ONE_FULL_GROUP, BlockLayout
from validator.judge.sweepstep import predicted_step
from validator.observe.schedule import RunSpec
from validator.plan.record import PlanRecord
from validator.profile import SweepSection
from validator.rundir.freezes import FreezePoint
from validator.rundir.schedule import RunKind

MAX_STEPS = 12


def shape(plan: PlanRecord, sweep: SweepSection) -> tuple[int, int]:
    """(prompt, output) of every request: decode-heavy by default, so the KV cache grows under the
    running requests and, past what it holds, vLLM must preempt."""
    bs, mml = plan.block_size, plan.max_model_len
    prompt = sweep.prompt_tokens or max(bs, mml // 4 // bs * bs)
    out = sweep.output_tokens or mml - prompt
    if prompt + out > mml:
        raise InputError(f"sweep: prompt {prompt} + output {out} tokens exceed max_model_len {mml}")
    return prompt, out


def _step(plan: PlanRecord, n: int, prompt: int, out: int) -> tuple[int, int]:
    """(held, admitted): the judge's prediction at the first tokens; each figure it has no value for
    (a layout with per-request state, or arrivals that disagree) is one full-attention group's, so the
    sweep has steps and the freeze a target (the judge then says what it can judge)."""
    step = predicted_step(plan, plan_layout(plan), "", n, prompt, out, 1, admission_only=True)
    if step.held is not None and step.admitted is not None:
        return step.held, step.admitted
    one = predicted_step(plan, BlockLayout(ONE_FULL_GROUP, None), "", n, prompt, out, 1)
    assert one.held is not None and one.admitted is not None  # the one-group closed form has both
    return (
        step.held if step.held is not None else one.held,
        step.admitted if step.admitted is not None else one.admitted,
    )


def held_at_full_length(plan: PlanRecord, prompt: int, out: int) -> int:
    """Requests of this shape the KV cache holds to their last token (the last sampled token has no KV):
    beside window or chunk groups their largest decode step's blocks (judge/wave.py)."""
    return _step(plan, 1, prompt, out)[0]


def steps_of(text: str, held: int, max_num_seqs: int) -> list[int]:
    if text == "auto":
        k = max(held, 1)
        want = {1, max(1, k // 2), k, k + 1, k + 2, min(max_num_seqs, 2 * k), max_num_seqs + 1}
        return sorted(want)[:MAX_STEPS]
    try:
        got = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        got = []
    if not got or got[0] < 1 or len(got) > MAX_STEPS:
        raise InputError(
            f"sweep.steps: {text[:40]!r}; give auto or up to {MAX_STEPS} concurrencies as 1,2,4,8 (--sweep STEPS)"
        )
    return got


def admitted(plan: PlanRecord, n: int, prompt: int, out: int = 1) -> int:
    """How many of n requests sent at once vLLM schedules: no more than max_num_seqs, and no more than
    the prompts it can allocate blocks for (new requests wait for blocks; only running ones are
    preempted); beside window or chunk groups, as the ledger's run of the scheduler has it at the
    first tokens."""
    return _step(plan, n, prompt, out)[1]


def sweep_runs(plan: PlanRecord, sweep: SweepSection, seed: int) -> list[RunSpec]:
    assert sweep.steps is not None
    prompt, out = shape(plan, sweep)
    held = held_at_full_length(plan, prompt, out)
    return [step_spec(plan, sweep, seed, n) for n in steps_of(sweep.steps, held, plan.max_num_seqs)]


def preview(plan: PlanRecord, sweep: SweepSection) -> list[dict[str, Any]]:
    """The steps the sweep starts with and what the ledger says of each, before anything runs
    (`--plan-only --sweep`): who runs and waits at the first tokens, how many of the shape the KV cache
    holds to their last token, and whether the step goes past that (where vLLM must preempt). A
    bisection for the SLO capacity adds steps only a run can choose."""
    prompt, out = shape(plan, sweep)
    held = held_at_full_length(plan, prompt, out)
    rows = []
    for n in steps_of(sweep.steps or "", held, plan.max_num_seqs):
        run = admitted(plan, n, prompt, out)
        rows.append(
            {
                "run": f"sweep-c{n}",
                "concurrency": n,
                "requests": sweep.waves * n,
                "prompt_tokens": prompt,
                "output_tokens": out,
                "running": run,
                "waiting": n - run,
                "held_to_last_token": held,
                "past_kv_limit": min(n, plan.max_num_seqs) > held,
            }
        )
    return rows


def step_spec(plan: PlanRecord, sweep: SweepSection, seed: int, n: int, found_by: str = "") -> RunSpec:
    """The run of one step: waves x n requests of the sweep's shape, n in flight, frozen once."""
    prompt, out = shape(plan, sweep)
    held = held_at_full_length(plan, prompt, out)
    w = near_limit(
        plan.max_model_len,
        n,
        out,
        margin=plan.max_model_len - prompt - out,
        requests=sweep.waves * n,
        seed=seed + n,
        salt=new_salt(),
        id_prefix=f"c{n}-",
    )
    run = admitted(plan, n, prompt, out)
    return RunSpec(
        f"sweep-c{n}",
        RunKind.SWEEP,
        w,
        n,
        reset_cache=True,
        freezes=[FreezePoint(name="freeze1", min_tokens=1, running=run, waiting=n - run)],
        purpose=f"{n} in flight ({prompt} + {out} tokens): {run} run, {n - run} wait; the KV cache holds "
        f"{held} to their last token{found_by}",
    )


def bisection_step(within: dict[int, bool]) -> int | None:
    """The next concurrency to measure, from each measured step's SLO outcome: halfway between the
    largest step up to which every step met the SLOs and the first that did not; None when they are
    adjacent, or when every step met them (or none did)."""
    ns = sorted(within)
    good = None
    for n in ns:
        if not within[n]:
            if good is None or n - good < 2:
                return None
            return (good + n) // 2
        good = n
    return None
