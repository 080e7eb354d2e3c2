"""The quality A/B's checks from what the run directory holds (pure): the candidate launch's
start-up against its own plan, the determinism control, and the A/B against the thresholds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from validator.judge.check import Check
from validator.judge.quality import figures, quality_checks
from validator.judge.startup import cross_check
from validator.rundir.quality import QualitySaved
from validator.rundir.startup import StartupFacts


def judge_quality(saved: QualitySaved, qs: Any) -> tuple[list[Check], dict[str, Any]]:
    checks: list[Check] = []
    facts = saved.candidate_startup.get("facts")
    if saved.candidate_record is not None:
        cand = cross_check(
            saved.candidate_record,
            StartupFacts.from_json(facts) if isinstance(facts, dict) else StartupFacts(),
            started_here=True,
            config_required=True,  # the A/B's launches run in dev mode (the cache reset between them)
        )
        why = None if isinstance(facts, dict) else "the candidate launch recorded no start-up facts"
        checks += [
            replace(
                c,
                name=c.name.replace("startup.", "quality.candidate.startup.", 1),
                explanation=f"{why}: {c.explanation}" if why and c.passed is None else c.explanation,
            )
            for c in cand
        ]
    else:
        checks.append(
            Check(
                name="quality.candidate.startup",
                expected="the candidate's plan",
                observed=None,
                passed=None,
                explanation="quality/candidate-plan.json cannot be read",
            )
        )
    missing_runs = [n for n in ("reference", "control", "candidate") if n not in saved.runs]
    f = figures(
        saved.prompts, saved.runs.get("reference", []), saved.runs.get("control", []), saved.runs.get("candidate", [])
    )
    qc = quality_checks(f, qs, qs.candidate_kv_cache_dtype or "the candidate")
    if missing_runs or saved.problems:
        said = "; ".join(saved.problems) or f"runs missing: {', '.join(missing_runs)}"
        qc = [replace(c, explanation=f"{said}: {c.explanation}") if c.passed is None else c for c in qc]
    checks += qc
    out = f.to_json()
    out["candidate_kv_cache_dtype"] = qs.candidate_kv_cache_dtype
    out["isolation"] = {n: saved.isolation(n) for n in ("reference", "control", "candidate")}
    out["problems"] = saved.problems
    return checks, out
