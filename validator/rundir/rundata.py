"""One run as saved in the run directory, and reading every run back: the only contract
between observing and judging (`validate --report DIR` needs nothing else)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.records import RequestRecord, read_jsonl, read_records
from validator.rundir.freezes import read_freezes
from validator.rundir.samples import Sample, read_samples


@dataclass(kw_only=True)
class RunData:
    """One run as saved: what was sent, what came back, what the server counted. meta() is what
    runs/<run>/meta.json holds; records, prompts, samples and freezes have files of their own."""

    name: str
    cache: str
    purpose: str
    records: list[RequestRecord]
    prompts: dict[str, list[int]]
    started_at: float
    ended_at: float
    before: Sample | None
    after: Sample | None
    samples: list[Sample] = field(default_factory=list)
    isolation: str | None = None          # "reset" | "salt" (how the cache was made cold)
    settled: bool | None = None           # did the counters catch up with the client?
    interrupted: bool = False
    measured: bool = True
    workload: dict = field(default_factory=dict)
    freeze_points: list[dict] = field(default_factory=list)   # planned
    freeze_note: str | None = None                            # why planned freezes were not tried
    freezes: list = field(default_factory=list)               # FreezeRecord, as taken
    problems: list[str] = field(default_factory=list)         # what could not be read back
    scrape_errors: list[dict] = field(default_factory=list)   # failed /metrics scrapes in this run

    def meta(self) -> dict:
        return {"name": self.name, "cache": self.cache, "purpose": self.purpose, "started_at": self.started_at,
                "ended_at": self.ended_at, "isolation": self.isolation, "settled": self.settled,
                "interrupted": self.interrupted, "measured": self.measured, "workload": self.workload,
                "freeze_points": self.freeze_points, "freeze_note": self.freeze_note,
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None}


def load_runs(run_dir: Path) -> list[RunData]:
    """Saved runs, in the order they ran, for re-judging without a server."""
    out = []
    shared_problems: list[str] = []
    scrape_errors: list[dict] = []
    metrics = run_dir / "metrics.jsonl"
    all_samples = read_samples(metrics, shared_problems, scrape_errors) if metrics.exists() else []
    for meta_path in sorted((run_dir / "runs").glob("*/meta.json"), key=lambda p: json.loads(p.read_text())
                            ["started_at"]):
        m = json.loads(meta_path.read_text())
        d = meta_path.parent
        problems: list[str] = [] if out else shared_problems   # the shared file's, told once
        records = read_records(d / "records.jsonl", problems) if (d / "records.jsonl").exists() else []
        if m.get("ended_at") is None:  # cut short: the run ended with its last record
            m["ended_at"] = max([m["started_at"]] + [m["started_at"] + (r.sent or 0) + (r.done or r.e2e or 0)
                                                      for r in records])
        prompts = dict(read_jsonl(d / "workload.jsonl", lambda x: (x["id"], x["prompt"]), problems))
        # the light samples taken while this run was in flight (the next run starts right after)
        samples = [s for s in all_samples if not s.histograms and m["started_at"] <= (s.t_sent or s.t)
                   <= m["ended_at"]]
        freezes, freeze_problems = read_freezes(d / "freezes.jsonl")
        out.append(RunData(
            name=m["name"], cache=m["cache"], purpose=m["purpose"], records=records, prompts=prompts,
            started_at=m["started_at"], ended_at=m["ended_at"],
            before=Sample.from_json(m["before"]) if m.get("before") else None,
            after=Sample.from_json(m["after"]) if m.get("after") else None,
            samples=samples, isolation=m.get("isolation"), settled=m.get("settled"),
            interrupted=m.get("interrupted", False), measured=m.get("measured", True),
            workload=m.get("workload", {}), freeze_points=m.get("freeze_points") or [],
            freeze_note=m.get("freeze_note"), freezes=freezes, problems=problems + freeze_problems,
            scrape_errors=[e for e in scrape_errors if isinstance(e.get("t"), (int, float))
                           and m["started_at"] <= e["t"] <= m["ended_at"]]))
    return out
