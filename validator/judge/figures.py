"""What each run measured, side by side with what the plan predicts: held requests and KV blocks,
prefix-cache hits, counter and histogram deltas, latency samples with paused intervals left out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.results.records import RequestRecord
from validator.judge.freezecheck import freeze_intervals, observed_state, reported_hits, unsettled
from validator.judge.freezestate import LAUNCHED_ARGV, expected_state, launched_budget, one_step_prefills
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup, align_block
from validator.judge.predict import (
    Held,
    Lookup,
    PrefixCacheModel,
    block_keys,
    final_peak,
    kv_blocks_at,
)
from validator.judge.sweepstep import step_of
from validator.plan.record import PlanRecord
from validator.rundir.rundata import RunData
from validator.rundir.samples import Histogram
from validator.rundir.schedule import RunKind


def _ordered(run: RunData) -> list[RequestRecord]:
    return sorted((r for r in run.records if r.sent is not None), key=lambda r: r.sent or 0.0)


def held_requests(run: RunData, block_size: int, shared: bool = True) -> list[Held]:
    """The requests the client saw, with their prompt blocks' keys where vLLM shares equal blocks
    (`shared`: its prefix cache on)."""
    out = []
    for r in _ordered(run):
        if not r.chunk_times or r.prompt_tokens is None:
            continue
        prompt = run.prompts.get(r.id)
        keys = tuple(block_keys(prompt, block_size)) if shared and isinstance(prompt, list) else ()
        sent = r.sent or 0.0
        out.append(Held(sent, [sent + c for c in r.chunk_times], r.prompt_tokens, keys))
    return out


def predict_prefix(
    runs: list[RunData],
    block_size: int,
    usable_blocks: int,
    window: int | None = None,
    groups: tuple[int, int] = (1, 1),
    window_block: int | None = None,
    looked_up: bool = False,
    need: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Predicted hit tokens per run, simulating the cache across runs in the order they ran; with
    `window` (a sliding-window group beside the full ones), or `looked_up` (chunked groups: the hit a
    first-token freeze counts from), each frozen request's lookup too. `groups`: the layout's (dense,
    window) groups; `block_size`, `window_block`: their blocks; `need`: a hybrid's state groups,
    cached at the window's checkpoints (PrefixCacheModel)."""
    looked_up = looked_up or window is not None or need is not None
    model = PrefixCacheModel(block_size, usable_blocks, window, groups, window_block, need)
    out = {}
    for run in runs:
        if run.isolation == "reset":
            model.reset()
        hits = 0
        lookups: dict[str, Lookup] = {}
        # kept for the requests a freeze caught only: held per freeze, not per request of the run
        frozen = {q.get("id") for f in run.freezes for q in f.requests} if looked_up else set()
        ids = run.served_ids  # text prompts as the token ids the server computed
        for r in _ordered(run):
            prompt = ids.get(r.id)
            if prompt is None or r.status != 200:
                continue
            out_tokens = r.output_tokens or 0
            # generated blocks are cached too (never matched here: their content is unknown)
            look = model.lookup(prompt, [-(i + 1) - hash(r.id) % 1_000_000 * 100_000 for i in range(out_tokens)])
            if r.id in frozen:
                lookups[r.id] = look
            hits += look.hit_tokens
        out[run.name] = {"hit_tokens": hits, "lookups": lookups if looked_up else None}
    return out


def first_error(records: list[RequestRecord]) -> str | None:
    """The first failed request's error (by send time) and how many requests failed with it, for the
    check that counts the failures: the reason belongs beside the number."""
    failed = sorted((r for r in records if not r.ok), key=lambda r: (r.sent is None, r.sent or 0.0))
    if not failed:
        return None
    text = failed[0].error or f"HTTP {failed[0].status}"
    same = sum(1 for r in failed if (r.error or f"HTTP {r.status}") == text)
    return f"first error: {text[:300]!r} ({same} of {len(failed)} failed requests)"


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


