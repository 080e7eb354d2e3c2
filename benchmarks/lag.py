"""Client-added latency, measured per event: loadgen and `vllm bench serve` side by side.

The stub (benchmarks/stub_server.py --stamp-log) answers after a TTFT of 50 ms and paces one token
every 20 ms; it logs when it handed each event to the kernel (time.perf_counter(), which on Linux
is the machine-wide monotonic clock) and writes its request id into the first token's text. Each
client's records give when each event arrived, on the same clock, so the lag a client adds is
measured event by event (arrival - send), for the first token (TTFT) and the others (ITL), never
inferred from distributions. Client pinned to core 0, stub to core 1.

    .venv/bin/python benchmarks/lag.py [--streams 1,100,500,1000] [--out benchmarks/lag.json]

loadgen's records are paired by the X-Kvgate-Request-Id header the stub logs; `vllm bench serve`'s
(--save-detailed: start_times, ttfts, itls, generated_texts) by the request id in the first token.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_loadgen import PY, pinned  # noqa: E402
from benchmarks.both_ends import bench, dist  # noqa: E402

TTFT_MS, ITL_MS, TOKENS = 50.0, 20.0, 20


def stub(stamp_log: Path):
    p = subprocess.Popen(
        [
            *pinned(1),
            PY,
            str(ROOT / "benchmarks" / "stub_server.py"),
            "--port",
            "0",
            "--ttft-ms",
            str(TTFT_MS),
            "--itl-ms",
            str(ITL_MS),
            "--stamp-log",
            str(stamp_log),
            "--max-seconds",
            "900",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    return p, f"http://127.0.0.1:{int(p.stdout.readline().split()[-1])}"


def stop(p) -> None:
    p.terminate()
    p.wait(timeout=30)


def stamps(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def lags(pairs: list[tuple[list[float], list[float]]]) -> dict:
    """pairs of (send times, arrival times) per request -> client-added TTFT and ITL lag in ms."""
    first, rest = [], []
    for sent, got in pairs:
        n = min(len(sent), len(got))
        if n == 0:
            continue
        first.append((got[0] - sent[0]) * 1e3)
        rest += [(g - s) * 1e3 for s, g in zip(sent[1:n], got[1:n])]

    return {"ttft_lag_ms": dist(first), "itl_lag_ms": dist(rest), "paired": len(first)}


def run_loadgen(streams: int, n: int, work: Path, workers: int = 1, cores: str = "0", prompt: int = 16) -> dict:
    """loadgen on `cores` (--workers N: N processes there; their records are merged on one clock)."""
    log = work / "lg-stamps.jsonl"
    p, url = stub(log)
    try:
        out = work / "lg"
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
                str(streams),
                "--requests",
                str(n),
                "--prompt-tokens",
                str(prompt),
                "--output-tokens",
                str(TOKENS),
                "--workers",
                str(workers),
                "--out",
                str(out),
                "--quiet",
            ],
            check=True,
            capture_output=True,
            timeout=900,
            cwd=ROOT,
        )
    finally:
        stop(p)
    origin = json.loads((out / "summary.json").read_text())["clock_origin_perf_counter"]
    sent = {s["client_id"]: s["sent"] for s in stamps(log)}
    pairs = []
    for line in (out / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["id"] in sent and r["error"] is None:
            base = origin + r["sent"]
            pairs.append((sent[r["id"]], [base + t for t in r["chunk_times"]]))
    return lags(pairs)


def run_vllm_bench(streams: int, n: int, work: Path, tokenizer: str, prompt: int = 16) -> dict:
    log = work / "vb-stamps.jsonl"
    p, url = stub(log)
    try:
        cmd = [PY, str(ROOT / "benchmarks" / "vllm_cli.py")]
        res = bench(cmd, url, streams, n, TOKENS, tokenizer, work / "vb.json", prompt=prompt)
    finally:
        stop(p)
    sent = {s["tag"]: s["sent"] for s in stamps(log)}
    pairs = []
    for start, ttft, itl, text in zip(res["start_times"], res["ttfts"], res["itls"], res["generated_texts"]):
        m = re.search(r"cmpl-\d+", text or "")
        if not m or m.group(0) not in sent or not ttft:
            continue
        got = [start + ttft]
        for gap in itl:
            got.append(got[-1] + gap)
        pairs.append((sent[m.group(0)], got))
    return lags(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,100,500,1000")
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "lag.json"))
    a = ap.parse_args()
    from validator.tinymodels import ensure_tiny_model

    tok = str(ensure_tiny_model("tiny-gqa", ROOT / "models" / "tiny-gqa"))
    rows = []
    for streams in (int(x) for x in a.streams.split(",")):
        n = max(streams * a.requests_per_stream, 20)
        with tempfile.TemporaryDirectory() as d:
            row = {
                "streams": streams,
                "requests": n,
                "loadgen": run_loadgen(streams, n, Path(d), prompt=a.prompt_tokens),
                "vllm_bench": run_vllm_bench(streams, n, Path(d), tok, prompt=a.prompt_tokens),
            }
        rows.append(row)
        for who in ("loadgen", "vllm_bench"):
            t, i = row[who]["ttft_lag_ms"], row[who]["itl_lag_ms"]
            print(
                f"{streams:>5} streams {who:<11} TTFT lag p50/p99/max {t['p50']}/{t['p99']}/{t['max']} ms, "
                f"ITL lag {i['p50']}/{i['p99']}/{i['max']} ms ({row[who]['paired']} of {n} paired)",
                flush=True,
            )
    Path(a.out).write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%d"),
                "stub": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "tokens": TOKENS, "prompt_tokens": a.prompt_tokens},
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
