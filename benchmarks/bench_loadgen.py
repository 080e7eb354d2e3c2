"""loadgen vs `vllm bench serve`, side by side in one run, against the loopback stub.

Each client runs pinned to one core (taskset -c 0), the stub to the other (-c 1).
Two measurements per client and concurrency (1, 100, 1000 streams):

- throughput: the stub streams as fast as the client reads (no TTFT, no pacing);
  sustained SSE events (chunks) per second = events received / the client's own duration;
- timing error: the stub answers after a set TTFT (50 ms) and paces tokens (10 ms);
  the client-added TTFT error = measured TTFT - 50 ms (p50 and p99).

Usage: .venv/bin/python benchmarks/bench_loadgen.py [--quick] [--out benchmarks/results.json]
Needs vLLM installed (for `vllm bench serve`) and a tiny model for its tokenizer
(built on demand into models/tiny-gqa).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
STUB_TTFT_MS = 50.0
STUB_ITL_MS = 10.0


def pinned(core: int | str) -> list[str]:
    return ["taskset", "-c", str(core)] if shutil.which("taskset") and os.cpu_count() > 1 else []


class Stub:
    def __init__(self, ttft_ms: float, itl_ms: float):
        self.p = subprocess.Popen(
            [
                *pinned(1),
                PY,
                str(ROOT / "benchmarks" / "stub_server.py"),
                "--port",
                "0",
                "--ttft-ms",
                str(ttft_ms),
                "--itl-ms",
                str(itl_ms),
                "--max-seconds",
                "900",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.p.stdout.readline()
        self.url = f"http://127.0.0.1:{int(line.split()[-1])}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait(timeout=10)


def run_loadgen(url: str, conc: int, n: int, out_tokens: int, workers: int = 1, cores: str = "0") -> dict:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [
                *pinned(cores),
                PY,
                "-m",
                "loadgen",
                "--url",
                url,
                "--model",
                "stub",
                "--concurrency",
                str(conc),
                "--requests",
                str(n),
                "--prompt-tokens",
                "16",
                "--output-tokens",
                str(out_tokens),
                "--workers",
                str(workers),
                "--out",
                d,
                "--quiet",
            ],
            check=True,
            capture_output=True,
            timeout=900,
            cwd=ROOT,
        )
        s = json.loads((Path(d) / "summary.json").read_text())
    events = s["output_tokens"]  # the stub sends one event per token
    return {
        "events": events,
        "duration_s": s["elapsed_s"],
        "events_per_s": events / s["elapsed_s"],
        "ttft_p50_ms": s["ttft_ms"]["p50"],
        "ttft_p99_ms": s["ttft_ms"]["p99"],
        "failed": s["failed"],
    }


def run_vllm_bench(url: str, conc: int, n: int, out_tokens: int, tokenizer: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(
            [
                *pinned(0),
                PY,
                str(ROOT / "benchmarks" / "vllm_cli.py"),
                "bench",
                "serve",
                "--backend",
                "openai",
                "--base-url",
                url,
                "--endpoint",
                "/v1/completions",
                "--model",
                "stub",
                "--tokenizer",
                tokenizer,
                "--dataset-name",
                "random",
                "--random-input-len",
                "16",
                "--random-output-len",
                str(out_tokens),
                "--num-prompts",
                str(n),
                "--max-concurrency",
                str(conc),
                "--ignore-eos",
                "--num-warmups",
                "0",
                "--disable-tqdm",
                "--percentile-metrics",
                "ttft,itl",
                "--metric-percentiles",
                "50,99",
                "--save-result",
                "--result-dir",
                d,
                "--result-filename",
                "r.json",
            ],
            check=True,
            capture_output=True,
            timeout=900,
            cwd=ROOT,
        )
        r = json.loads((Path(d) / "r.json").read_text())
    events = r["total_output_tokens"]
    return {
        "events": events,
        "duration_s": r["duration"],
        "events_per_s": events / r["duration"],
        "ttft_p50_ms": r["p50_ttft_ms"],
        "ttft_p99_ms": r["p99_ttft_ms"],
        "failed": r["num_prompts"] - r["completed"] if "num_prompts" in r else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke check, not figures)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results.json"))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from validator.tinymodels import ensure_tiny_model

    tok = str(ensure_tiny_model("tiny-gqa", ROOT / "models" / "tiny-gqa"))
    scale = 0.1 if a.quick else 1.0
    # (concurrency, requests, output tokens): about 1M events each for throughput
    thr = [(1, 250, 4000), (100, 1000, 1000), (1000, 2000, 500)]
    tim = [(1, 50, 20), (100, 500, 20), (1000, 2000, 20)]
    results = {
        "machine": {"cpus": os.cpu_count(), "pinned": bool(pinned(0))},
        "when": time.strftime("%Y-%m-%d"),
        "throughput": [],
        "timing": [],
    }
    for conc, n, g in thr:
        n = max(int(n * scale), conc)
        with Stub(0, 0) as stub:
            row = {
                "concurrency": conc,
                "requests": n,
                "output_tokens": g,
                "loadgen": run_loadgen(stub.url, conc, n, g),
                "vllm_bench": run_vllm_bench(stub.url, conc, n, g, tok),
            }
        row["ratio"] = row["loadgen"]["events_per_s"] / row["vllm_bench"]["events_per_s"]
        results["throughput"].append(row)
        print(
            f"throughput c={conc}: loadgen {row['loadgen']['events_per_s']:,.0f}/s, "
            f"vllm bench {row['vllm_bench']['events_per_s']:,.0f}/s, ratio {row['ratio']:.2f}",
            flush=True,
        )
    for conc, n, g in tim:
        n = max(int(n * scale), conc)
        with Stub(STUB_TTFT_MS, STUB_ITL_MS) as stub:
            lg = run_loadgen(stub.url, conc, n, g)
            vb = run_vllm_bench(stub.url, conc, n, g, tok)
        row = {
            "concurrency": conc,
            "requests": n,
            "stub_ttft_ms": STUB_TTFT_MS,
            "stub_itl_ms": STUB_ITL_MS,
            "loadgen_ttft_error_ms": {"p50": lg["ttft_p50_ms"] - STUB_TTFT_MS, "p99": lg["ttft_p99_ms"] - STUB_TTFT_MS},
            "vllm_bench_ttft_error_ms": {
                "p50": vb["ttft_p50_ms"] - STUB_TTFT_MS,
                "p99": vb["ttft_p99_ms"] - STUB_TTFT_MS,
            },
        }
        results["timing"].append(row)
        print(
            f"ttft error c={conc}: loadgen p50 {row['loadgen_ttft_error_ms']['p50']:.2f} ms "
            f"p99 {row['loadgen_ttft_error_ms']['p99']:.2f} ms; vllm bench p50 "
            f"{row['vllm_bench_ttft_error_ms']['p50']:.2f} ms p99 {row['vllm_bench_ttft_error_ms']['p99']:.2f} ms",
            flush=True,
        )
    Path(a.out).write_text(json.dumps(results, indent=2))
    print(f"written {a.out}")


if __name__ == "__main__":
    main()
