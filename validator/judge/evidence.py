"""Is a run's evidence whole and its own? Checks over the run directory itself (pure), each able to
fail: planned requests against records, records against the saved workload, the run's notes against
the plan, and every counter against its second source (meta.json's snapshots against the scrapes in
metrics.jsonl). And what an incomplete run does to its other checks: a check that would pass on part
of the evidence is `not measured`, with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from loadgen.results.records import prompt_digest
from validator.judge.check import Check
from validator.rundir.rundata import RunData
from validator.rundir.schedule import RunKind

COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "num_preemptions", "prompt_tokens", "generation_tokens")


def _first(items: list[str], n: int = 3) -> str:
    return "; ".join(items[:n]) + (f"; and {len(items) - n} more" if len(items) > n else "")


def _agreement(name: str, expected: str, bad: list[str], what: str) -> Check:
    """An exact cross-check of two files: passes when nothing differs, and names the first differences."""
    return Check(
        name=name,
        expected=expected,
        observed="agree" if not bad else f"{len(bad)} differ",
        passed=not bad,
        tolerance="exact",
        explanation=what + (f": {_first(bad)}" if bad else ""),
    )


def incomplete(run: RunData) -> str | None:
    """Why this run's evidence is not whole (None: it is)."""
    reasons = list(run.missing.values())
    if run.planned is not None and not run.missing and len(run.records) < run.planned.requests:
        reasons.append(f"{run.name}: {len(run.records)} of {run.planned.requests} requests recorded")
    return "; ".join(reasons) or None


def requests_completed(run: RunData) -> Check:
    """Planned vs recorded vs ok: a truncated records.jsonl is named here directly."""
    ok = sum(1 for r in run.records if r.ok)
    observed = f"{len(run.records)} recorded, {ok} ok"
    name = f"{run.name}.requests_completed"
    if run.planned is None:
        return Check(
            name=name,
            expected=None,
            observed=observed,
            passed=None,
            judged=False,
            tolerance="exact",
            explanation="not judged: plan.json has no schedule (a run directory from before kvgate saved "
            "one), so the planned count is not known",
        )
    planned = run.planned.requests
    if run.missing:
        return Check(
            name=name,
            expected=planned,
            observed=observed,
            passed=None,
            tolerance="exact",
            explanation="; ".join(run.missing.values()),
        )
    if len(run.records) == planned:
        return Check(
            name=name,
            expected=planned,
            observed=observed,
            passed=True,
            tolerance="exact",
            explanation="every planned request has its record (failures are judged by error_rate)",
        )
    if len(run.records) < planned and run.interrupted:
        return Check(
            name=name,
            expected=planned,
            observed=observed,
            passed=None,
            tolerance="exact",
            explanation=f"the run was cut short: {len(run.records)} of {planned} requests recorded",
        )
    return Check(
        name=name,
        expected=planned,
        observed=observed,
        passed=False,
        tolerance="exact",
        explanation=f"plan.json planned {planned} requests, records.jsonl holds {len(run.records)}"
        + ("" if len(run.records) > planned else " and meta.json says the run ended"),
    )


def records_match(run: RunData) -> Check:
    """Every record is this run's: its `run`, an id of the saved workload (once), the prompt length
    and the asked output as saved."""
    name = f"{run.name}.records_match_workload"
    wl = run.missing.get("workload.jsonl") or run.missing.get("run")
    if wl:
        return Check(
            name=name, expected="records = workload", observed=None, passed=None, tolerance="exact", explanation=wl
        )
    bad: list[str] = []
    seen: set[str] = set()
    ids_of = run.served_ids
    for r in run.records:
        if r.run != run.name:
            bad.append(f"{r.id} says run {r.run!r}")
        if r.id in seen:
            bad.append(f"{r.id} recorded twice")
        seen.add(r.id)
        prompt = run.prompts.get(r.id)
        if prompt is None:
            bad.append(f"{r.id} is not in workload.jsonl")
            continue
        ids = ids_of.get(r.id)
        if ids is not None and r.asked_prompt_tokens is not None and r.asked_prompt_tokens != len(ids):
            bad.append(f"{r.id} asked {r.asked_prompt_tokens} prompt tokens, workload.jsonl holds {len(ids)}")
        elif r.prompt_digest is not None and r.prompt_digest != prompt_digest(prompt, run.token_ids.get(r.id)):
            bad.append(f"{r.id} was sent another prompt than workload.jsonl's (digest {r.prompt_digest})")
        elif r.prompt_digest is None and run.kind is RunKind.DATASET:
            bad.append(f"{r.id} carries no prompt digest: nothing ties it to the prompt saved")
        if r.asked_output_tokens is not None and r.asked_output_tokens != run.outputs.get(r.id):
            bad.append(f"{r.id} asked {r.asked_output_tokens} output tokens, workload.jsonl {run.outputs.get(r.id)}")
    return _agreement(
        name, "records = workload", bad, "records.jsonl against workload.jsonl: run, id once, prompt and output lengths"
    )


