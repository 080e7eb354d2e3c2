"""One run as saved in the run directory, and reading every run back: the only contract
between observing and judging (`validate --report DIR` needs nothing else).

What a directory must hold is decided by the schedule saved in plan.json before the first run
(rundir/schedule.py), not by what the directory happens to hold: a planned run with no directory,
a missing file or a missing field is recorded as what is missing (its checks cannot pass), a line
that cannot be read as a problem (a failed check), and a note in a run's meta.json that
contradicts the plan or the profile as a contradiction (a failed check). Reading never raises on
a file's content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.results.records import RequestRecord, read_jsonl, read_records
from validator.rundir.freezes import FreezePoint, FreezeRecord, read_freezes
from validator.rundir.samples import MEMORY, Sample, read_samples
from validator.rundir.schedule import PlannedRun, RunKind, Schedule
from validator.rundir.workload import read_audit_text, workload_item

MAX_FILE_BYTES = 1 << 30  # a run file larger than this is not one kvgate wrote
FREEZE_STATUSES = ("off", "unavailable")


@dataclass(kw_only=True)
class RunData:
    """One run as saved: what was sent, what came back, what the server counted. meta() is what
    runs/<run>/meta.json holds; records, prompts, samples and freezes have files of their own."""

    name: str
    kind: RunKind
    purpose: str
    records: list[RequestRecord]
    prompts: dict[str, Any]  # as sent: token ids, text, or chat messages
    started_at: float
    ended_at: float
    before: Sample | None
    after: Sample | None
    samples: list[Sample] = field(default_factory=list)
    isolation: str | None = None  # "reset" | "salt" (how the cache was made cold)
    settled: bool | None = None  # did the counters catch up with the client?
    interrupted: bool = False
    measured: bool = True
    workload: dict = field(default_factory=dict)
    freeze_points: list[dict] = field(default_factory=list)  # planned
    freeze_note: str | None = None  # why planned freezes were not tried
    freeze_status: str | None = None  # None: tried; "off": observe.freezes false; "unavailable": no /pause
    freezes: list[FreezeRecord] = field(default_factory=list)  # as taken
    problems: list[str] = field(default_factory=list)  # what could not be read back
    scrape_errors: list[dict] = field(default_factory=list)  # failed /metrics scrapes in this run
    # from the run directory, when read back (not saved in meta.json)
    planned: PlannedRun | None = None  # what plan.json's schedule says this run is (None: an older dir)
    outputs: dict[str, int] = field(default_factory=dict)  # asked output tokens per id (workload.jsonl)
    missing: dict[str, str] = field(default_factory=dict)  # file (or "run") -> why it is not there: cannot pass
    contradictions: list[str] = field(default_factory=list)  # notes that contradict plan or profile: FAIL
    snapshots: list[Sample] = field(default_factory=list)  # metrics.jsonl's histogram scrapes in the window
    token_ids: dict[str, list[int]] = field(default_factory=dict)  # text and chat prompts: the server's ids
    audit_text: dict[str, dict] = field(default_factory=dict)  # audit_text.json: text where prompts differ (shown)
    server_started: bool | None = None  # plan.json: kvgate launched the server (None: an older directory)

    @property
    def peak_memory_gib(self) -> float | None:
        """The largest server memory in the run's samples (GPU used, or engine RSS); None: not sampled."""
        got = [v for s in self.samples if isinstance(v := s.values.get(MEMORY), (int, float))]
        return round(max(got) / 2**30, 3) if got else None

    @property
    def served_ids(self) -> dict[str, list[int]]:
        """Every prompt as the token ids the server computed for it (where they are known)."""
        ids = {k: v for k, v in self.prompts.items() if isinstance(v, list) and (not v or isinstance(v[0], int))}
        return {**ids, **self.token_ids}

    @property
    def cache(self) -> str:
        return self.kind.value

    def meta(self) -> dict:
        return {
            "name": self.name,
            "cache": self.cache,
            "purpose": self.purpose,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "isolation": self.isolation,
            "settled": self.settled,
            "interrupted": self.interrupted,
            "measured": self.measured,
            "workload": self.workload,
            "freeze_points": self.freeze_points,
            "freeze_note": self.freeze_note,
            "freeze_status": self.freeze_status,
            "before": self.before.to_json() if self.before else None,
            "after": self.after.to_json() if self.after else None,
        }


