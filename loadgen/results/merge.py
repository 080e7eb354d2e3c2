"""Every shard's records on one clock: the merge of `--workers` processes and `--ray` actors.
Records are merged, not statistics: each worker's times are shifted onto one clock origin
(time.perf_counter() is the machine's monotonic clock, shared by processes on one machine; across
machines, one wall-clock offset per worker measured by round trip) and every percentile is then
computed from all records at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

from loadgen.results.records import RequestRecord, read_records


def merge(
    dirs: list[Path], offsets: list[float] | None = None
) -> tuple[list[RequestRecord], float, float, float, dict]:
    """Every worker's records on one clock: (records, started_at, ended_at, origin, clocks).

    Without offsets the workers share this machine's monotonic clock. With offsets (Ray: worker i's
    wall clock minus the driver's) each worker's start is placed by its wall clock, corrected."""
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    if offsets is None:
        starts = [s["clock_origin_perf_counter"] for s in summaries]
        origin = min(starts)
    else:
        starts = [s["window"][0] - off for s, off in zip(summaries, offsets)]  # driver's wall clock
        origin = min(starts) - (time.time() - time.perf_counter())  # as the driver's perf_counter
    first = min(starts)
    records: list[RequestRecord] = []
    problems: list[str] = []
    for i, d in enumerate(dirs):
        shift = starts[i] - first
        for r in read_records(d / "records.jsonl", problems):
            r.worker = i
            if r.sent is not None:
                r.sent += shift
            if r.scheduled is not None:
                r.scheduled += shift
            records.append(r)
    records.sort(key=lambda r: (r.sent is None, r.sent or 0.0))
    wall_off = [0.0] * len(dirs) if offsets is None else offsets  # the window on the driver's wall clock
    started = min(s["window"][0] - off for s, off in zip(summaries, wall_off))
    ended = max(s["window"][1] - off for s, off in zip(summaries, wall_off))
    clocks: dict = {"workers": len(dirs), "unreadable_lines": problems}  # an unreadable line is said, not dropped
    if offsets is None:
        # how far apart the workers' clocks were: wall clock minus monotonic at each start
        wm = [s["window"][0] - s["clock_origin_perf_counter"] for s in summaries]
        clocks.update(basis="monotonic (one machine)", wall_minus_monotonic_spread_s=max(wm) - min(wm))
    else:
        clocks.update(offset_spread_s=max(offsets) - min(offsets))
    return records, started, ended, origin, clocks
