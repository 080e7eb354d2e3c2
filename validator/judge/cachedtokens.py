"""The per-request prefix-cache audit (pure): every request's cached tokens as the server reported
them (usage.prompt_tokens_details.cached_tokens, vLLM's --enable-prompt-tokens-details) against
the block pool replayed from the client's view (prefixsim.py)."""

from __future__ import annotations

import bisect
import math
from typing import Any

from loadgen.results.records import RequestRecord
from validator.judge.arrivals import Prediction, SimRequest
from validator.judge.blockpool import Overflow
from validator.judge.check import Check
from validator.judge.checkpoints import replayed_groups, state_need, window_of
from validator.judge.figures import counter_delta
from validator.judge.prefixsim import simulate
from validator.judge.template import audit
from validator.plan.record import PlanRecord
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind

BARS = 40  # prompts drawn in the report's picture


def token_times(r: RequestRecord) -> tuple[float, ...]:
    """When the client had each of its tokens (run clock): chunks carry cumulative counts when the
    server sent per-chunk usage, else one token a chunk."""
    sent = r.sent or 0.0
    n = r.output_tokens or len(r.chunk_times)
    counts = [c for c in r.chunk_tokens if c is not None]
    if not counts or len(counts) != len(r.chunk_times):
        return tuple(sent + c for c in r.chunk_times[:n])
    out = []
    for k in range(1, n + 1):
        j = bisect.bisect_left(counts, k)
        if j >= len(counts):
            break
        out.append(sent + r.chunk_times[j])
    return tuple(out)


def predictions(run: RunData, plan: PlanRecord) -> tuple[list[Prediction] | None, str | None]:
    """(each request's prediction, None) or (None, why the run cannot be replayed)."""
    return chain_predictions([run], plan)


def chain_predictions(chain: list[RunData], plan: PlanRecord) -> tuple[list[Prediction] | None, str | None]:
    """Runs that share one cache, the first made cold (a warm run after its prime): replayed as one
    pool on the last run's clock, each run at its own start; the predictions of every request."""
    first, last = chain[0], chain[-1]
    if not plan.prefix_cached:  # nothing is cached: every request computes its whole prompt
        recs = [r for run in chain for r in run.records]
        return [Prediction(r.id, 0, 0, r.prompt_tokens or 0, i) for i, r in enumerate(recs)], None
    reqs: list[SimRequest] = []
    for run in chain:
        ids = run.served_ids
        failed = [r for r in run.records if not r.ok]
        if failed:
            return None, f"{len(failed)} requests failed: the cache state after them is unknown"
        missing = [r.id for r in run.records if r.id not in ids]
        if missing:
            return None, f"{len(missing)} prompts have no token ids in workload.jsonl (first {missing[0]})"
        pre = counter_delta(run, "num_preemptions")
        if pre is None or pre > 0:
            return None, (
                f"{pre:g} preemptions: a preempted request frees and retakes blocks where the client cannot see it"
                if pre
                else "the preemption counter was not read"
            )
        at = run.started_at - last.started_at
        reqs += [
            SimRequest(
                r.id,
                ids[r.id],
                r.output_tokens or 0,
                at + (r.sent or 0.0),
                tuple(at + t for t in token_times(r)),
                r.cached_tokens,
                None if r.server_ttft_ms is None else r.server_ttft_ms / 1000,
            )
            for r in run.records
        ]
    if len({q.id for q in reqs}) < len(reqs):
        return None, "request ids repeat across the runs that share the cache"
    if first.isolation != "reset" and first.token_ids:  # text cannot carry a salt: earlier traffic may hit
        return None, (
            "the prefix cache was not reset before the run (POST /reset_prefix_cache needs "
            "VLLM_SERVER_DEV_MODE=1) and text prompts carry no salt: what earlier traffic left cached is unknown"
        )
    layout, served = window_of(plan)
    groups = replayed_groups(layout, served, state_need(plan, layout))
    if groups is None:
        return None, (
            "the replay follows full-attention groups, or those beside sliding windows cached at checkpoints: "
            f"{layout.gap}"
        )
    try:
        return (
            simulate(
                reqs,
                plan.block_size,
                plan.usable_blocks,
                plan.max_num_seqs,
                plan.max_num_batched_tokens or None,
                groups,
                frozenset(str(q.get("id")) for f in last.freezes for q in f.requests),
            ),
            None,
        )
    except Overflow as e:
        return None, f"the replayed pool ran out of blocks ({e}): vLLM would have queued or preempted"
    except ValueError as e:  # a plan.json whose groups the replay does not hold (replayed_groups admits none)
        return None, f"not replayed: {e}"


