"""The report's data (report.json): the judged values turned into JSON, the one place they are:
verdict, counts, and per run what the client and the server measured."""

from __future__ import annotations

from typing import Any

from loadgen.results.stats import summarize
from validator.judge.cachedtokens import dataset_audit
from validator.judge.check import Check, Status
from validator.judge.figures import RunFigures, bucket_of, counter_delta, hist_delta
from validator.judge.verdict import counts_of, verdict_of
from validator.plan.record import PlanRecord
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind


def build(
    plan: PlanRecord,
    startup: dict | None,
    runs: list[RunData],
    figures: dict[str, RunFigures],
    checks: list[Check],
    error: str | None,
    profile_name: str,
    rejudged: dict | None = None,
    notes: list[str] | None = None,
) -> dict:
    run_rows = []
    for r in runs:
        f = figures.get(r.name)
        run_rows.append(
            {
                "name": r.name,
                "cache": r.cache,
                "purpose": r.purpose,
                "measured": r.measured,
                "isolation": r.isolation,
                "started_at": r.started_at,
                "ended_at": r.ended_at,
                "settled": r.settled,
                "interrupted": r.interrupted,
                "workload": r.workload,
                "client": _client_stats(r),
                # physics: a decode step cannot beat reading the weights and the KV once (None without a bandwidth)
                "decode_step_floor_ms": plan.decode_step_floor_ms,
                "server": _server_stats(r),
                "kv": {
                    k: getattr(f, k, None)
                    for k in (
                        "kv_upper_bound",
                        "kv_observed_peak",
                        "usable_blocks",
                        "max_running",
                        "max_waiting",
                        "preemptions",
                    )
                },
                "kv_timeline": f.kv_timeline if f else [],
                "freezes": f.freezes if f else [],
                "freeze_note": r.freeze_note,
                # TTFTs and gaps that spanned a freeze: the pause is subtracted from each
                "latency_adjusted_for_pauses": {
                    "ttft": getattr(f, "paused_ttft_adjusted", None),
                    "itl": getattr(f, "paused_itl_adjusted", None),
                },
                "missing": list(r.missing.values()),
                "audit": dataset_audit(r, plan) if r.kind is RunKind.DATASET else None,
                "prefix": {
                    "predicted_hit_tokens": getattr(f, "prefix_hits_predicted", None),
                    "observed_hit_tokens": getattr(f, "prefix_hits_observed", None),
                    "query_tokens_observed": getattr(f, "prefix_queries_observed", None),
                    "prompt_tokens_sent": getattr(f, "prompt_tokens_sent", None),
                },
            }
        )
    counts = counts_of(checks)
    rep = {
        "verdict": verdict_of(checks, error),
        "counts": counts,
        "not_measured": [c.name for c in checks if c.status is Status.NOT_MEASURED],
        "profile": profile_name,
        "plan": plan.to_json(),
        "startup": startup,
        "runs": run_rows,
        "checks": [c.to_json() for c in checks],
    }
    if error:
        rep["error"] = error
    if rejudged:  # judged again from the run directory: what the live run said
        rep["rejudged"] = rejudged
    if notes:
        rep["notes"] = notes
    return rep


def _client_stats(run) -> dict:
    s = summarize(run.records, run.ended_at - run.started_at)
    return {
        k: s[k]
        for k in (
            "requests",
            "ok",
            "failed",
            "error_rate",
            "errors",
            "token_mismatches",
            "prompt_tokens",
            "output_tokens",
            "ttft_ms",
            "itl_ms",
            "tpot_ms",
            "e2e_ms",
        )
    }


def _server_stats(run: RunData) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits", "num_preemptions"):
        out[key] = counter_delta(run, key)
    for key in ("ttft", "itl", "e2e", "queue"):
        h = hist_delta(run, key)
        if h is None or h.count <= 0:
            out[f"{key}_s"] = None
            continue
        out[f"{key}_s"] = {
            "count": h.count,
            "mean": h.sum / h.count,
            "p50_bucket": bucket_of(h, 0.5),
            "p99_bucket": bucket_of(h, 0.99),
        }
    return out
