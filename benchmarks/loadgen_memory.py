"""loadgen's peak memory (RSS) for a large run against the loopback stub, and how fast it refuses
runs that would not fit its memory budget (issue 19).

    .venv/bin/python benchmarks/loadgen_memory.py [--requests 100000] [--source DIR ...]

Each --source is a kvgate source tree whose loadgen is run (default: this one), so an older
commit can be measured side by side with this one in the same run (`git worktree add /tmp/old
COMMIT`, then `--source /tmp/old --source .`); the refusals run on the last source only (an older
loadgen may really try to build them). The stub runs on CPU 1 and loadgen on CPU 0. Peak
RSS is the kernel's (wait4's ru_maxrss of the loadgen process). Writes benchmarks/loadgen_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# refused before anything is built: each must exit 2 within a second, small
REFUSALS = [
    ["--turns", "1000000"],
    ["--prompt-tokens", "100000000"],
    ["--requests", "1000000", "--turns", "1000"],
    ["--requests", "1000000", "--output-tokens", "100000"],
    ["--requests", "1000000", "--prompt-tokens", "8192"],
    ["--requests", "100000", "--prefix-groups", "100000", "--prefix-tokens", "100000"],
]


def run(source: Path, args: list[str], url: str, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(source)}
    t0 = time.monotonic()
    p = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-m",
            "loadgen",
            "--url",
            url,
            "--model",
            "m",
            "--out",
            str(out),
            "--quiet",
            *args,
        ],
        cwd=source,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(p.pid, 0)
    took = time.monotonic() - t0
    err = p.stderr.read()
    return {
        "args": args,
        "exit": os.waitstatus_to_exitcode(status),
        "seconds": round(took, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "stderr": err.strip().splitlines()[-1:] if err else [],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--source", action="append", type=Path)
    ap.add_argument("--no-refusals", action="store_true", help="the large run only")
    a = ap.parse_args()
    sources = [s.resolve() for s in (a.source or [ROOT])]
    stub = subprocess.Popen(
        [
            "taskset",
            "-c",
            "1",
            sys.executable,
            str(ROOT / "benchmarks" / "stub_server.py"),
            "--port",
            "0",
            "--max-seconds",
            "3600",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{int(stub.stdout.readline().split()[-1])}"
    big = ["--requests", str(a.requests), "--concurrency", "64", "--prompt-tokens", "256", "--output-tokens", "32"]
    results = []
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            for i, source in enumerate(sources):
                r = run(source, big, url, Path(d) / f"big{i}")
                r["source"] = str(source)
                results.append(r)
                print(
                    f"{source}: {a.requests:,} requests -> exit {r['exit']}, {r['seconds']} s, peak RSS "
                    f"{r['peak_rss_mib']} MiB",
                    flush=True,
                )
                # the refusals only for the last source: an older loadgen may really build these
                for args in REFUSALS if i == len(sources) - 1 and not a.no_refusals else []:
                    q = run(source, args, url, Path(d) / "refused")
                    q["source"] = str(source)
                    results.append(q)
                    print(
                        f"{source}: {' '.join(args)} -> exit {q['exit']}, {q['seconds']} s, peak RSS "
                        f"{q['peak_rss_mib']} MiB {q['stderr']}",
                        flush=True,
                    )
    finally:
        stub.terminate()
        stub.wait(timeout=10)
    (ROOT / "benchmarks" / "loadgen_memory.json").write_text(
        json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} CPUs", "results": results}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
