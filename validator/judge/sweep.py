"""The capacity sweep judged (pure): at each step, who the ledger says runs and waits against the
engine held still, whether it preempts, and the first step that does; then the SLO capacity (the
largest concurrency whose percentiles meet the SLOs) beside the concurrency the KV cache holds.

The ledger's model of vLLM 0.32's scheduler, for n identical requests of P + O tokens sent at once:
it schedules at most max_num_seqs, and no more new requests than it can allocate prompt blocks for
(cdiv(P, block) each; a new request waits for blocks, it is never preempted); running requests
grow a block every `block` tokens and, when the pool runs out, the newest running one is
preempted. So the first wave preempts exactly when more than usable // cdiv(P + O - 1, block)
requests run at once: the KV cache holds that many to their last token. Beside window or chunk
groups, which give blocks back as requests decode, there is no closed form: the ledger runs the
scheduler's loop on the first wave (judge/wave.py, judge/sweepstep.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from validator.judge.check import Check
from validator.judge.figures import RunFigures, _paused, _pct, hist_delta
from validator.judge.freezecheck import freeze_intervals, observed_state, settled_freezes
from validator.judge.sweepstep import Step, step_of
from validator.plan.record import PlanRecord, Platform
from validator.profile import SloSection
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind


def _freeze_reading(run: RunData) -> dict[str, Any] | None:
    settled = settled_freezes(run)
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
    how = (
        f"the ledger: {step.n} sent at once, at most max_num_seqs run and no more new ones than "
        f"prompt blocks ({step.prompt} tokens each) fit"
        if not step.why
        else f"{step.why}; {step.n} sent at once"
    )
    for what, exp, key in (("admitted", step.admitted, "running"), ("waiting_at_start", step.waiting, "waiting")):
        obs = seen[key] if seen is not None else None
        if not step.catchable:  # no freeze can hold that state: shown, not judged
            said = (
                f"not judged: vLLM preempts in the decode step right after the first wave's first tokens, "
                f"before a freeze can hold it ({how}; {key} once the first tokens are out)"
            )
        elif why:
            said = why
        elif exp is None:
            said = (
                f"no one figure for this freeze (the arrivals the ledger tries disagree there, or vLLM "
                f"preempted before it): {how}"
            )
        else:
            said = f"{how}; {key} at the first freeze"
        out.append(
            Check(
                name=f"{name}.{what}",
                expected=exp,
                observed=obs,
                passed=None if obs is None or exp is None or not step.catchable else obs == exp,
                tolerance="exact",
                judged=step.catchable,
                explanation=said,
            )
        )
    pre = f.preemptions
    holds = f"the KV cache holds {step.held}" if step.held is not None else "what the KV cache holds is not known"
    out.append(
        Check(
            name=f"{name}.preemptions",
            expected=None if step.preempts is None else ">= 1" if step.preempts else "0",
            observed=pre,
            passed=None if pre is None or step.preempts is None else (pre >= 1) == step.preempts,
            tolerance="count",
            explanation=f"{step.at_once} run at once at most; {holds} of "
            f"{step.prompt} + {step.output} tokens to their last token" + (f"; {step.why}" if step.why else ""),
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
    predicted, known_all = first_predicted(s for _, s in steps)
    unknown = not known_all or any(s is None for _, s in steps)
    missing = [s.run for s, p in known if p is None]
    observed = next((s.n for s, p in known if p), None)
    checks.append(peak_memory_check([r for r, _ in steps], plan))
    checks.append(
        Check(
            name="sweep.first_preemption",
            expected=predicted,
            observed=None if missing else observed,
            passed=None if missing or unknown else observed == predicted,
            tolerance="exact step",
            explanation=(f"not counted in {', '.join(missing)}; " if missing else "")
            + ("the ledger does not say whether every step before it preempts; " if unknown else "")
            + "the first concurrency at which vLLM preempts, against the ledger's (None: no step preempts)",
        )
    )
    return checks


def first_predicted(steps: Iterable[Step | None]) -> tuple[int | None, bool]:
    """The first step the ledger says preempts (None: none does), and whether that is known: not where
    a step before it (or any step, when none does) has no prediction."""
    for s in steps:
        if s is None or s.preempts is None:
            return None, False
        if s.preempts:
            return s.n, True
    return None, True


def memory_budget(plan: PlanRecord) -> tuple[int | None, str]:
    """The ledger's memory for the server, bytes, and what it counts: on a GPU the budget vLLM may take
    (gpu_memory_utilization x memory, or what was requested); on the CPU weights + KV cache only (the
    Python runtime and its libraries are not in the ledger)."""
    led = plan.ledger
    if plan.platform is Platform.GPU:
        return led.budget_bytes, "the GPU budget (utilization x memory)"
    if led.weights_bytes is None or led.kv_cache_bytes is None:
        return None, "weights + KV cache"
    return led.weights_bytes + led.kv_cache_bytes, "weights + KV cache (the runtime is not in the ledger)"


def peak_memory_check(runs: list[RunData], plan: PlanRecord) -> Check:
    """On a GPU: the memory used on the server's GPUs, at every sample of every step, within the ledger's
    budget. On the CPU the engine's RSS is shown, not judged: it holds the runtime the ledger leaves out."""
    budget, what = memory_budget(plan)
    peaks = [p for r in runs if (p := r.peak_memory_gib) is not None]
    peak = max(peaks) if peaks else None
    exp = None if budget is None else round(budget / 2**30, 3)
    if plan.platform is not Platform.GPU:
        return Check(
            name="sweep.peak_memory_gib",
            expected=exp,
            observed=peak,
            passed=None,
            tolerance="never above",
            judged=False,
            explanation=f"not judged on the CPU: the engine's RSS holds the Python runtime and libraries beside "
            f"{what}; shown per step",
        )
    return Check(
        name="sweep.peak_memory_gib",
        expected=exp,
        observed=peak,
        passed=None if peak is None or exp is None else peak <= exp,
        tolerance="never above",
        explanation=f"the largest GPU memory used in any step's samples (NVML) against {what}"
        + ("" if peaks else "; not sampled (no NVML in kvgate's Python, or a server kvgate did not start)"),
    )


