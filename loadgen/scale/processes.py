"""Scale out: N loadgen processes (`--workers N`), each with its own event loop and a shard of the
schedule (schedule/shards.py), merged exactly afterwards (results/merge.py).

Every worker builds the same workload (same seed, same salt) and sends items i, i+N, ... of it;
open loop, at their times in the one arrival schedule (so together they send exactly the arrival
process one process would), closed loop, with its share of the concurrency. Records are merged, not
statistics: each worker's times are shifted onto one clock origin (time.perf_counter() is the
machine's monotonic clock, shared by processes on one machine) and every percentile is computed
from all records at once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from loadgen import lifeline
from loadgen.safefile import make_dirs, open_append
from loadgen.scale import START_AFTER_S


def shard_args(argv: list[str], i: int, k: int, salt: str) -> list[str]:
    """The command line of shard i of k. argparse keeps the last value of a repeated option: the
    overrides go at the end (and --ray goes: a shard runs where it is)."""
    return [*argv, "--workers", "1", "--ray", "", "--worker-shard", f"{i}/{k}", "--salt", salt, "--quiet"]


def worker_argv(argv: list[str], i: int, k: int, salt: str, out: Path, start: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loadgen",
        *shard_args(argv, i, k, salt),
        "--worker-start",
        repr(start),
        "--out",
        str(out),
        "--lifeline",
    ]


def run_processes(argv: list[str], k: int, salt: str, out: Path, timeout: float) -> list[int]:
    """Start k workers, wait for all (bounded), stop them all on Ctrl-C; their exit codes."""
    # one start instant on the machine's monotonic clock: the shards of one schedule start together
    start = time.perf_counter() + START_AFTER_S
    procs = []
    for i in range(k):
        make_dirs(out / f"worker-{i}")
        with open_append(out / f"worker-{i}" / "stderr.txt") as err:  # a file: a pipe nobody reads can fill
            # each worker dies with this process, however it dies: the kernel's parent-death signal
            # (Linux) and a lifeline on its stdin (read by the worker; any POSIX system)
            procs.append(
                subprocess.Popen(
                    worker_argv(argv, i, k, salt, out / f"worker-{i}", start),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    preexec_fn=lifeline.die_with_parent_preexec(),
                )
            )
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
            if p.stdin is not None:
                p.stdin.close()


def last_error(out: Path, i: int) -> str:
    """The last line worker i wrote to its stderr.txt (processes and Ray actors alike)."""
    p = out / f"worker-{i}" / "stderr.txt"
    lines = [x for x in p.read_text(errors="replace").splitlines() if x.strip()] if p.exists() else []
    return lines[-1] if lines else ""
