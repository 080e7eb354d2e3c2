"""A quality A/B's files read back for judging (quality/ in the run directory): the prompts, the
three generation runs, and the candidate launch's plan and start-up. Anything missing or
unreadable is said (the checks it feeds are then not measured), never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from validator.judge.quality import Generation
from validator.plan.record import PlanRecord
from validator.rundir.rundata import read_json

RUNS = ("reference", "control", "candidate")


@dataclass(kw_only=True)
class QualitySaved:
    prompts: list[dict]
    runs: dict[str, list[Generation]]  # by run name; a run missing is absent
    candidate_record: PlanRecord | None
    candidate_startup: dict
    problems: list[str] = field(default_factory=list)  # what could not be read, said in the checks

    def isolation(self, name: str) -> str | None:
        return self._meta.get(name, {}).get("isolation")

    _meta: dict[str, dict] = field(default_factory=dict)


def read_quality(run_dir: Path) -> QualitySaved | None:
    d = run_dir / "quality"
    if not d.is_dir():
        return None
    problems: list[str] = []
    missing: dict[str, str] = {}
    prompts = read_json(d / "prompts.json", problems, missing, "quality/prompts.json") or {}
    runs: dict[str, list[Generation]] = {}
    meta: dict[str, dict] = {}
    for name in RUNS:
        raw = read_json(d / f"{name}.json", problems, missing, f"quality/{name}.json")
        if raw is None:
            continue
        try:
            runs[name] = [Generation.from_json(r) for r in raw.get("records") or []]
            meta[name] = {k: v for k, v in raw.items() if k != "records"}
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"quality/{name}.json: {type(e).__name__}")
    rec = read_json(d / "candidate-plan.json", problems, missing, "quality/candidate-plan.json")
    record = None
    if rec is not None:
        try:
            record = PlanRecord.from_json(rec)
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"quality/candidate-plan.json: {type(e).__name__}")
    startup = read_json(d / "candidate-startup.json", problems, missing, "quality/candidate-startup.json") or {}
    entries = prompts.get("prompts")
    return QualitySaved(
        prompts=[p for p in entries if isinstance(p, dict) and "id" in p] if isinstance(entries, list) else [],
        runs=runs,
        candidate_record=record,
        candidate_startup=startup,
        problems=problems + list(missing.values()),
        _meta=meta,
    )
