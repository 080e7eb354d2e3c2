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

from loadgen import lifeline
from loadgen.safefile import make_dirs, open_append
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


def shard_config(cfg, i: int, k: int) -> None:
    """Worker i of k: its part of the schedule, the concurrency and the warm-up."""
    cfg.shard = (i, k)
    if cfg.concurrency is not None:
        cfg.concurrency = share(cfg.concurrency, i, k)
    else:
        cfg.max_in_flight = max(share(cfg.max_in_flight, i, k), 1)
    cfg.warmup = len(range(i, cfg.warmup, k))


START_AFTER_S = 3.0  # time every worker is given to start up before the one schedule begins


def shard_args(argv: list[str], i: int, k: int, salt: str) -> list[str]:
    """The command line of shard i of k. argparse keeps the last value of a repeated option: the
    overrides go at the end (and --ray goes: a shard runs where it is)."""
    return [*argv, "--workers", "1", "--ray", "", "--worker-shard", f"{i}/{k}", "--salt", salt, "--quiet"]


def worker_argv(argv: list[str], i: int, k: int, salt: str, out: Path, start: float) -> list[str]:
    return [sys.executable, "-m", "loadgen", *shard_args(argv, i, k, salt), "--worker-start", repr(start),
            "--out", str(out), "--lifeline"]


def run_processes(argv: list[str], k: int, salt: str, out: Path, timeout: float) -> list[int]:
    """Start k workers, wait for all (bounded), stop them all on Ctrl-C; their exit codes."""
    # one start instant on the machine's monotonic clock: the shards of one schedule start together
    start = time.perf_counter() + START_AFTER_S
    procs = []
    for i in range(k):
        make_dirs(out / f"worker-{i}")
        with open_append(out / f"worker-{i}" / "stderr.txt") as err:   # a file: a pipe nobody reads can fill
            # each worker dies with this process, however it dies: the kernel's parent-death signal
            # (Linux) and a lifeline on its stdin (read by the worker; any POSIX system)
            procs.append(subprocess.Popen(worker_argv(argv, i, k, salt, out / f"worker-{i}", start),
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                          preexec_fn=lifeline.die_with_parent_preexec()))
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
    finally:
        for p in procs:
            p.stdin.close()


def last_error(out: Path, i: int) -> str:
    """The last line worker i wrote to its stderr.txt (processes and Ray actors alike)."""
    p = out / f"worker-{i}" / "stderr.txt"
    lines = [x for x in p.read_text(errors="replace").splitlines() if x.strip()] if p.exists() else []
    return lines[-1] if lines else ""


def exit_code(summary: dict) -> int:
    """loadgen's exit code for a finished run: 3 none succeeded, 1 some failed, 0 all done."""
    if summary["ok"] == 0 and summary["requests"] > 0:
        return 3
    return 1 if summary["failed"] else 0


def merge(dirs: list[Path], offsets: list[float] | None = None
          ) -> tuple[list[RequestRecord], float, float, float, dict]:
    """Every worker's records on one clock: (records, started_at, ended_at, origin, clocks).

    Without offsets the workers share this machine's monotonic clock. With offsets (Ray: worker i's
    wall clock minus the driver's) each worker's start is placed by its wall clock, corrected."""
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    if offsets is None:
        starts = [s["clock_origin_perf_counter"] for s in summaries]
        origin = min(starts)
    else:
        starts = [s["window"][0] - off for s, off in zip(summaries, offsets)]   # driver's wall clock
        origin = min(starts) - (time.time() - time.perf_counter())             # as the driver's perf_counter
    first = min(starts)
    records: list[RequestRecord] = []
    problems: list[str] = []
    for i, (d, s) in enumerate(zip(dirs, summaries)):
        shift = starts[i] - first
        for r in read_records(d / "records.jsonl", problems):
            r.worker = i
            if r.sent is not None:
                r.sent += shift
            if r.scheduled is not None:
                r.scheduled += shift
            records.append(r)
    records.sort(key=lambda r: (r.sent is None, r.sent or 0.0))
    wall_off = [0.0] * len(dirs) if offsets is None else offsets   # the window on the driver's wall clock
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
