"""loadgen with 1 and 2 worker processes, side by side in one run: SSE events/s and client-added lag.

Layouts (the stub pinned to core 1 throughout):
  1 worker on core 0 | 2 workers on core 0 (what splitting costs on one core) |
  2 workers on cores 0-1 (a second core, shared with the stub: all this 2-core machine has).

    .venv/bin/python benchmarks/workers.py [--streams 100,1000] [--lag-streams 500,1000]
                                           [--out benchmarks/workers.json]

Throughput: the stub streams as fast as the client reads (bench_loadgen.py's method); lag: the
stamped stub, per event (lag.py's method; a worker's records are merged on one clock first).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import lag  # noqa: E402
from benchmarks.bench_loadgen import Stub, run_loadgen  # noqa: E402

LAYOUTS = [("1 worker, core 0", 1, "0"), ("2 workers, core 0", 2, "0"), ("2 workers, cores 0-1", 2, "0,1")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="100,1000", help="throughput: concurrent streams")
    ap.add_argument("--lag-streams", default="500,1000", help="lag: concurrent streams")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "workers.json"))
    a = ap.parse_args()
    res = {"when": time.strftime("%Y-%m-%d"), "throughput": [], "lag": []}
    for conc in (int(x) for x in a.streams.split(",")):
        n, tokens = max(2 * conc, 1000), 500  # about 0.5-1M events a layout
        row = {"streams": conc, "requests": n, "output_tokens": tokens}
        for name, k, cores in LAYOUTS:
            with Stub(0, 0) as stub:
                row[name] = run_loadgen(stub.url, conc, n, tokens, workers=k, cores=cores)
            print(f"{conc:>5} streams, {name:<21} {row[name]['events_per_s']:>10,.0f} events/s", flush=True)
        res["throughput"].append(row)
    for conc in (int(x) for x in a.lag_streams.split(",")):
        n = 3 * conc
        row = {"streams": conc, "requests": n}
        for name, k, cores in LAYOUTS:
            with tempfile.TemporaryDirectory() as d:
                row[name] = lag.run_loadgen(conc, n, Path(d), workers=k, cores=cores)
            t, i = row[name]["ttft_lag_ms"], row[name]["itl_lag_ms"]
            print(
                f"{conc:>5} streams, {name:<21} TTFT lag p50/p99/max {t['p50']}/{t['p99']}/{t['max']} ms, "
                f"ITL lag {i['p50']}/{i['p99']}/{i['max']} ms",
                flush=True,
            )
        res["lag"].append(row)
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