def read_json(path: Path, problems: list[str], missing: dict[str, str], label: str):
    """A JSON object from a regular file, or None with the reason in `missing` (absent) or
    `problems` (there, but not readable)."""
    try:
        if not path.is_file():
            missing[path.name] = f"{label} is missing"
            return None
        if path.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{label} is larger than {MAX_FILE_BYTES >> 20} MiB")
            return None
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        problems.append(f"{label}: {type(e).__name__}")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{label} does not hold a JSON object")
        return None
    return obj


def _sample(d) -> Sample | None:
    try:
        return Sample.from_json(d) if isinstance(d, dict) else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _number(m: dict, key: str) -> float | None:
    v = m.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load_runs(run_dir: Path, schedule: Schedule | None = None, freezes_on: bool = True) -> list[RunData]:
    """The runs, in the order they ran. With a schedule: every planned run, each with what is
    missing or contradicts the plan said; without (a directory written before schedules): the runs
    found, by their meta.json (`freezes_on`: the profile's observe.freezes, which the schedule
    would otherwise say)."""
    shared_problems: list[str] = []
    scrape_errors: list[dict] = []
    metrics = run_dir / "metrics.jsonl"
    metrics_missing = not metrics.is_file()
    all_samples = [] if metrics_missing else read_samples(metrics, shared_problems, scrape_errors)
    if schedule is None:
        found = []
        for meta_path in (run_dir / "runs").glob("*/meta.json"):
            m = read_json(meta_path, [], {}, "meta.json")
            if (
                m is not None
                and _number(m, "started_at") is not None
                and isinstance(m.get("cache"), str)
                and m["cache"] in RunKind._value2member_map_
            ):
                found.append((m["started_at"], meta_path.parent.name))
        plan: list[tuple[str, PlannedRun | None]] = [(name, None) for _, name in sorted(found)]
    else:
        plan = [(r.name, r) for r in schedule.runs]
    out = []
    for i, (name, planned) in enumerate(plan):
        run = _load_one(run_dir / "runs" / name, name, planned, schedule, all_samples, scrape_errors, freezes_on)
        if i == 0:
            run.problems[:0] = shared_problems  # the shared file's, told once
        if metrics_missing:
            run.missing["metrics.jsonl"] = "metrics.jsonl is missing"
        run.server_started = schedule.server_started if schedule else None
        out.append(run)
    return out


