"""The judge's block pool replay (validator/judge/prefixsim.py), timed and sized per KV layout.

A dataset run's every request is replayed through vLLM 0.32's block pool to predict its cached
tokens; this measures what that costs the judge for large runs, side by side in one process:
one full-attention group, gpt-oss's (a window group beside a full one), a Gemma 2/3-style mix (3
window groups beside a full one), Gemma 4's (4 window groups at blocks of 64 beside a full one at
32), Llama 4's (3 chunked-local groups beside a full one) and Qwen3-Next's (3 Gated DeltaNet state
groups in align mode beside a full one: a prompt computed a checkpoint a step, its chunks placed
at the running requests' steps, replaychunks.py). The traffic: `--requests` prompts of 1,000
tokens in 20 families sharing a 600-token system prompt each (the rest its own), 100 output
tokens, `--in-flight` at once (a closed loop; each scheduled 10 ms after its send, as vLLM's
per-request TTFT says), through a pool that evicts. Wall time (best of `--repeat`) and the
replay's peak Python allocation (tracemalloc).

    .venv/bin/python benchmarks/replay.py [--requests 2000,10000] [--repeat 3] [--in-flight 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from validator.judge.arrivals import SimRequest  # noqa: E402
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup  # noqa: E402
from validator.judge.prefixsim import simulate  # noqa: E402

W = HeldGroup(window=128)
LAYOUTS = {
    "one full group": ONE_FULL_GROUP,
    "gpt-oss (window + full)": (W, HeldGroup()),
    "3 windows + full": (W, W, W, HeldGroup()),
    "Gemma 4 (4 windows at 64 + full at 32)": (HeldGroup(window=128, block=64),) * 4 + (HeldGroup(block=32),),
    "Llama 4 (3 chunked + full)": (HeldGroup(chunk=256),) * 3 + (HeldGroup(),),
    "Qwen3-Next (3 align-mode states + full)": (HeldGroup(state="align", peak=2),) * 3 + (HeldGroup(),),
}
PROMPT, SHARED, OUTPUT, FAMILIES = 1000, 600, 100, 20
POOL = 8192  # usable blocks: every layout keeps its families' prompts, the unshared tails are evicted


def traffic(n: int, in_flight: int) -> list[SimRequest]:
    out, t = [], [0.0] * in_flight  # each slot sends when its last request ended
    for i in range(n):
        fam = i % FAMILIES
        shared = [10 + (fam * 37 + k) % 400 for k in range(SHARED)]
        prompt = shared + [10 + (i * 2654435761 + k * 40503) % 2**32 % 400 for k in range(PROMPT - SHARED)]
        slot = i % in_flight
        sent = t[slot] + 0.0001 * slot  # the slots a little apart: no two sends at one time
        times = tuple(sent + 0.05 + 0.01 * k for k in range(OUTPUT))
        out.append(SimRequest(f"r{i}", prompt, OUTPUT, sent, times, lead=0.04))
        t[slot] = times[-1] + 0.001
    return out


def measure(reqs: list[SimRequest], groups, repeat: int, in_flight: int) -> dict:
    best = float("inf")
    budget = max(8192, in_flight * PROMPT)  # every prompt in one step: the layouts' own work only
    for _ in range(repeat):
        t0 = time.perf_counter()
        simulate(reqs, 32, POOL, in_flight, budget, groups)
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    preds = simulate(reqs, 32, POOL, in_flight, budget, groups)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": round(best, 3), "peak_mib": round(peak / 2**20, 1), "hit_tokens": sum(p.hits for p in preds)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", default="2000,10000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "replay.json"))
    a = ap.parse_args()
    results = []
    for n in (int(x) for x in a.requests.split(",")):
        reqs = traffic(n, a.in_flight)
        base = None
        for name, groups in LAYOUTS.items():
            r = {"requests": n, "in_flight": a.in_flight, "layout": name}
            r.update(measure(reqs, groups, a.repeat, a.in_flight))
            base = base or r["seconds"]
            r["vs_one_group"] = round(r["seconds"] / base, 2)
            r["us_per_request"] = round(1e6 * r["seconds"] / n, 1)
            results.append(r)
            print(json.dumps(r), flush=True)
    Path(a.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
