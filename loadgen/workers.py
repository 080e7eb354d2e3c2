"""Scale out: N loadgen processes (`--workers N`), each with its own event loop and a shard of the
schedule, and an exact merge of what they recorded.

Every worker builds the same workload (same seed, same salt) and sends items i, i+N, ... of it;
open loop, at their times in the one arrival schedule (so together they send exactly the arrival
process one process would), closed loop, with its share of the concurrency. Records are merged, not
statistics: each worker's times are shifted onto one clock origin (time.perf_counter() is the
machine's monotonic clock, shared by processes on one machine) and every percentile is computed
from all records at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from loadgen.records import RequestRecord, read_records


def share(total: int, i: int, k: int) -> int:
    """Worker i's part of `total` (the first total % k workers take one more)."""
    return total // k + (1 if i < total % k else 0)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        i, k = -1, 0
    if not 0 <= i < k:
        raise ValueError(f"--worker-shard: {text!r}; write I/N with 0 <= I < N")
    return i, k


START_AFTER_S = 3.0  # time every worker is given to start up before the one schedule begins


def worker_argv(argv: list[str], i: int, k: int, salt: str, out: Path, start: float) -> list[str]:
    # argparse keeps the last value of a repeated option: the overrides go at the end
    return [sys.executable, "-m", "loadgen", *argv, "--workers", "1", "--worker-shard", f"{i}/{k}",
            "--worker-start", repr(start), "--salt", salt, "--out", str(out), "--quiet"]


def run_processes(argv: list[str], k: int, salt: str, out: Path, timeout: float) -> list[int]:
    """Start k workers, wait for all (bounded), stop them all on Ctrl-C; their exit codes."""
    # one start instant on the machine's monotonic clock: the shards of one schedule start together
    start = time.perf_counter() + START_AFTER_S
    procs = [subprocess.Popen(worker_argv(argv, i, k, salt, out / f"worker-{i}", start), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for i in range(k)]
    try:
        return [p.wait(timeout=timeout) for p in procs]
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        for p in procs:
            p.send_signal(signal.SIGINT)  # each keeps its finished records
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        raise KeyboardInterrupt from None


def merge(dirs: list[Path]) -> tuple[list[RequestRecord], float, float, float, dict]:
    """Every worker's records on one clock: (records, started_at, ended_at, origin, clocks)."""
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    origin = min(s["clock_origin_perf_counter"] for s in summaries)
    records: list[RequestRecord] = []
    problems: list[str] = []
    for i, (d, s) in enumerate(zip(dirs, summaries)):
        shift = s["clock_origin_perf_counter"] - origin
        for r in read_records(d / "records.jsonl", problems):
            r.worker = i
            if r.sent is not None:
                r.sent += shift
            if r.scheduled is not None:
                r.scheduled += shift
            records.append(r)
    records.sort(key=lambda r: (r.sent is None, r.sent or 0.0))
    started = min(s["window"][0] for s in summaries)
    ended = max(s["window"][1] for s in summaries)
    # how far apart the workers' clocks were: wall clock minus monotonic at each start
    offsets = [s["window"][0] - s["clock_origin_perf_counter"] for s in summaries]
    clocks = {"workers": len(dirs), "wall_minus_monotonic_spread_s": max(offsets) - min(offsets),
              "unreadable_lines": problems}  # a worker's line that could not be read is said, not dropped
    return records, started, ended, origin, clocks
