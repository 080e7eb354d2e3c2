"""Results in `vllm bench serve`'s language: the result JSON its `--save-result` writes (vLLM
0.32, `vllm/benchmarks/serve.py`), built from loadgen's records with the same definitions.

TTFT is the first token-carrying chunk after the request was sent; ITLs are the gaps between
chunks; TPOT is (latency - TTFT) / (output tokens - 1) for requests of more than one token;
E2EL is the latency to the last chunk. Aggregates (mean, median, std, pNN in ms) are over
successful requests; throughputs divide by the benchmark's duration. Warm-up requests are
left out, as `--num-warmups` requests are in vLLM.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from loadgen.results.records import RequestRecord
from loadgen.safefile import make_dirs, write_atomic

METRICS = ("ttft", "tpot", "itl", "e2el")


class BenchArgError(ValueError):
    """A `vllm bench serve` flag that cannot be read; the message names it."""


def parse_percentile_metrics(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in METRICS]
    if bad or not names:
        raise BenchArgError(f"--percentile-metrics: {text!r}; give a comma-separated subset of {','.join(METRICS)}")
    return names


def parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        ps = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        ps = ()
    if not ps or not all(0 < p < 100 or p == 100 for p in ps):
        raise BenchArgError(f"--metric-percentiles: {text!r}; give comma-separated numbers in (0, 100], e.g. 50,90,99")
    return ps


def parse_goodput(pairs: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for pair in pairs or []:
        name, _, value = pair.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = -1.0
        if name not in ("ttft", "tpot", "e2el") or not (math.isfinite(ms) and ms >= 0):
            raise BenchArgError(
                f"--goodput: {pair!r}; give KEY:VALUE pairs, KEY one of ttft, tpot, e2el, VALUE "
                "in milliseconds (e.g. ttft:200 tpot:50)"
            )
        out[name] = ms
    return out


def parse_metadata(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise BenchArgError(f"--metadata: {item!r}; give KEY=VALUE pairs")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def result(
    records: list[RequestRecord],
    duration: float,
    *,
    backend: str,
    model_id: str,
    num_prompts: int,
    request_rate: float | None,
    burstiness: float,
    max_concurrency: int | None,
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl"),
    percentiles: tuple[float, ...] = (99.0,),
    goodput: dict[str, float] | None = None,
    detailed: bool = False,
    metadata: dict | None = None,
    date: str | None = None,
) -> dict:
    """vllm bench serve's result JSON for these records (key names and units as vLLM writes them)."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    out_lens = [(r.output_tokens or 0) if r.ok else 0 for r in measured]
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    total_out = sum(out_lens)
    values = {
        "ttft": [r.ttft for r in ok],
        "tpot": [r.tpot for r in ok if r.tpot is not None],
        "itl": [g for r in ok for g in r.itl],
        "e2el": [r.e2e for r in ok],
    }
    good = None
    if goodput:
        all_tpots = [r.tpot or 0.0 for r in ok]  # 0 for one-token requests, as vLLM counts them
        per: dict[str, list[float]] = {
            "ttft": [r.ttft or 0.0 for r in ok],
            "tpot": all_tpots,
            "e2el": [r.e2e or 0.0 for r in ok],
        }
        good = sum(all(per[k][i] <= v / 1e3 for k, v in goodput.items()) for i in range(len(ok)))
    res: dict = {
        "date": date or time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
        **(metadata or {}),
        "request_rate": "inf" if request_rate is None or math.isinf(request_rate) else request_rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": duration,
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "request_goodput": (good / duration if duration > 0 else None) if good is not None else None,
        "output_throughput": total_out / duration if duration > 0 else None,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else None,
    }
    if detailed:
        res.update(
            input_lens=[r.prompt_tokens or r.asked_prompt_tokens or 0 for r in measured],
            output_lens=out_lens,
            ttfts=[r.ttft if r.ok else 0.0 for r in measured],
            itls=[r.itl if r.ok else [] for r in measured],
            errors=[r.error or "" for r in measured],
        )
    for m in percentile_metrics:
        v = np.asarray(values[m] or [0.0], dtype=float) * 1e3  # vLLM reports 0 for an empty metric
        res[f"mean_{m}_ms"] = float(v.mean())
        res[f"median_{m}_ms"] = float(np.median(v))
        res[f"std_{m}_ms"] = float(v.std())
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            res[f"p{word}_{m}_ms"] = float(np.percentile(v, p))
    return res


def file_name(
    *,
    backend: str,
    model_id: str,
    request_rate: float | None,
    max_concurrency: int | None,
    date: str,
    result_filename: str | None = None,
) -> str:
    """vLLM's default name: {backend}-{rate}qps[-concurrency{N}]-{model}-{date}.json."""
    if result_filename:
        return result_filename
    rate = "inf" if request_rate is None or math.isinf(request_rate) else f"{request_rate}"
    conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    return f"{backend}-{rate}qps{conc}-{model_id.split('/')[-1]}-{date}.json"


def write(res: dict, result_dir: str | None, name: str) -> Path:
    d = Path(result_dir or ".")
    make_dirs(d)
    p = d / name
    write_atomic(p, json.dumps(res))
    return p
