"""Freeze-frame checks (pure): what the engine must hold while paused, against what it reports.

At a settled freeze every live request the client sees is in one of three states:

- decoding: it has d >= 1 of its tokens. It is running and holds the KV of its prompt and of
  d - 1 generated tokens (the last sampled token has no KV yet): cdiv(P + d - 1, block) blocks;
- pending: no token yet. It waits (it holds no block);
- finished: all its tokens arrived. vLLM freed its blocks in the step that produced the last one.

Leading full prompt blocks with identical content are one physical block while several running
requests hold them: a request hits at most floor((P - 1) / block) of them (vLLM recomputes the
last prompt token), the first to be scheduled owns them. So the distinct blocks are each
request's own blocks minus the hits it shares with requests already counted.
"""

from __future__ import annotations

from loadgen.results.records import RequestRecord
from validator.judge.check import Check
from validator.judge.freezestate import expected_state
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup
from validator.judge.predict import Lookup
from validator.rundir.freezes import SETTLE_KEYS, FreezeRecord
from validator.rundir.rundata import RunData
from validator.rundir.samples import Sample


def _as_count(x: float | None, digits: int = 6) -> int | float | None:
    """A gauge turned into a count: an int when it is one (to 1e-6), else the float as read."""
    if x is None:
        return None
    r = round(x, digits)
    return int(round(r)) if abs(r - round(r)) < 1e-6 else r


def observed_state(reading: Sample | None, usable_blocks: int) -> dict[str, int | float | None]:
    v: dict[str, float | None] = reading.values if reading is not None else {}
    u = v.get("kv_cache_usage_perc")
    return {
        "kv_blocks": None if u is None else _as_count(u * usable_blocks),
        "running": _as_count(v.get("num_requests_running")),
        "waiting": _as_count(v.get("num_requests_waiting")),
    }


_WHAT = {
    "kv_blocks": "kv_cache_usage_perc x usable blocks vs sum of cdiv(prompt + delivered - 1, block) over the "
    "decoding requests in each KV group (from the current chunk or window on in a chunked or sliding one; in a "
    "state group its state pages), shared prefix blocks once",
    "running": "num_requests_running vs requests that have some but not all of their tokens",
    "waiting": "num_requests_waiting vs requests in flight without a token",
}


def _delivered_by(rec: RequestRecord, t: float) -> int:
    """Tokens the client had received of this request by time t (the records' clock)."""
    sent = rec.sent or 0.0
    k = sum(1 for c in rec.chunk_times if sent + c <= t + 1e-6)
    counted = rec.chunk_tokens[k - 1] if k and len(rec.chunk_tokens) >= k else None
    return counted if counted is not None else k


def unsettled(run: RunData, f: FreezeRecord) -> str | None:
    """Why a freeze's reading is no measurement (None: it is one): not settled, readings that
    disagree, or a server that counted other tokens than the client's records hold."""
    if not f.settled:
        return f"not settled: {f.error or 'the paused state did not settle'}"
    if len(f.readings) < 2:
        return "fewer than two readings while paused: nothing shows the state was still"
    a, b = (r.get("values") or {} for r in f.readings[-2:])
    differ = [k for k in SETTLE_KEYS if a.get(k) != b.get(k)]
    if differ:
        return f"its last two readings disagree on {', '.join(differ)}: the engine was not still"
    g0 = run.before.values.get("generation_tokens") if run.before else None
    g1 = b.get("generation_tokens")
    if g0 is not None and g1 is not None:
        live = {r["id"] for r in f.requests}
        finished = sum(
            (x.output_tokens if x.output_tokens is not None else x.delivered)
            for x in run.records
            if x.id not in live and x.sent is not None and f.t_pause is not None and x.sent <= f.t_pause
        )
        client = finished + sum(r["delivered"] for r in f.requests)
        if g1 - g0 != client:
            return (
                f"the server had generated {g1 - g0:g} tokens in this run, the client's records hold {client}: "
                "the reading and the client's view are not of the same moment"
            )
    return None


def settled_freezes(run: RunData) -> list[FreezeRecord]:
    """The run's freezes whose reading is a measurement (unsettled: None), in order."""
    return [f for f in run.freezes if unsettled(run, f) is None]