def sweep_summary(
    runs: list[RunData], figures: dict[str, RunFigures], plan: PlanRecord, slo: SloSection
) -> dict[str, Any] | None:
    """report.json's `sweep`: a row a step, the first preemption, and the SLO capacity: the largest
    concurrency up to which every step meets the SLOs."""
    steps = _steps(runs, plan)
    if not steps:
        return None
    rows = [_row(r, s, figures[r.name], slo) for r, s in steps]
    budget = memory_budget(plan)[0]
    capacity = None
    for row in rows:
        if not row["within_slo"]:
            break
        capacity = row["n"]
    first = next((s for _, s in steps if s is not None), None)
    predicted, known = first_predicted(s for _, s in steps)
    observed = next((row["n"] for row in rows if row["preemptions"]), None)
    holds = (
        f"the KV cache holds {first.held} sequences of {first.prompt} + {first.output} tokens"
        if first and first.held is not None
        else f"sequences of {first.prompt} + {first.output} tokens: what the KV cache holds is {first.why}"
        if first
        else ""
    )
    return {
        "steps": rows,
        "kv_holds": first.held if first else None,
        "max_num_seqs": plan.max_num_seqs,
        "usable_blocks": plan.usable_blocks,
        "first_preemption_predicted": predicted,
        "first_preemption_observed": observed,
        "slo_capacity": capacity,
        "slo_capacity_exact": capacity is not None
        and (capacity == rows[-1]["n"] or any(row["n"] == capacity + 1 for row in rows)),
        "memory_budget_gib": None if budget is None else round(budget / 2**30, 3),
        "line": (
            f"{holds} (max_num_seqs {plan.max_num_seqs}); vLLM first preempted at {observed} in flight (the ledger: "
            f"{predicted if known else 'not known'}); "
            + (
                f"the SLOs hold at every step (up to {capacity} in flight)"
                if capacity is not None and capacity == rows[-1]["n"]
                else f"the SLOs hold up to {capacity} in flight, not at {capacity + 1}"
                if capacity is not None and any(row["n"] == capacity + 1 for row in rows)
                else f"the SLOs hold up to {capacity} in flight (the next step measured: "
                f"{min((row['n'] for row in rows if (row['n'] or 0) > capacity), default='?')})"
                if capacity is not None
                else "the SLOs hold at no step"
            )
            if first
            else "no step could be read"
        ),
    }


