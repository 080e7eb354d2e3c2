"""What a session will do, saved in plan.json before the first run (`schedule`): the runs it will
make, in order, with their request counts and freeze points, whether freeze-frames are on, and
whether the server was started here. The judge decides from this what a run directory must hold,
never from the runs' own notes (meta.json), which are cross-checked against it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from validator.rundir.freezes import FreezePoint

SCHEDULE_VERSION = 1
RUN_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")  # one safe path component: runs/<name>/


class RunKind(str, Enum):
    """What a run is for (its `cache` in the run directory and the report)."""

    COLD = "cold"  # near the limits, prefix cache reset: nothing may hit
    PRIME = "prime"  # puts the warm run's prefixes in the cache; not judged
    WARM = "warm"  # over primed prefixes: hits as the block model predicts
    PROBE = "probe"  # more full-length requests than max_num_seqs: the excess waits
    LATENCY = "latency"  # the cold run's shape from loadgen processes, no freezes: the SLOs
    DATASET = "dataset"  # the user's traffic (a dataset or a trace), cache reset: audited request by request
    SWEEP = "sweep"  # one step of the capacity sweep: a concurrency, past the KV limit or not

    @property
    def judges_preemptions(self) -> bool:
        return self in (RunKind.COLD, RunKind.WARM, RunKind.LATENCY, RunKind.DATASET)

    @property
    def judges_latency(self) -> bool:
        """Client latency against the server's histograms (the probe's waits are its point)."""
        return self in (RunKind.COLD, RunKind.WARM, RunKind.LATENCY, RunKind.DATASET)


@dataclass(frozen=True, kw_only=True)
class PlannedRun:
    name: str
    kind: RunKind
    requests: int
    concurrency: int
    reset_cache: bool = False
    measured: bool = True  # a prime run feeds the cache; its figures are not judged
    workers: int = 1  # above 1: sent by that many loadgen processes
    freeze_points: tuple[FreezePoint, ...] = ()

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "requests": self.requests,
            "concurrency": self.concurrency,
            "reset_cache": self.reset_cache,
            "measured": self.measured,
            "workers": self.workers,
            "freeze_points": [p.to_json() for p in self.freeze_points],
        }

    @classmethod
    def from_json(cls, d: dict) -> PlannedRun:
        if not isinstance(d.get("name"), str) or not RUN_NAME.fullmatch(d["name"]):
            raise ValueError(f"run name {str(d.get('name'))[:40]!r} is not one kvgate writes")
        return cls(
            name=d["name"],
            kind=RunKind(d["kind"]),
            requests=int(d["requests"]),
            concurrency=int(d["concurrency"]),
            reset_cache=bool(d.get("reset_cache", False)),
            measured=bool(d.get("measured", True)),
            workers=int(d.get("workers", 1)),
            freeze_points=tuple(FreezePoint(**p) for p in d.get("freeze_points") or []),
        )


@dataclass(frozen=True, kw_only=True)
class Schedule:
    server_started: bool  # False: a server at --url (no log, no process to watch)
    freezes: bool  # observe.freezes: freeze-frames wanted
    runs: tuple[PlannedRun, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "version": SCHEDULE_VERSION,
            "server": "started" if self.server_started else "url",
            "freezes": self.freezes,
            "runs": [r.to_json() for r in self.runs],
        }

    @classmethod
    def from_json(cls, d: dict) -> Schedule:
        """Raises ValueError (or KeyError, TypeError) on a schedule it cannot read."""
        if d.get("version") != SCHEDULE_VERSION:
            raise ValueError(f"schedule version {d.get('version')!r}, this kvgate reads {SCHEDULE_VERSION}")
        runs = tuple(PlannedRun.from_json(r) for r in d["runs"])
        if len({r.name for r in runs}) != len(runs):
            raise ValueError("two planned runs share a name")
        return cls(server_started=d["server"] == "started", freezes=bool(d["freezes"]), runs=runs)
