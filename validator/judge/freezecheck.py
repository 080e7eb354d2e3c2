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

from validator.judge.check import Check
from validator.judge.predict import block_keys
from validator.units import cdiv


def expected_state(requests: list[dict], prompts: dict, block_size: int) -> dict:
    """Blocks in use, running and waiting that the client's view implies."""
    seen: set = set()
    blocks = running = waiting = 0
    for r in requests:
        d, p, out = r["delivered"], r["prompt_tokens"], r.get("output_tokens")
        if d == 0:
            waiting += 1
            continue
        if out is not None and d >= out:
            continue
        running += 1
        own = cdiv(p + d - 1, block_size)
        prompt = prompts.get(r["id"])
        shareable = block_keys(prompt, block_size, (p - 1) // block_size) if isinstance(prompt, list) else []
        shared = sum(1 for k in shareable if k in seen)
        seen.update(shareable)
        blocks += own - shared
    return {"kv_blocks": blocks, "running": running, "waiting": waiting}


def _as_count(x: float | None, digits: int = 6):
    """A gauge turned into a count: an int when it is one (to 1e-6), else the float as read."""
    if x is None:
        return None
    r = round(x, digits)
    return int(round(r)) if abs(r - round(r)) < 1e-6 else r


def observed_state(reading, usable_blocks: int) -> dict:
    v = reading.values if reading is not None else {}
    u = v.get("kv_cache_usage_perc")
    return {
        "kv_blocks": None if u is None else _as_count(u * usable_blocks),
        "running": _as_count(v.get("num_requests_running")),
        "waiting": _as_count(v.get("num_requests_waiting")),
    }


_WHAT = {
    "kv_blocks": "kv_cache_usage_perc x usable blocks vs sum of cdiv(prompt + delivered - 1, block) over the "
    "decoding requests, shared prefix blocks once",
    "running": "num_requests_running vs requests that have some but not all of their tokens",
    "waiting": "num_requests_waiting vs requests in flight without a token",
}


def freeze_checks(run, usable_blocks: int, block_size: int) -> list[Check]:
    """Three exact checks per planned freeze of `run` (a RunData); untaken or unsettled freezes are
    not measured, and so is a run whose server could not be paused."""
    out: list[Check] = []
    if run.freeze_note:
        judged = "turned off" not in run.freeze_note
        out.append(
            Check(
                name=f"{run.name}.freezes",
                expected="held and read",
                observed=None,
                passed=None,
                tolerance="exact",
                explanation=run.freeze_note,
                judged=judged,
            )
        )
        return out
    taken = {f.name: f for f in run.freezes}
    for point in run.freeze_points:
        name = point["name"]
        rec = taken.get(name)
        why = None
        if rec is None:
            why = (
                f"not taken: the run never had exactly {point['running']} requests decoding with "
                f">= {point['min_tokens']} tokens"
                + (" and some waiting" if point["waiting"] else "")
                + (" (cut short)" if run.interrupted else "")
            )
        elif rec.error and not rec.settled:
            why = f"not read: {rec.error}"
        elif any(not r.get("exact_counts", True) for r in rec.requests):
            why = "the server did not send per-chunk usage: delivered tokens are not exact"
        if why:
            for what in ("kv_blocks", "running", "waiting"):
                out.append(
                    Check(
                        name=f"{run.name}.{name}.{what}",
                        expected=None,
                        observed=None,
                        passed=None,
                        tolerance="exact",
                        explanation=why,
                    )
                )
            continue
        exp = expected_state(rec.requests, run.prompts, block_size)
        obs = observed_state(rec.reading, usable_blocks)
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
                    passed=None if o is None else o == exp[what],
                    tolerance="exact",
                    explanation=f"{_WHAT[what]}; {when}",
                )
            )
    return out


def freeze_intervals(run) -> list[tuple[float, float]]:
    """The paused intervals of a run, in the records' clock (seconds from the run's start)."""
    out = []
    for f in run.freezes:
        if f.t_pause is not None:
            end = f.t_resumed if f.t_resumed is not None else f.t_resume
            out.append((f.t_pause, end if end is not None else f.t_pause))
    return out


def utilization(run, usable_blocks: int) -> float | None:
    """The largest KV reading at a settled freeze of the run, over the usable blocks."""
    vals = [observed_state(f.reading, usable_blocks)["kv_blocks"] for f in run.freezes if f.settled]
    vals = [v for v in vals if v is not None]
    return max(vals) / usable_blocks if vals and usable_blocks else None