def within_slo(run: RunData, f: RunFigures, slo: SloSection) -> bool:
    """The step met the SLOs: requests answered, no error, TTFT and ITL p99 within (unset: not asked)."""
    ttft99, itl99 = _pct(f.ttft_ms, 99), _pct(f.itl_ms, 99)
    return (
        any(r.ok for r in run.records)
        and f.errors == 0
        and (slo.ttft_p99_ms is None or (ttft99 is not None and ttft99 <= slo.ttft_p99_ms))
        and (slo.itl_p99_ms is None or (itl99 is not None and itl99 <= slo.itl_p99_ms))
    )


def goodput(run: RunData, slo: SloSection) -> float | None:
    """Requests a second that each met the SLOs (`vllm bench serve --goodput`'s sense: the request's own
    TTFT and its mean ITL within the thresholds); None with no SLO set."""
    if slo.ttft_p99_ms is None and slo.itl_p99_ms is None:
        return None
    spans, good = freeze_intervals(run), 0
    for r in run.records:
        if not r.ok or not r.output_tokens:
            continue
        sent = r.sent or 0.0
        first, last = sent + r.chunk_times[0], sent + r.chunk_times[-1]
        # the freeze's hold is the engine's pause, not the deployment's latency: taken out, as in the SLO checks
        ttft = 1e3 * (first - sent - _paused(sent, first, spans))
        tpot = 1e3 * (last - first - _paused(first, last, spans)) / max(r.output_tokens - 1, 1)
        if slo.ttft_p99_ms is not None and ttft > slo.ttft_p99_ms:
            continue
        if slo.itl_p99_ms is not None and tpot > slo.itl_p99_ms:
            continue
        good += 1
    return good / max(run.ended_at - run.started_at, 1e-9)


def _row(run: RunData, step: Step | None, f: RunFigures, slo: SloSection) -> dict[str, Any]:
    elapsed = max(run.ended_at - run.started_at, 1e-9)
    ok = [r for r in run.records if r.ok]
    ttft99, itl99 = _pct(f.ttft_ms, 99), _pct(f.itl_ms, 99)
    q = hist_delta(run, "queue")
    within = within_slo(run, f, slo)
    seen = _freeze_reading(run)
    return {
        "run": run.name,
        "n": step.n if step else None,
        "prompt": step.prompt if step else None,
        "output": step.output if step else None,
        "admitted_predicted": step.admitted if step else None,
        # False: the wave preempts before a freeze can hold it; its admission is shown, not judged
        "admission_judged": step.catchable if step else None,
        "running_at_freeze": seen["running"] if seen else None,
        "waiting_at_freeze": seen["waiting"] if seen else None,
        "kv_blocks_at_freeze": f.freezes[0]["observed"] if f.freezes else None,
        "kv_blocks_predicted": f.freezes[0]["expected"] if f.freezes else None,
        "preempts_predicted": step.preempts if step else None,
        "preemptions": f.preemptions,
        "requests_per_s": len(ok) / elapsed,
        "output_tokens_per_s": sum(r.output_tokens or 0 for r in ok) / elapsed,
        "ttft_p50_ms": _pct(f.ttft_ms, 50),
        "ttft_p99_ms": ttft99,
        "itl_p50_ms": _pct(f.itl_ms, 50),
        "itl_p99_ms": itl99,
        "queue_mean_ms": 1e3 * q.sum / q.count if q is not None and q.count > 0 else None,
        "errors": f.errors,  # failed requests: a step with any misses its SLOs whatever its latency
        "goodput_requests_per_s": goodput(run, slo),
        "peak_server_memory_gib": run.peak_memory_gib,
        "within_slo": within,
    }
