"""The SLO checks: over the latency run when there is one, else over the cold and warm runs (or
the dataset run); a sweep reports its SLO capacity instead."""

from __future__ import annotations

from validator.judge import evidence
from validator.judge.check import Check
from validator.judge.figures import RunFigures, _pct, first_error
from validator.profile import SloSection
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind


def slo_checks(runs: list[RunData], figures: dict[str, RunFigures], slo: SloSection) -> list[Check]:
    """The SLOs over the latency run when the profile asked for one (load processes, no freezes),
    else over the cold and warm runs, the time freezes held the engine subtracted. A run they are
    judged over whose evidence is not whole leaves them `not measured`."""
    latency_runs = [r for r in runs if r.kind is RunKind.LATENCY]
    measured = latency_runs or [r for r in runs if r.kind in (RunKind.COLD, RunKind.WARM, RunKind.DATASET)]
    over = (
        "the latency run"
        if latency_runs
        else "the dataset run"
        if any(r.kind is RunKind.DATASET for r in measured)
        else "the cold and warm runs"
    )
    adjusted = "" if latency_runs else ", the time freezes held the engine subtracted"
    if not measured and any(r.kind is RunKind.SWEEP for r in runs):  # the sweep finds the SLO capacity instead
        return [
            Check(
                name=f"slo.{k}",
                expected=None,
                observed=None,
                passed=None,
                tolerance="",
                explanation="a sweep reports the SLO capacity instead (the report's sweep table)",
                judged=False,
            )
            for k in ("ttft_p99_ms", "itl_p99_ms", "error_rate")
        ]
    gaps = [why for r in measured if (why := evidence.incomplete(r))]
    ttft = [v for r in measured for v in figures[r.name].ttft_ms]
    itl = [v for r in measured for v in figures[r.name].itl_ms]
    total = sum(figures[r.name].requests for r in measured)
    errors = sum(figures[r.name].errors for r in measured)
    out = []
    for key, vals, label in (("ttft_p99_ms", ttft, "TTFT"), ("itl_p99_ms", itl, "ITL")):
        limit = getattr(slo, key)
        obs = _pct(vals, 99)
        out.append(
            Check(
                name=f"slo.{key}",
                expected=None if limit is None else f"<= {limit:g}",
                observed=None if obs is None else round(obs, 3),
                passed=None if limit is None or obs is None else obs <= limit,
                tolerance="ms",
                judged=limit is not None,
                explanation=f"{label} p99 over {over}{adjusted}"
                + ("" if limit is not None else " (not judged: no SLO set)"),
            )
        )
    rate = errors / total if total else None
    why = first_error([x for r in measured for x in r.records])
    out.append(
        Check(
            name="slo.error_rate",
            expected=f"<= {slo.error_rate:g}",
            observed=rate,
            passed=None if rate is None else rate <= slo.error_rate,
            tolerance="fraction",
            explanation=f"failed requests over {over}" + (f"; {why}" if why else ""),
        )
    )
    return evidence.not_measured_without(out, "; ".join(gaps)) if gaps else out