def bucket_of(h: Histogram | None, q: float) -> tuple[float, float] | None:
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


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def _paused(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    """Seconds of [a, b] during which the engine was held."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in spans)


def latency_values(run: RunData) -> tuple[list[float], list[float], int, int]:
    """Client TTFT and ITL (ms), each less the time the engine was held by a freeze within it, and
    how many of each spanned a freeze: only the paused interval itself is subtracted, so a sample
    that stays long without it still counts in full."""
    spans = freeze_intervals(run)
    ttft: list[float] = []
    itl: list[float] = []
    held_t = held_i = 0
    for r in run.records:
        if not r.ok:
            continue
        sent = r.sent or 0.0
        t = [sent + c for c in r.chunk_times]
        p = _paused(sent, t[0], spans) if spans else 0.0
        held_t += p > 0
        ttft.append((t[0] - sent - p) * 1e3)
        for a, b in zip(t, t[1:]):
            p = _paused(a, b, spans) if spans else 0.0
            held_i += p > 0
            itl.append((b - a - p) * 1e3)
    return ttft, itl, held_t, held_i


@dataclass(kw_only=True)
class RunFigures:
    """What one run measured, side by side with what the plan predicts (for the checks and the report)."""

    requests: int
    ok: int
    errors: int
    first_error: str | None
    late_first_tokens: int  # first tokens that came only after a request had finished
    usable_blocks: int
    kv_upper_bound: int | None  # blocks of the requests the client saw in flight, at full length
    kv_observed_peak: float | None  # the largest sampled reading, in blocks
    kv_timeline: list[dict[str, Any]]
    freezes: list[dict[str, Any]]
    max_running: float | None
    max_waiting: float | None
    preemptions: float | None
    prefix_queries_observed: float | None
    prefix_hits_observed: float | None
    prefix_hits_predicted: int | None
    prompt_tokens_sent: int
    ttft_ms: list[float]  # each less the time a freeze held the engine within it
    itl_ms: list[float]
    paused_ttft_adjusted: int  # how many TTFTs spanned a freeze (the pause subtracted)
    paused_itl_adjusted: int
    prefix_hits_upper: int | None = None  # a dataset run's replay may leave a range: [predicted, upper]
    one_step: frozenset[str] = frozenset()  # requests caught at their first token, prefilled in one step


def at_once(run: RunData, plan: PlanRecord, groups: tuple[HeldGroup, ...]) -> int:
    """The most requests that may share an engine step up to a run's freeze: max_num_seqs; in a sweep
    step beside window or chunk groups, where the admission lets fewer run, what the ledger's run of
    the scheduler says (sweepstep.py; its admission and waiting checks judge that run)."""
    if run.kind is not RunKind.SWEEP or not any(g.frees or g.state for g in groups):
        return plan.max_num_seqs
    step = step_of(run, plan)
    most = step.most_running if step else None
    return plan.max_num_seqs if most is None else min(most, plan.max_num_seqs)


def run_figures(
    run: RunData,
    plan: PlanRecord,
    server_blocks: int | None = None,
    prefix_hits_predicted: int | None = None,
    lookups: dict[str, Lookup] | None = None,
    groups: tuple[HeldGroup, ...] = ONE_FULL_GROUP,
) -> RunFigures:
    """Predicted and observed KV and timing figures of one run.

    The usage gauge is a fraction of the server's own pool: it is turned into blocks with the
    block count the server reported (when known), not the planned one."""
    bs = plan.block_size
    usable = (server_blocks - 1) if server_blocks else plan.usable_blocks
    held = held_requests(run, bs, plan.prefix_cached)
    t0 = run.started_at
    timeline = []
    for s in run.samples:
        u = s.values.get("kv_cache_usage_perc")
        t_rel = (s.t_sent if s.t_sent is not None else s.t) - t0
        timeline.append(
            {
                "t": round(t_rel, 4),
                "observed": None if u is None else round(u * usable, 3),
                "predicted": kv_blocks_at(held, t_rel, bs),
                "running": s.values.get("num_requests_running"),
                "waiting": s.values.get("num_requests_waiting"),
            }
        )
    obs = [p["observed"] for p in timeline if p["observed"] is not None]
    ok = [r for r in run.records if r.ok]
    first_done = min(((r.sent or 0.0) + r.chunk_times[-1] for r in ok), default=None)
    late = sum(1 for r in ok if first_done is not None and (r.sent or 0.0) + r.chunk_times[0] >= first_done - 1e-3)
    ttft, itl, held_t, held_i = latency_values(run)
    freezes = []
    # a first-token freeze is judged where its prefill surely took one step (freezestate.py)
    budget = launched_budget(plan.shown.get(LAUNCHED_ARGV))
    one = one_step_prefills(run, budget, at_once(run, plan, groups), align_block(groups, plan.block_size))
    hits = reported_hits(run)
    for f in run.freezes:
        o = observed_state(f.reading, usable)
        freezes.append(
            {
                "name": f.name,
                "t": None if f.t_pause is None else round(f.t_pause, 4),
                "held_ms": None
                if f.t_resumed is None or f.t_pause is None
                else round((f.t_resumed - f.t_pause) * 1e3, 1),
                "settled": f.settled,
                "measured": unsettled(run, f) is None,
                "observed": o["kv_blocks"],
                "error": f.error,
                "expected": expected_state(
                    f.requests, run.served_ids, bs, groups, lookups, one, hits, plan.prefix_cached
                )["kv_blocks"],
            }
        )
    return RunFigures(
        requests=len(run.records),
        ok=len(ok),
        errors=sum(1 for r in run.records if not r.ok),
        first_error=first_error(run.records),
        late_first_tokens=late,
        usable_blocks=usable,
        kv_upper_bound=final_peak(held, bs, plan.max_num_seqs, groups) if held else None,
        kv_observed_peak=max(obs) if obs else None,
        kv_timeline=timeline,
        freezes=freezes,
        max_running=max((p["running"] for p in timeline if p["running"] is not None), default=None),
        max_waiting=max((p["waiting"] for p in timeline if p["waiting"] is not None), default=None),
        preemptions=counter_delta(run, "num_preemptions"),
        prefix_queries_observed=counter_delta(run, "prefix_cache_queries"),
        prefix_hits_observed=counter_delta(run, "prefix_cache_hits"),
        prefix_hits_predicted=prefix_hits_predicted,
        prompt_tokens_sent=sum(r.prompt_tokens or 0 for r in ok),
        ttft_ms=ttft,
        itl_ms=itl,
        paused_ttft_adjusted=held_t,
        paused_itl_adjusted=held_i,
        one_step=one,
    )