def records_at(run: RunData, f: FreezeRecord) -> list[str]:
    """The freeze's list of live requests against the records: each is a record of this run with
    exactly the tokens the freeze says it had, and no other record was streaming across it."""
    if f.t_pause is None:
        return ["the freeze has no pause time"]
    paused = f.t_pause
    by_id = {r.id: r for r in run.records}
    bad = []
    t = f.t_resume if f.t_resume is not None else paused
    listed = set()
    for q in f.requests:
        listed.add(q["id"])
        rec = by_id.get(q["id"])
        if rec is None:
            bad.append(f"{q['id']} is in the freeze but not in records.jsonl")
        elif rec.sent is None or rec.sent > paused:
            bad.append(f"{q['id']} was sent after the pause")
        elif _delivered_by(rec, t) != q["delivered"]:
            bad.append(f"{q['id']}: the freeze saw {q['delivered']} tokens, the record {_delivered_by(rec, t)}")
        elif q.get("prompt_tokens") != rec.asked_prompt_tokens:
            bad.append(
                f"{q['id']}: the freeze says a {q.get('prompt_tokens')}-token prompt, the record "
                f"{rec.asked_prompt_tokens}"
            )
    for rec in run.records:
        if (
            rec.id not in listed
            and rec.sent is not None
            and rec.sent <= paused
            and any(rec.sent + c > t + 1e-6 for c in rec.chunk_times)
        ):
            bad.append(f"{rec.id} was streaming across the freeze but is not in it")
    return bad


def freeze_checks(
    run: RunData,
    usable_blocks: int,
    block_size: int,
    groups: tuple[HeldGroup, ...] = ONE_FULL_GROUP,
    lookups: dict[str, Lookup] | None = None,
    one_step: frozenset[str] = frozenset(),
    shared: bool = True,
) -> list[Check]:
    """Per planned freeze of `run` (a RunData): the records tied to it, and three exact checks. A
    freeze not taken, not settled, or whose reading is no measurement is `not measured`; so is a
    run whose server could not be paused; freezes turned off in the profile are not judged.
    `shared`: equal prompt blocks are one (vLLM's prefix cache on)."""
    out: list[Check] = []
    if run.freeze_status in ("off", "unavailable") and run.freeze_points:
        off = run.freeze_status == "off"
        out.append(
            Check(
                name=f"{run.name}.freezes",
                expected="held and read",
                observed=None,
                passed=None,
                tolerance="exact",
                judged=not off,
                explanation=(
                    "freezes turned off (observe.freezes: false)"
                    if off
                    else run.freeze_note or "the server has no usable /pause"
                ),
            )
        )
        return out
    taken = {f.name: f for f in run.freezes}
    for point in run.freeze_points:
        name = point["name"]
        rec = taken.get(name)
        why: str | None = None
        if rec is None:
            why = (
                f"not taken: after {point.get('after_sent', 0)} requests sent, the run never had a request "
                "decoding with none in prefill"
                if point["running"] == 0
                else f"not taken: the run never had exactly {point['running']} requests decoding with "
                f">= {point['min_tokens']} tokens" + (" and some waiting" if point["waiting"] else "")
            ) + (" (cut short)" if run.interrupted else "")
        elif any(not r.get("exact_counts", True) for r in rec.requests):
            why = "the server did not send per-chunk usage: delivered tokens are not exact"
        else:
            why = unsettled(run, rec)
        if why or rec is None:
            for what in ("records", "kv_blocks", "running", "waiting"):
                out.append(
                    Check(
                        name=f"{run.name}.{name}.{what}",
                        expected=None,
                        observed=None,
                        passed=None,
                        tolerance="exact",
                        explanation=why or "",
                    )
                )
            continue
        bad = records_at(run, rec)
        out.append(
            Check(
                name=f"{run.name}.{name}.records",
                expected="the records' view",
                observed="agrees" if not bad else f"{len(bad)} differ",
                passed=not bad,
                tolerance="exact",
                explanation="the freeze's live requests and their tokens against records.jsonl"
                + (": " + "; ".join(bad[:3]) if bad else ""),
            )
        )
        exp = expected_state(
            rec.requests, run.served_ids, block_size, groups, lookups, one_step, reported_hits(run), shared
        )
        if exp["kv_blocks"] is not None and (clash := contradicted(run, rec, lookups, groups)):
            exp |= {"kv_blocks": None, "why": clash}
        obs = observed_state(rec.reading, usable_blocks)
        if exp["running"] is not None and (lost := preempted_unseen(run, exp["running"], obs["running"])):
            exp |= {"kv_blocks": None, "running": None, "waiting": None, "why": lost}
        when = (
            f"{exp['running']} decoding ({', '.join(str(r['delivered']) for r in rec.requests if r['delivered'])}"
            f" tokens), {exp['waiting']} waiting, held {1e3 * ((rec.t_resumed or 0) - (rec.t_pause or 0)):.0f} ms"
        )
        for what in ("kv_blocks", "running", "waiting"):
            o = obs[what]
            out.append(
                Check(
                    name=f"{run.name}.{name}.{what}",
                    expected=exp[what],
                    observed=o,
                    passed=None if o is None or exp[what] is None else o == exp[what],
                    tolerance="exact",
                    explanation=((exp.get("why") or "") if exp[what] is None else "") + f"{_WHAT[what]}; {when}",
                )
            )
    return out


