"""Checks: predictions against observations, over saved data only (pure).

Each check has a name, expected, observed, tolerance, passed (None: not measured)
and a one-line explanation. A run can be re-judged later from its directory.
"""

from __future__ import annotations

import bisect
import math
import statistics

import numpy as np

from validator.predict import Held, PrefixCacheModel, block_keys, final_peak, kv_blocks_at
from validator.runs import RunData
from validator.scrape import Histogram
from validator.startup import Check


def _check(name, expected, observed, passed, tolerance, explanation) -> Check:
    return Check(name, expected, observed, passed, tolerance, explanation)


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


def _delta(run: RunData, key: str) -> float | None:
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


def run_figures(run: RunData, plan: dict, server_blocks: int | None = None) -> dict:
    """Predicted and observed KV and timing figures of one run (for checks and the report).

    The usage gauge is a fraction of the server's own pool: it is turned into blocks with the
    block count the server reported (when known), not the planned one."""
    bs = plan["block_size"]
    usable = (server_blocks - 1) if server_blocks else plan["usable_blocks"]
    held = held_requests(run, bs)
    t0 = run.started_at
    # The client's view of a request trails the server by however long delivery stalls: the
    # largest gap between two chunks of one stream measures that, so each sample is compared
    # with the range the prediction takes within that lag (a strict point on a healthy host).
    lag = min(max((g for h in held for g in np.diff(h.chunk_times)), default=0.0), 5.0)
    arrivals = sorted(t for h in held for t in h.chunk_times)
    timeline = []
    for s in run.samples:
        u = s.values.get("kv_cache_usage_perc")
        t_rel = (s.t_sent if s.t_sent is not None else s.t) - t0
        t_end = s.t - t0
        lo, hi = t_rel - lag, t_end + lag
        pts = [lo, t_rel, t_end, hi] + arrivals[bisect.bisect_left(arrivals, lo):bisect.bisect_right(arrivals, hi)]
        band = [kv_blocks_at(held, t, bs) for t in pts]
        timeline.append({"t": round(t_rel, 4), "observed": None if u is None else round(u * usable, 3),
                         "predicted": kv_blocks_at(held, t_rel, bs), "band": [min(band), max(band)],
                         "running": s.values.get("num_requests_running"),
                         "waiting": s.values.get("num_requests_waiting")})
    obs = [p["observed"] for p in timeline if p["observed"] is not None]
    errs = [max(p["band"][0] - p["observed"], p["observed"] - p["band"][1], 0.0)
            for p in timeline if p["observed"] is not None]
    ok = [r for r in run.records if r.ok]
    first_done = min((r.sent + r.e2e for r in ok), default=None)
    late = sum(1 for r in ok if first_done is not None and r.sent + r.ttft >= first_done - 1e-3)
    return {
        "late_first_tokens": late,
        "requests": len(run.records), "ok": len(ok),
        "kv_predicted_peak": final_peak(held, bs, plan["max_num_seqs"]) if held else None,
        "kv_observed_peak": max(obs) if obs else None,
        "kv_timeline_median_error": statistics.median(errs) if errs else None,
        "client_lag_s": lag,
        "kv_timeline": timeline,
        "usable_blocks": usable,
        "max_running": max((p["running"] for p in timeline if p["running"] is not None), default=None),
        "max_waiting": max((p["waiting"] for p in timeline if p["waiting"] is not None), default=None),
        "preemptions": _delta(run, "num_preemptions"),
        "prefix_queries_observed": _delta(run, "prefix_cache_queries"),
        "prefix_hits_observed": _delta(run, "prefix_cache_hits"),
        "prompt_tokens_sent": sum(r.prompt_tokens or 0 for r in ok),
        "ttft_ms": [r.ttft * 1e3 for r in ok],
        "itl_ms": [g * 1e3 for r in ok for g in r.itl],
        "token_mismatches": sum(1 for r in run.records if r.token_mismatch),
        "errors": sum(1 for r in run.records if not r.ok),
    }


