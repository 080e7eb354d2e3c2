"""What each run measured, side by side with what the plan predicts: held requests and KV blocks,
prefix-cache hits, counter and histogram deltas, latency samples with paused intervals left out."""

from __future__ import annotations

import math

import numpy as np

from validator.judge.freezecheck import expected_state, freeze_intervals, observed_state
from validator.judge.predict import (
    Held,
    PrefixCacheModel,
    block_keys,
    final_peak,
    kv_blocks_at,
)
from validator.rundir.rundata import RunData
from validator.rundir.samples import Histogram


def _ordered(run: RunData):
    return sorted((r for r in run.records if r.sent is not None), key=lambda r: r.sent)


def held_requests(run: RunData, block_size: int) -> list[Held]:
    out = []
    for r in _ordered(run):
        if not r.chunk_times or r.prompt_tokens is None:
            continue
        prompt = run.prompts.get(r.id)
        keys = tuple(block_keys(prompt, block_size)) if isinstance(prompt, list) else ()
        out.append(Held(r.sent, [r.sent + c for c in r.chunk_times], r.prompt_tokens, keys))
    return out


def predict_prefix(runs: list[RunData], block_size: int, usable_blocks: int) -> dict[str, dict]:
    """Predicted hit tokens per run, simulating the cache across runs in the order they ran."""
    model = PrefixCacheModel(block_size, usable_blocks)
    out = {}
    for run in runs:
        if run.isolation == "reset":
            model.reset()
        hits = 0
        per_request = {}
        for r in _ordered(run):
            prompt = run.prompts.get(r.id)
            if not isinstance(prompt, list) or r.status != 200:
                continue
            out_tokens = r.output_tokens or 0
            # generated blocks are cached too (never matched here: their content is unknown)
            h = model.request(prompt, [-(i + 1) - hash(r.id) % 1_000_000 * 100_000 for i in range(out_tokens)])
            per_request[r.id] = h
            hits += h
        out[run.name] = {"hit_tokens": hits, "per_request": per_request}
    return out


def counter_delta(run: RunData, key: str) -> float | None:
    if run.before is None or run.after is None:
        return None
    a, b = run.before.values.get(key), run.after.values.get(key)
    return None if a is None or b is None else b - a


def hist_delta(run: RunData, key: str) -> Histogram | None:
    if run.after is None or key not in run.after.histograms:
        return None
    before = run.before.histograms.get(key) if run.before else None
    return run.after.histograms[key].minus(before)


def bucket_of(h: Histogram, q: float) -> tuple[float, float] | None:
    """The histogram bucket (lower, upper] holding quantile q (seconds)."""
    if h is None or h.count <= 0:
        return None
    rank = q * h.count
    lower = 0.0
    for le, c in h.buckets:
        if c >= rank:
            return lower, le
        lower = le
    return lower, math.inf


def _pct(values, q) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _overlaps(a: float, b: float, spans: list[tuple[float, float]]) -> bool:
    return any(a < hi and b > lo for lo, hi in spans)


def latency_values(run: RunData) -> tuple[list[float], list[float], int, int]:
    """Client TTFT and ITL (ms) with the paused intervals left out, and how many of each were left
    out: a TTFT or a gap that spans a freeze measures the freeze, not the server."""
    spans = freeze_intervals(run)
    ttft, itl, drop_t, drop_i = [], [], 0, 0
    for r in run.records:
        if not r.ok:
            continue
        t = [r.sent + c for c in r.chunk_times]
        if spans and _overlaps(r.sent, t[0], spans):
            drop_t += 1
        else:
            ttft.append(r.ttft * 1e3)
        for a, b in zip(t, t[1:]):
            if spans and _overlaps(a, b, spans):
                drop_i += 1
            else:
                itl.append((b - a) * 1e3)
    return ttft, itl, drop_t, drop_i


def run_figures(run: RunData, plan: dict, server_blocks: int | None = None) -> dict:
    """Predicted and observed KV and timing figures of one run (for checks and the report).

    The usage gauge is a fraction of the server's own pool: it is turned into blocks with the
    block count the server reported (when known), not the planned one."""
    bs = plan["block_size"]
    usable = (server_blocks - 1) if server_blocks else plan["usable_blocks"]
    held = held_requests(run, bs)
    t0 = run.started_at
    timeline = []
    for s in run.samples:
        u = s.values.get("kv_cache_usage_perc")
        t_rel = (s.t_sent if s.t_sent is not None else s.t) - t0
        timeline.append({"t": round(t_rel, 4), "observed": None if u is None else round(u * usable, 3),
                         "predicted": kv_blocks_at(held, t_rel, bs),
                         "running": s.values.get("num_requests_running"),
                         "waiting": s.values.get("num_requests_waiting")})
    obs = [p["observed"] for p in timeline if p["observed"] is not None]
    ok = [r for r in run.records if r.ok]
    first_done = min((r.sent + r.e2e for r in ok), default=None)
    late = sum(1 for r in ok if first_done is not None and r.sent + r.ttft >= first_done - 1e-3)
    ttft, itl, drop_t, drop_i = latency_values(run)
    freezes = []
    for f in run.freezes:
        o = observed_state(f.reading, usable)
        freezes.append({"name": f.name, "t": None if f.t_pause is None else round(f.t_pause, 4),
                        "held_ms": None if f.t_resumed is None or f.t_pause is None
                        else round((f.t_resumed - f.t_pause) * 1e3, 1),
                        "settled": f.settled, "observed": o["kv_blocks"], "error": f.error,
                        "expected": expected_state(f.requests, run.prompts, bs)["kv_blocks"]})
    return {
        "late_first_tokens": late,
        "requests": len(run.records), "ok": len(ok),
        "kv_upper_bound": final_peak(held, bs, plan["max_num_seqs"]) if held else None,
        "kv_observed_peak": max(obs) if obs else None,
        "kv_timeline": timeline,
        "freezes": freezes,
        "usable_blocks": usable,
        "max_running": max((p["running"] for p in timeline if p["running"] is not None), default=None),
        "max_waiting": max((p["waiting"] for p in timeline if p["waiting"] is not None), default=None),
        "preemptions": counter_delta(run, "num_preemptions"),
        "prefix_queries_observed": counter_delta(run, "prefix_cache_queries"),
        "prefix_hits_observed": counter_delta(run, "prefix_cache_hits"),
        "prompt_tokens_sent": sum(r.prompt_tokens or 0 for r in ok),
        "ttft_ms": ttft,
        "itl_ms": itl,
        "paused_ttft_dropped": drop_t,
        "paused_itl_dropped": drop_i,
        "token_mismatches": sum(1 for r in run.records if r.token_mismatch),
        "errors": sum(1 for r in run.records if not r.ok),
    }