def preempted_unseen(run: RunData, decoding: int, running: float | None) -> str | None:
    """A preempted request waits, its blocks freed, while the client still sees it decoding (its
    delivered tokens stay). In a run that preempted, vLLM running fewer than the client's decoding
    requests leaves the freeze not measured; the counter is not read at the freeze, where it can lag
    the step that preempted (a tiny Qwen3-Next swept at 5: 4 running, 1 waiting, the freeze's reading
    still at the run's start count, 15 preemptions by its end). One re-admitted by then is judged."""
    p0 = run.before.values.get("num_preemptions") if run.before else None
    p1 = run.after.values.get("num_preemptions") if run.after else None
    if p0 is None or p1 is None or p1 <= p0 or running is None or running >= decoding:
        return None
    return (
        f"not measured: this run preempted {p1 - p0:g} times and vLLM ran {running:g} of the {decoding} requests "
        "the client saw decoding: which one waits, its blocks freed, is not known; "
    )


def reported_hits(run: RunData) -> dict[str, int | None]:
    """Each request's prefix hit as vLLM reported it (usage's cached_tokens; None: not reported)."""
    return {r.id: r.cached_tokens for r in run.records}


def contradicted(
    run: RunData, f: FreezeRecord, lookups: dict[str, Lookup] | None, groups: tuple[HeldGroup, ...]
) -> str | None:
    """Beside a window or a hybrid's state, the copies a freeze counts follow each request's predicted hit: where vLLM
    reported another hit for a request in the freeze (its cached_tokens), which copies it holds is
    not known, and the freeze is not measured (the cached-token audit judges the hit itself)."""
    if lookups is None or all(g.window is None and g.state is None for g in groups):
        return None
    by_id = {r.id: r.cached_tokens for r in run.records}
    for q in f.requests:
        got, look = by_id.get(q["id"]), lookups.get(q["id"])
        if q["delivered"] and got is not None and look is not None and look.hit_tokens != got:
            return (
                f"not measured: the prefix model gives {q['id']} a hit of {look.hit_tokens} tokens, vLLM "
                f"reported {got}: which copies of its prompt blocks it holds is not known; "
            )
    return None


def freeze_intervals(run: RunData) -> list[tuple[float, float]]:
    """The paused intervals of a run, in the records' clock (seconds from the run's start)."""
    out = []
    for f in run.freezes:
        if f.t_pause is not None:
            end = f.t_resumed if f.t_resumed is not None else f.t_resume
            out.append((f.t_pause, end if end is not None else f.t_pause))
    return out


def utilization(run: RunData, usable_blocks: int) -> float | None:
    """The largest KV reading at a settled freeze of the run, over the usable blocks."""
    read = [observed_state(f.reading, usable_blocks)["kv_blocks"] for f in settled_freezes(run)]
    vals = [v for v in read if v is not None]
    return max(vals) / usable_blocks if vals and usable_blocks else None