def _load_one(
    d: Path,
    name: str,
    planned: PlannedRun | None,
    schedule: Schedule | None,
    all_samples: list[Sample],
    scrape_errors: list[dict],
    freezes_on: bool,
) -> RunData:
    problems: list[str] = []
    missing: dict[str, str] = {}
    kind = planned.kind if planned else RunKind.COLD
    if not d.is_dir():
        return RunData(
            name=name,
            kind=kind,
            purpose="",
            records=[],
            prompts={},
            started_at=0.0,
            ended_at=0.0,
            before=None,
            after=None,
            measured=planned.measured if planned else True,
            freeze_points=[p.to_json() for p in planned.freeze_points] if planned else [],
            planned=planned,
            missing={"run": f"run {name} never started"},
        )
    m = read_json(d / "meta.json", problems, missing, f"runs/{name}/meta.json") or {}
    if not m and "meta.json" not in missing:  # there, but not a readable object
        missing["meta.json"] = f"runs/{name}/meta.json cannot be read"
    if planned is None:
        kind = RunKind(m["cache"])
    records = read_records(d / "records.jsonl", problems) if (d / "records.jsonl").is_file() else []
    if not (d / "records.jsonl").is_file():
        missing["records.jsonl"] = f"runs/{name}/records.jsonl is missing"
    prompts: dict[str, Any] = {}
    outputs: dict[str, int] = {}
    token_ids: dict[str, list[int]] = {}
    if (d / "workload.jsonl").is_file():
        for item in read_jsonl(d / "workload.jsonl", workload_item, problems):
            if item[0] in prompts:
                problems.append(f"runs/{name}/workload.jsonl: request {item[0]} twice")
            prompts[item[0]], outputs[item[0]] = item[1], item[2]
            if item[3] is not None:
                token_ids[item[0]] = item[3]
    else:
        missing["workload.jsonl"] = f"runs/{name}/workload.jsonl is missing"
    started, ended = _number(m, "started_at"), _number(m, "ended_at")
    if m and started is None:
        missing["meta.json"] = f"runs/{name}/meta.json has no started_at"
    if started is not None and ended is None:  # cut short: the run ended with its last record
        ended = max([started] + [started + (r.sent or 0) + (r.done or r.e2e or 0) for r in records])
    started, ended = started or 0.0, ended or 0.0
    points = [p.to_json() for p in planned.freeze_points] if planned else (m.get("freeze_points") or [])
    wants_freezes = bool(points) and (schedule.freezes if schedule else True)
    freezes, freeze_problems = read_freezes(d / "freezes.jsonl") if (d / "freezes.jsonl").is_file() else ([], [])
    freeze_note = m.get("freeze_note") if isinstance(m.get("freeze_note"), str) else None
    status = m.get("freeze_status") if m.get("freeze_status") in FREEZE_STATUSES else None
    if schedule is None and freeze_note and "freeze_status" not in m:  # written before freeze_status
        status = "unavailable" if freezes_on else "off"
    if schedule is not None and not schedule.freezes and points:
        status = "off"  # the profile's word, whatever the run noted
    run = RunData(
        name=name,
        kind=kind,
        purpose=str(m.get("purpose") or ""),
        records=records,
        prompts=prompts,
        started_at=started,
        ended_at=ended,
        before=_sample(m.get("before")),
        after=_sample(m.get("after")),
        samples=[s for s in all_samples if not s.histograms and started <= (s.t_sent or s.t) <= ended],
        isolation=m.get("isolation") if m.get("isolation") in ("reset", "salt") else None,
        settled=m.get("settled") if isinstance(m.get("settled"), bool) else None,
        interrupted=bool(m.get("interrupted", False)) if m else True,
        measured=planned.measured if planned else bool(m.get("measured", True)),
        workload=dict(m["workload"]) if isinstance(m.get("workload"), dict) else {},
        freeze_points=points,
        freeze_note=freeze_note,
        freeze_status=status,
        freezes=freezes if wants_freezes else [],
        problems=problems + freeze_problems,
        planned=planned,
        outputs=outputs,
        missing=missing,
        scrape_errors=[e for e in scrape_errors if isinstance(e.get("t"), (int, float)) and started <= e["t"] <= ended],
        token_ids=token_ids,
        audit_text=read_audit_text(d / "audit_text.json"),
    )
    run.snapshots = _snapshots(all_samples, run)
    if planned is not None and m:
        run.contradictions = _contradictions(m, planned, schedule)
    return run


def _snapshots(all_samples: list[Sample], run: RunData) -> list[Sample]:
    """metrics.jsonl's histogram scrapes (the run's before and after snapshots among them) from the
    meta's before to its after: the second source of every counter."""
    lo = run.before.t if run.before else run.started_at
    hi = run.after.t if run.after else run.ended_at
    return [s for s in all_samples if lo <= s.t <= hi]


def _contradictions(m: dict, planned: PlannedRun, schedule: Schedule | None) -> list[str]:
    """What meta.json says against what plan.json and profile.json say."""
    out = []
    if m.get("name") != planned.name:
        out.append(f"meta.json names the run {str(m.get('name'))[:40]!r}, plan.json {planned.name!r}")
    if m.get("cache") != planned.kind.value:
        out.append(f"meta.json says cache {str(m.get('cache'))[:20]!r}, plan.json {planned.kind.value!r}")
    if bool(m.get("measured", True)) != planned.measured:
        out.append(f"meta.json says measured {m.get('measured')!r}, plan.json {planned.measured!r}")
    if schedule is not None and schedule.freezes and planned.freeze_points:
        saved, status = m.get("freeze_points"), m.get("freeze_status")
        if status == "off":
            out.append("meta.json says freezes were turned off; plan.json and profile.json have them on")
        elif status is None and saved != [p.to_json() for p in planned.freeze_points]:
            out.append(
                f"meta.json lists {len(saved) if isinstance(saved, list) else 'no'} freeze points, "
                f"plan.json {len(planned.freeze_points)}"
            )
    return out


def planned_points(run: RunData) -> list[FreezePoint]:
    return list(run.planned.freeze_points) if run.planned else [FreezePoint(**p) for p in run.freeze_points]
