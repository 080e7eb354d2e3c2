"""The sweep's bisection for the SLO capacity, between the live runs (validate --sweep)."""

from __future__ import annotations

from pathlib import Path

from validator.observe.schedule import schedule_of
from validator.plan.record import PlanRecord
from validator.profile import Profile
from validator.rundir.files import write_plan
from validator.rundir.schedule import RunKind


def sweep_bisection(profile: Profile, record: PlanRecord, specs: list, run_dir: Path, say, server_started: bool):
    """After a sweep's steps: up to sweep.bisect more, each halfway between the largest concurrency
    within the SLOs and the first measured beyond it, so the SLO capacity is found to the request.
    Each is written into plan.json's schedule before it runs: the directory must hold it."""
    if profile.sweep.steps is None or profile.sweep.bisect == 0:
        return None
    from validator.judge.figures import run_figures
    from validator.judge.sweep import within_slo
    from validator.observe.sweep import bisection_step, step_spec

    added: list[int] = []
    concurrency = {sp.name: sp.concurrency for sp in specs}

    def more(done: list) -> list:
        if len(added) >= profile.sweep.bisect:
            return []
        within = {
            concurrency[r.name]: within_slo(r, run_figures(r, record), profile.slo)
            for r in done
            if r.name in concurrency and r.kind is RunKind.SWEEP
        }
        n = bisection_step(within)
        if n is None or n in within:
            return []
        spec = step_spec(record, profile.sweep, profile.workload.seed, n, found_by="; bisection for the SLO capacity")
        added.append(n)
        specs.append(spec)
        concurrency[spec.name] = n
        write_plan(run_dir, record, schedule_of(specs, server_started=server_started, freezes=profile.observe.freezes))
        say(
            f"sweep: the SLOs hold at {max(k for k, v in within.items() if v)} in flight, not at "
            f"{min(k for k, v in within.items() if not v)}: measuring {n}"
        )
        return [spec]

    return more