def replay_of(runs: list[RunData], run: RunData, plan: PlanRecord, checkpointed: bool) -> list[Prediction] | None:
    """The replayed predictions of `run`'s requests where the judge takes its hits from them: a dataset
    run, and on a layout caching at checkpoints (windows, state) a warm run replayed after the runs
    since the last reset (its prime): their checkpoint pages wait in the free queue while the run
    holds the rest, and a nearly full pool evicts them (a tiny Qwen3-Next at 41 blocks: the first
    request of each wave of 4 missed, 2,880 hit tokens where the sequential model kept 3,680)."""
    if run.kind is RunKind.DATASET:
        return predictions(run, plan)[0]
    if run.kind is not RunKind.WARM or not checkpointed or run.isolation is not None:
        return None
    chain = [run]
    for before in reversed(runs[: runs.index(run)]):
        if before.isolation == "salt":  # salted prompts replay as if unsalted: not followed
            return None
        chain.insert(0, before)
        if before.isolation == "reset":
            break
    preds = chain_predictions(chain, plan)[0] if chain[0].isolation == "reset" else None
    mine = {q.id for q in run.records}
    return None if preds is None else [p for p in preds if p.id in mine]


def cached_tokens_check(run: RunData, plan: PlanRecord) -> Check:
    name = f"{run.name}.cached_tokens"
    got = [r.cached_tokens for r in run.records]
    preds, why = predictions(run, plan)
    if not run.records:
        why = "no request recorded"
    elif all(c is None for c in got):
        why = why or (
            "the server sent no usage.prompt_tokens_details.cached_tokens (start vLLM with "
            "--enable-prompt-tokens-details; kvgate does when it launches)"
        )
    elif any(c is None for c in got):
        why = why or f"{sum(c is None for c in got)} responses carried no cached_tokens"
    if why or preds is None:
        return Check(
            name=name, expected=None, observed=None, passed=None, tolerance="exact", explanation=why or "not replayed"
        )
    by_id = {r.id: r for r in run.records}
    bad, ranged = [], 0
    for p in sorted(preds, key=lambda p: p.order):
        obs = by_id[p.id].cached_tokens
        assert obs is not None
        ranged += not p.exact
        if not p.admits(obs):
            want = f"{p.hits}" if p.exact else f"{p.hits}..{p.upper}"
            bad.append(f"{p.id} cached {obs} of {p.prompt_tokens} tokens, predicted {want}")
    lo, hi = sum(p.hits for p in preds), sum(p.upper for p in preds)
    return Check(
        name=name,
        expected=lo if lo == hi else f"{lo}..{hi}",
        observed=sum(c for c in got if c is not None),
        passed=not bad,
        tolerance="exact, each request",
        explanation=(
            f"{len(preds) - len(bad)} of {len(preds)} requests got exactly the predicted prefix hit"
            + (f"; {ranged} within a range (an eviction raced their scheduling)" if ranged else "")
            + (": " + "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "") if bad else "")
            + " (vLLM's block pool replayed from the client's view: LRU eviction, len-1 cap, FCFS)"
        ),
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f} %"


def dataset_audit(run: RunData, plan: PlanRecord) -> dict[str, Any] | None:
    """The prompt-template audit of a dataset run: predicted and observed hits beside the hit the
    prompts would get with their shared part first, where they stop sharing, and per prompt bars."""
    ids = run.served_ids
    sent = sorted((r for r in run.records if r.id in ids), key=lambda r: (r.sent is None, r.sent or 0.0))
    if not sent:
        return None
    preds, why = predictions(run, plan)
    pred = {p.id: p.hits for p in preds} if preds is not None else None
    # a hit ends where every group's block does (Gemma 4: 64 tokens beside blocks of 32)
    hit_block = math.lcm(*window_of(plan)[0].blocks(plan.block_size))
    a = audit([(r.id, ids[r.id]) for r in sent], hit_block, pred)
    obs = {r.id: r.cached_tokens for r in sent}
    obs_total = sum(v for v in obs.values() if v is not None) if all(v is not None for v in obs.values()) else None
    pred_total = sum(pred.values()) if pred is not None else None
    total = a.prompt_tokens
    moved = [g for g in a.groups if g["moved"]]
    main = moved[0] if moved else (a.groups[0] if a.groups else None)
    line = (
        f"{_pct(pred_total / total if pred_total is not None and total else None)} of prompt tokens hit "
        f"(observed {_pct(obs_total / total if obs_total is not None and total else None)}); "
        f"{_pct(a.possible_rate)} possible"
    )
    if moved and main is not None:
        line += f": prompts differ from token {main['differ_at']}, before the {main['shared_run']} tokens they share"
    elif a.groups:
        line += ": the part prompts share already comes first"
    else:
        line += ": the prompts share no block"
    if not plan.prefix_cached:
        line += " (the server runs without its prefix cache: possible only with it on)"
    text = run.audit_text.get(main["first"]) if main is not None else None
    return {
        "line": line,
        "block_size": plan.block_size,
        "hit_block": hit_block,  # the tokens a hit is a multiple of (the blocks' least common multiple)
        "prompts": a.prompts,
        "prompt_tokens": total,
        "predicted_hit_tokens": pred_total,
        "observed_hit_tokens": obs_total,
        "possible_hit_tokens": a.possible_hit_tokens,
        "not_replayed": why,
        "groups": a.groups,
        "text_at_break": text,
        "bars": [
            {
                "id": r.id,
                "prompt_tokens": len(ids[r.id]),
                "predicted": None if pred is None else pred.get(r.id),
                "observed": r.cached_tokens,
                "possible": a.possible.get(r.id),
            }
            for r in sent[:BARS]
        ],
    }
