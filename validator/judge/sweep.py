"""The capacity sweep judged (pure): at each step, who the ledger says runs and waits against the
engine held still, whether it preempts, and the first step that does; then the SLO capacity (the
largest concurrency whose percentiles meet the SLOs) beside the concurrency the KV cache holds.

The ledger's model of vLLM 0.32's scheduler, for n identical requests of P + O tokens sent at once:
it schedules at most max_num_seqs, and no more new requests than it can allocate prompt blocks for
(cdiv(P, block) each; a new request waits for blocks, it is never preempted); running requests
grow a block every `block` tokens and, when the pool runs out, the newest running one is
preempted. So the first wave preempts exactly when more than usable // cdiv(P + O - 1, block)
requests run at once: the KV cache holds that many to their last token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validator.judge.check import Check
from validator.judge.figures import RunFigures, _pct, hist_delta
from validator.judge.freezecheck import observed_state, unsettled
from validator.plan.record import PlanRecord
from validator.profile import SloSection
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind
from validator.units import cdiv


@dataclass(frozen=True)
class Step:
    run: str
    n: int  # requests in flight (the step's concurrency)
    prompt: int
    output: int
    held: int  # full-length requests of this shape the KV cache holds (the ledger)
    at_once: int  # run at once at most: min(n, max_num_seqs)
    admitted: int  # predicted running when the first wave is frozen
    preempts: bool  # predicted: more run at once than the KV cache holds

    @property
    def waiting(self) -> int:
        return self.n - self.admitted


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
    n, bs = run.planned.concurrency, plan.block_size
    held = plan.usable_blocks // cdiv(prompt + out - 1, bs)
    admitted = min(n, plan.max_num_seqs, plan.usable_blocks // cdiv(prompt, bs))
    at_once = min(n, plan.max_num_seqs)
    return Step(run.name, n, prompt, out, held, at_once, admitted, preempts=at_once > held)


def _freeze_reading(run: RunData) -> dict[str, Any] | None:
    settled = [f for f in run.freezes if unsettled(run, f) is None]
    return observed_state(settled[0].reading, 0) if settled else None


def step_checks(run: RunData, step: Step | None, f: RunFigures) -> list[Check]:
    name = run.name
    if step is None:
        return [
            Check(
                name=f"{name}.admitted",
                expected=None,
                observed=None,
                passed=None,
                explanation="the step's records are not of one shape: no prediction",
            )
        ]
    seen = _freeze_reading(run)
    why = None if seen is not None else "no settled freeze of the first wave"
    out = []
    for what, exp, key in (("admitted", step.admitted, "running"), ("waiting_at_start", step.waiting, "waiting")):
        obs = seen[key] if seen is not None else None
        out.append(
            Check(
                name=f"{name}.{what}",
                expected=exp,
                observed=obs,
                passed=None if obs is None else obs == exp,
                tolerance="exact",
                explanation=why
                or f"the ledger: {step.n} sent at once, at most max_num_seqs run and no more new ones than "
                f"prompt blocks ({step.prompt} tokens each) fit; {key} at the first freeze",
            )
        )
    pre = f.preemptions
    out.append(
        Check(
            name=f"{name}.preemptions",
            expected=">= 1" if step.preempts else "0",
            observed=pre,
            passed=None if pre is None else (pre >= 1) == step.preempts,
            tolerance="count",
            explanation=f"{step.at_once} run at once at most; the KV cache holds {step.held} of "
            f"{step.prompt} + {step.output} tokens to their last token",
        )
    )
    return out


def _steps(runs: list[RunData], plan: PlanRecord) -> list[tuple[RunData, Step | None]]:
    sweep = [r for r in runs if r.kind is RunKind.SWEEP]
    return [(r, step_of(r, plan)) for r in sorted(sweep, key=lambda r: r.planned.concurrency if r.planned else 0)]


def sweep_checks(runs: list[RunData], figures: dict[str, RunFigures], plan: PlanRecord) -> list[Check]:
    """Each step's admitted, waiting and preemptions against the ledger, and the first step that preempts."""
    steps = _steps(runs, plan)
    if not steps:
        return []
    checks: list[Check] = []
    for r, s in steps:
        checks += step_checks(r, s, figures[r.name])
    known = [(s, figures[r.name].preemptions) for r, s in steps if s is not None]
    predicted = next((s.n for s, _ in known if s.preempts), None)
    missing = [s.run for s, p in known if p is None]
    observed = next((s.n for s, p in known if p), None)
    checks.append(
        Check(
            name="sweep.first_preemption",
            expected=predicted,
            observed=None if missing else observed,
            passed=None if missing or len(known) < len(steps) else observed == predicted,
            tolerance="exact step",
            explanation=(f"not counted in {', '.join(missing)}; " if missing else "")
            + "the first concurrency at which vLLM preempts, against the ledger's (None: no step preempts)",
        )
    )
    return checks