def tokens_exact(run: RunData) -> Check:
    """Served prompt and output tokens against what the saved workload asked (not the record's own
    notes): a served count off by one, made consistent with its chunks, still differs from the ask."""
    name = f"{run.name}.tokens_exact"
    ok = [r for r in run.records if r.ok]
    gone = run.missing.get("workload.jsonl") or run.missing.get("run")
    if gone:
        return Check(
            name=name,
            expected=0,
            observed=None,
            passed=None,
            tolerance="exact",
            explanation=f"served tokens against the asked ones: {gone}",
        )
    if not ok:
        return Check(
            name=name,
            expected=0,
            observed=None,
            passed=None,
            tolerance="exact",
            explanation="served prompt and output tokens equal what was asked (no request succeeded: "
            "nothing to compare)",
        )
    bad = []
    ids_of = run.served_ids
    for r in ok:
        ids, out = ids_of.get(r.id), run.outputs.get(r.id)
        want_p = len(ids) if ids is not None else r.asked_prompt_tokens
        if r.output_tokens != out:
            bad.append(f"{r.id}: output asked {out} served {r.output_tokens}")
        elif want_p is not None and r.prompt_tokens != want_p:
            bad.append(f"{r.id}: prompt asked {want_p} served {r.prompt_tokens}")
        elif r.chunk_tokens and r.chunk_tokens[-1] is not None and r.chunk_tokens[-1] != r.output_tokens:
            bad.append(f"{r.id}: its chunks count {r.chunk_tokens[-1]} tokens, its usage {r.output_tokens}")
    return Check(
        name=name,
        expected=0,
        observed=len(bad),
        passed=not bad,
        tolerance="exact",
        explanation="served prompt and output tokens (usage) equal what workload.jsonl asked"
        + (f": {_first(bad)}" if bad else ""),
    )


def notes_agree(run: RunData) -> Check | None:
    """meta.json's own notes against plan.json and profile.json (None: nothing to compare)."""
    if run.planned is None:
        return None
    gone = run.missing.get("meta.json") or run.missing.get("run")
    return Check(
        name=f"{run.name}.notes_agree",
        expected="meta.json = plan.json",
        observed="agree" if not run.contradictions else f"{len(run.contradictions)} differ",
        passed=None if gone else not run.contradictions,
        tolerance="exact",
        explanation="what the run noted (measured, cache, freeze points, freezes on) against the plan"
        + (f": {_first(run.contradictions)}" if run.contradictions else "")
        + (f"; {gone}" if gone else ""),
    )


def counters_agree(run: RunData) -> Check:
    """meta.json's before and after snapshots are scrapes saved in metrics.jsonl, and every counter
    scraped between them lies between their values, never falling: one source against the other."""
    name = f"{run.name}.counters_agree"
    if run.before is None or run.after is None:
        why = run.missing.get("run") or run.missing.get("meta.json") or "meta.json has no before or after snapshot"
        return Check(
            name=name,
            expected="meta.json = metrics.jsonl",
            observed=None,
            passed=None,
            tolerance="exact",
            explanation=why,
        )
    if "metrics.jsonl" in run.missing:
        return Check(
            name=name,
            expected="meta.json = metrics.jsonl",
            observed=None,
            passed=None,
            tolerance="exact",
            explanation="metrics.jsonl is missing: the snapshots in meta.json have no second source",
        )
    bad: list[str] = []
    for label, snap in (("before", run.before), ("after", run.after)):
        twin = [s for s in run.snapshots if s.t == snap.t]
        if not twin:
            bad.append(f"meta.json's {label} snapshot is not in metrics.jsonl")
        elif any(twin[0].values.get(k) != snap.values.get(k) for k in COUNTERS):
            k = next(k for k in COUNTERS if twin[0].values.get(k) != snap.values.get(k))
            bad.append(f"{k}: meta.json's {label} {snap.values.get(k)}, metrics.jsonl {twin[0].values.get(k)}")
    for k in COUNTERS:
        lo, hi = run.before.values.get(k), run.after.values.get(k)
        if lo is None or hi is None:
            continue
        read = [s.values.get(k) for s in sorted([*run.snapshots, *run.samples], key=lambda s: s.t)]
        seq = [v for v in read if v is not None]
        if any(v < lo or v > hi for v in seq) or any(b < a for a, b in zip(seq, seq[1:])):
            bad.append(
                f"{k} in metrics.jsonl leaves [{lo:g}, {hi:g}] (meta.json's before and after) or falls during the run"
            )
    return _agreement(
        name,
        "meta.json = metrics.jsonl",
        bad,
        "every counter's before and after (meta.json) against the scrapes in metrics.jsonl",
    )


def not_measured_without(checks: list[Check], reason: str) -> list[Check]:
    """A check that would pass on part of the evidence cannot: it becomes `not measured`, saying why.
    A failure stays a failure (what was seen contradicts the prediction already)."""
    out = []
    for c in checks:
        if (
            c.passed is not False
            and c.judged
            and not c.name.endswith((".requests_completed", ".files"))
            and not c.explanation.startswith(reason)
        ):
            c = replace(c, passed=None, explanation=f"{reason}: {c.explanation}")
        out.append(c)
    return out