def judge(plan: dict, runs: list[RunData], profile_values: dict,
          server_blocks: int | None = None) -> tuple[list[Check], dict]:
    tol = profile_values["tolerances"]
    slo = profile_values["slo"]
    n = plan["max_num_seqs"]
    figures = {r.name: run_figures(r, plan, server_blocks) for r in runs}
    prefix = predict_prefix(runs, plan["block_size"], plan["usable_blocks"])
    checks: list[Check] = []
    for run in runs:
        f = figures[run.name]
        f["prefix_hits_predicted"] = prefix[run.name]["hit_tokens"]
        name = run.name
        # prefix cache: queries are every prompt token; hits follow the block model
        q_obs = f["prefix_queries_observed"]
        checks.append(_check(f"{name}.prefix_queries", f["prompt_tokens_sent"], q_obs,
                             None if q_obs is None else q_obs == f["prompt_tokens_sent"], "exact",
                             "every prompt token is a prefix-cache query"))
        h_obs, h_pred = f["prefix_hits_observed"], f["prefix_hits_predicted"]
        checks.append(_check(f"{name}.prefix_hits", h_pred, h_obs,
                             None if h_obs is None else abs(h_obs - h_pred) <= tol["prefix_hit_tokens"],
                             f"<= {tol['prefix_hit_tokens']} tokens",
                             "full cached blocks, at most len-1 tokens per prompt, across runs in order"
                             + (" (cache reset before this run)" if run.isolation == "reset" else "")))
        if not run.measured:
            continue
        pk, ob = f["kv_predicted_peak"], f["kv_observed_peak"]
        floor = None if pk is None else pk * (1 - tol["kv_peak_below"])
        # the peak is judged only if a sample fell where the client saw it (samples can miss a short top)
        near = [p for p in f["kv_timeline"] if floor is not None and p["predicted"] >= floor]
        if pk is None or ob is None:
            ok_peak, why = None, "not measured"
        elif ob > pk + 1e-6:
            ok_peak, why = False, "observed above the arithmetic"
        elif not near:
            ok_peak, why = None, "no sample fell on the predicted peak (only the upper bound held)"
        else:
            ok_peak, why = ob >= floor, "observed peak vs predicted"
        checks.append(_check(f"{name}.kv_peak_blocks", pk, ob, ok_peak,
                             f"never above; at most {tol['kv_peak_below']:.0%} below",
                             f"blocks of the requests in flight at full length, shared prefix blocks once: {why}"))
        med = f["kv_timeline_median_error"]
        tl = tol["kv_timeline_blocks"] if tol["kv_timeline_blocks"] is not None else float(n)
        checks.append(_check(f"{name}.kv_timeline", 0, med, None if med is None else med <= tl,
                             f"median <= {tl:g} blocks",
                             "observed usage x usable blocks vs the client's view at each sample, within the "
                             f"largest delivery gap seen ({f['client_lag_s'] * 1e3:.0f} ms)"))
        if run.cache in ("cold", "warm"):
            pre = f["preemptions"]
            checks.append(_check(f"{name}.preemptions", f"<= {tol['max_preemptions']}", pre,
                                 None if pre is None else pre <= tol["max_preemptions"], "count",
                                 "at the planned limits nothing is preempted"))
        if run.cache == "cold" and tol["min_kv_utilization"] > 0:
            util = None if ob is None else ob / f["usable_blocks"]
            checks.append(_check("cold.kv_utilization", f">= {tol['min_kv_utilization']:.0%}",
                                 None if util is None else round(util, 4),
                                 None if util is None else util >= tol["min_kv_utilization"], "fraction",
                                 "the planned limits fill most of the usable blocks: they are tight"))
        if run.cache == "probe":
            w, rmax = f["max_waiting"], f["max_running"]
            late = f["late_first_tokens"]
            waited = (w is not None and w >= 1) or late >= len(run.records) - n > 0
            capped = rmax is None or rmax <= n
            checks.append(_check("probe.queueing", f"running <= {n}; {len(run.records) - n} wait",
                                 {"max_running": rmax, "max_waiting": w, "first_token_after_a_finish": late},
                                 waited and capped if (w is not None or late) else None, "gauge / client",
                                 "more full-length requests than max_num_seqs: the excess waits (the server's "
                                 "waiting gauge, or first tokens only after earlier requests finished)"))
        checks.append(_check(f"{name}.tokens_exact", 0, f["token_mismatches"], f["token_mismatches"] == 0,
                             "exact", "served prompt and output tokens equal what was asked"))
        rate = f["errors"] / f["requests"] if f["requests"] else None
        checks.append(_check(f"{name}.error_rate", f"<= {slo['error_rate']:g}", rate,
                             None if rate is None else rate <= slo["error_rate"], "fraction",
                             "failed requests in this run (slo.error_rate)"))
        # latency: client vs server histograms, bucket-aware (the probe's waits are its point, not latency)
        for metric, key in ((("ttft", "ttft"), ("itl", "itl")) if run.cache in ("cold", "warm") else ()):
            vals = f[f"{metric}_ms"]
            h = hist_delta(run, key)
            for q in (50, 99):
                c = _pct(vals, q)
                b = bucket_of(h, q / 100) if h is not None else None
                if c is None or b is None:
                    checks.append(_check(f"{name}.{metric}_p{q}_client_vs_server", None, c, None, "bucket",
                                         "not measured on one side"))
                    continue
                lo, hi = b[0] * 1e3, b[1] * 1e3
                slack = tol["latency_abs_ms"] + tol["latency_rel"] * (hi if math.isfinite(hi) else lo)
                ok = lo - slack <= c <= hi + slack
                checks.append(_check(f"{name}.{metric}_p{q}_client_vs_server",
                                     f"({lo:g}, {'inf' if not math.isfinite(hi) else f'{hi:g}'}] ms", round(c, 3),
                                     ok, f"+/- {slack:.1f} ms",
                                     "the client's percentile falls in the server histogram's bucket"))
    # SLOs over the measured cold and warm runs
    measured = [r for r in runs if r.cache in ("cold", "warm")]
    ttft = [v for r in measured for v in figures[r.name]["ttft_ms"]]
    itl = [v for r in measured for v in figures[r.name]["itl_ms"]]
    total = sum(figures[r.name]["requests"] for r in measured)
    errors = sum(figures[r.name]["errors"] for r in measured)
    for key, vals, label in (("ttft_p99_ms", ttft, "TTFT"), ("itl_p99_ms", itl, "ITL")):
        limit = slo[key]
        obs = _pct(vals, 99)
        checks.append(_check(f"slo.{key}", None if limit is None else f"<= {limit:g}",
                             None if obs is None else round(obs, 3),
                             None if limit is None or obs is None else obs <= limit, "ms",
                             f"{label} p99 over the cold and warm runs" + ("" if limit else " (no SLO set)")))
    rate = errors / total if total else None
    checks.append(_check("slo.error_rate", f"<= {slo['error_rate']:g}", rate,
                         None if rate is None else rate <= slo["error_rate"], "fraction",
                         "failed requests over the cold and warm runs"))
    return checks, figures