def sweep_summary(
    runs: list[RunData], figures: dict[str, RunFigures], plan: PlanRecord, slo: SloSection
) -> dict[str, Any] | None:
    """report.json's `sweep`: a row a step, the first preemption, and the SLO capacity: the largest
    concurrency up to which every step meets the SLOs."""
    steps = _steps(runs, plan)
    if not steps:
        return None
    rows = [_row(r, s, figures[r.name], slo) for r, s in steps]
    capacity = None
    for row in rows:
        if not row["within_slo"]:
            break
        capacity = row["n"]
    first = next((s for _, s in steps if s is not None), None)
    predicted = next((s.n for _, s in steps if s is not None and s.preempts), None)
    observed = next((row["n"] for row in rows if row["preemptions"]), None)
    return {
        "steps": rows,
        "kv_holds": first.held if first else None,
        "max_num_seqs": plan.max_num_seqs,
        "usable_blocks": plan.usable_blocks,
        "first_preemption_predicted": predicted,
        "first_preemption_observed": observed,
        "slo_capacity": capacity,
        "line": (
            f"the KV cache holds {first.held} sequences of {first.prompt} + {first.output} tokens "
            f"(max_num_seqs {plan.max_num_seqs}); vLLM first preempted at {observed} in flight (the ledger: "
            f"{predicted}); "
            + (
                f"the SLOs hold at every step (up to {capacity} in flight)"
                if capacity is not None and capacity == rows[-1]["n"]
                else f"the SLOs hold up to {capacity} in flight"
                if capacity is not None
                else "the SLOs hold at no step"
            )
            if first
            else "no step could be read"
        ),
    }


def _row(run: RunData, step: Step | None, f: RunFigures, slo: SloSection) -> dict[str, Any]:
    elapsed = max(run.ended_at - run.started_at, 1e-9)
    ok = [r for r in run.records if r.ok]
    ttft99, itl99 = _pct(f.ttft_ms, 99), _pct(f.itl_ms, 99)
    q = hist_delta(run, "queue")
    within = (
        bool(ok)
        and f.errors == 0
        and (slo.ttft_p99_ms is None or (ttft99 is not None and ttft99 <= slo.ttft_p99_ms))
        and (slo.itl_p99_ms is None or (itl99 is not None and itl99 <= slo.itl_p99_ms))
    )
    seen = _freeze_reading(run)
    return {
        "run": run.name,
        "n": step.n if step else None,
        "prompt": step.prompt if step else None,
        "output": step.output if step else None,
        "admitted_predicted": step.admitted if step else None,
        "running_at_freeze": seen["running"] if seen else None,
        "waiting_at_freeze": seen["waiting"] if seen else None,
        "kv_blocks_at_freeze": f.freezes[0]["observed"] if f.freezes else None,
        "preempts_predicted": step.preempts if step else None,
        "preemptions": f.preemptions,
        "requests_per_s": len(ok) / elapsed,
        "output_tokens_per_s": sum(r.output_tokens or 0 for r in ok) / elapsed,
        "ttft_p50_ms": _pct(f.ttft_ms, 50),
        "ttft_p99_ms": ttft99,
        "itl_p50_ms": _pct(f.itl_ms, 50),
        "itl_p99_ms": itl99,
        "queue_mean_ms": 1e3 * q.sum / q.count if q is not None and q.count > 0 else None,
        "within_slo": within,
    }
