"""How fast `validate` notices that vLLM died mid-run (issue 11: exit 3 within 2 s), and the
reverse: how fast vLLM is gone when `validate` itself is killed (issue 19).

Each try runs the demo profile (profiles/tiny-cpu.yaml, real vLLM on CPU), waits for a run to
start (cold, warm or probe, in turn), waits a random 0-1.5 s more, then SIGKILLs the API server
or the engine core (in turn) and measures the time from the kill to validate's exit. It also checks
the exit code and that no process of the server is left.

With --reverse it SIGKILLs `validate` instead, at the same moments, and measures the time from the
kill until the last process of the server (API server, engine core, worker, resource tracker:
every process seen under it since the start) is gone, polled every 5 ms.

    .venv/bin/python benchmarks/kill_detection.py [--tries 10] [--seed 0] [--reverse]

Prints one line per try and a summary; writes benchmarks/kill_detection.json (--reverse:
benchmarks/kill_reverse.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
VICTIMS = ("python", "VLLM::EngineCore")  # the API server's process name, the engine's
PHASES = ("run cold:", "run warm:", "run probe:")


def one_try(i: int, rng: random.Random, out_root: Path) -> dict:
    victim, phase = VICTIMS[i % 2], PHASES[i % 3]
    out = out_root / f"try{i}"
    p = subprocess.Popen(
        [sys.executable, "-m", "validator", "--profile", str(ROOT / "profiles" / "tiny-cpu.yaml"), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    seen = threading.Event()
    pid: list[int] = []

    def read():
        for line in p.stderr:
            lines.append(line)
            if "starting vLLM (pid" in line:
                pid.append(int(line.split("(pid ")[1].split(")")[0]))
            if phase in line:
                seen.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    if not seen.wait(300):
        p.kill()
        raise SystemExit(f"try {i}: validate never said {phase!r}: {''.join(lines)[-2000:]}")
    time.sleep(rng.uniform(0, 1.5))
    root = psutil.Process(pid[0])
    tree = [root, *root.children(recursive=True)]
    target = next(q for q in tree if q.name() == victim)
    target.kill()
    t_kill = time.monotonic()
    code = p.wait(timeout=120)
    took = time.monotonic() - t_kill
    t.join(timeout=10)
    left = [q.pid for q in tree if q.is_running() and q.status() != psutil.STATUS_ZOMBIE]
    return {
        "try": i,
        "victim": victim,
        "phase": phase.split()[1].rstrip(":"),
        "exit": code,
        "seconds": round(took, 3),
        "left": left,
    }


def reverse_try(i: int, rng: random.Random, out_root: Path) -> dict:
    """SIGKILL validate during a run; the time until no process of its server runs any more."""
    phase = PHASES[i % 3]
    out = out_root / f"try{i}"
    p = subprocess.Popen(
        [sys.executable, "-m", "validator", "--profile", str(ROOT / "profiles" / "tiny-cpu.yaml"), "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = threading.Event()
    pid: list[int] = []
    tree: dict[int, psutil.Process] = {}
    stop = threading.Event()

    def read():
        for line in p.stderr:
            if "starting vLLM (pid" in line:
                pid.append(int(line.split("(pid ")[1].split(")")[0]))
            if phase in line:
                seen.set()

    def track():  # every process under the server, as it appears (the engine starts its worker late)
        while not stop.wait(0.02):
            if pid:
                try:
                    root = psutil.Process(pid[0])
                    for q in [root, *root.children(recursive=True)]:
                        tree.setdefault(q.pid, q)
                except psutil.Error:
                    pass

    threads = [threading.Thread(target=read, daemon=True), threading.Thread(target=track, daemon=True)]
    for t in threads:
        t.start()
    if not seen.wait(300):
        p.kill()
        raise SystemExit(f"try {i}: validate never said {phase!r}")
    time.sleep(rng.uniform(0, 1.5))
    stop.set()
    threads[1].join()
    procs = list(tree.values())
    p.kill()
    t_kill = time.monotonic()

    def running() -> list[int]:
        out = []
        for q in procs:
            try:
                if q.is_running() and q.status() != psutil.STATUS_ZOMBIE:
                    out.append(q.pid)
            except psutil.Error:
                pass
        return out

    while running() and time.monotonic() - t_kill < 30:
        time.sleep(0.005)
    took = time.monotonic() - t_kill
    left = running()
    for q in procs:  # never leave a server behind, whatever was measured
        try:
            q.kill()
        except psutil.Error:
            pass
    p.wait(timeout=30)
    return {
        "try": i,
        "phase": phase.split()[1].rstrip(":"),
        "processes": len(procs),
        "seconds": round(took, 3),
        "left": left,
    }


def main_reverse(a, rng) -> int:
    results = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.tries):
            r = reverse_try(i, rng, Path(d))
            results.append(r)
            print(
                f"try {i}: validate killed in {r['phase']:<5} -> last of {r['processes']} server processes gone "
                f"after {r['seconds']:.3f} s, left {r['left']}",
                flush=True,
            )
    secs = [r["seconds"] for r in results]
    summary = {
        "tries": len(results),
        "left_any": sum(bool(r["left"]) for r in results),
        "median_s": statistics.median(secs),
        "max_s": max(secs),
        "min_s": min(secs),
        "results": results,
        "machine": f"{os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(
        f"validate killed: last server process gone median {summary['median_s']:.3f} s, max "
        f"{summary['max_s']:.3f} s; processes left in {summary['left_any']} tries"
    )
    (ROOT / "benchmarks" / "kill_reverse.json").write_text(json.dumps(summary, indent=1))
    return 0 if not summary["left_any"] else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reverse", action="store_true", help="kill validate, time until vLLM is gone")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    if a.reverse:
        return main_reverse(a, rng)
    results = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.tries):
            r = one_try(i, rng, Path(d))
            results.append(r)
            print(
                f"try {i}: kill {r['victim']:<16} in {r['phase']:<5} -> exit {r['exit']} after "
                f"{r['seconds']:.3f} s, left {r['left']}",
                flush=True,
            )
    secs = [r["seconds"] for r in results]
    summary = {
        "tries": len(results),
        "exit_3": sum(r["exit"] == 3 for r in results),
        "left_any": sum(bool(r["left"]) for r in results),
        "median_s": statistics.median(secs),
        "max_s": max(secs),
        "min_s": min(secs),
        "results": results,
        "machine": f"{os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
    }
    print(
        f"exit 3 in {summary['exit_3']}/{summary['tries']}; kill -> exit median {summary['median_s']:.3f} s, "
        f"max {summary['max_s']:.3f} s; processes left in {summary['left_any']} tries"
    )
    (ROOT / "benchmarks" / "kill_detection.json").write_text(json.dumps(summary, indent=1))
    return 0 if summary["exit_3"] == summary["tries"] and not summary["left_any"] else 1


if __name__ == "__main__":
    sys.exit(main())
