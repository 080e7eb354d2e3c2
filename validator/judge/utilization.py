"""The cold run's utilization (pure): do the planned limits fill most of the KV pool?

With one full-attention group a request at the limits holds what vLLM reserves for it, so the
largest reading at a freeze over the usable blocks says it. Where a group frees blocks (a sliding
window, a chunk), vLLM reserves for each request its window or chunk plus the tokens in flight (its
maximum concurrency counts that) while a decoding request holds only the window's tail: the blocks
held are not the measure; so does a hybrid's state group (two pages reserved, one held while it
decodes). There it is the requests running at a freeze of the cold run
(num_requests_running) over the maximum concurrency vLLM reported at start-up, both the server's
own word; the blocks those requests hold are judged exactly by the freezes.
"""

from __future__ import annotations

from validator.judge.check import Check
from validator.judge.freezecheck import observed_state, settled_freezes, utilization
from validator.judge.layout import HeldGroup
from validator.plan.record import PlanRecord
from validator.profile import TolerancesSection
from validator.rundir.rundata import RunData

SERVED_CONCURRENCY = "served_max_concurrency"  # what the judge adds to the plan's shown keys: vLLM's figure


def utilization_check(
    run: RunData,
    usable_blocks: int,
    peak: float | None,
    plan: PlanRecord,
    tol: TolerancesSection,
    groups: tuple[HeldGroup, ...],
) -> Check:
    if any(g.frees or g.state is not None for g in groups):
        return _reserved(run, plan, tol)
    util = utilization(run, usable_blocks)
    source = "at a freeze"
    if util is None and not run.freeze_points and peak is not None:
        util, source = peak / usable_blocks, "sampled"
    ok = None if util is None else util >= tol.min_kv_utilization
    if source == "sampled" and ok is False:
        ok = None  # a sample can miss the top: a low sampled peak is no evidence of a loose plan
    return Check(
        name="cold.kv_utilization",
        expected=f">= {tol.min_kv_utilization:.0%}",
        observed=None if util is None else round(util, 4),
        passed=ok,
        tolerance="fraction",
        explanation=f"the largest KV reading ({source}) over usable blocks: the planned limits fill most of the pool",
    )


def _reserved(run: RunData, plan: PlanRecord, tol: TolerancesSection) -> Check:
    readings = [observed_state(f.reading, 0)["running"] for f in settled_freezes(run)]
    running = max((r for r in readings if r is not None), default=None)
    conc = plan.shown.get(SERVED_CONCURRENCY)
    conc = conc if isinstance(conc, int | float) and not isinstance(conc, bool) and conc > 0 else None
    util = None if running is None or conc is None else running / conc
    why = (
        ""
        if util is not None
        else "not measured: "
        + ("no settled freeze of the cold run; " if running is None else "vLLM reported no maximum concurrency; ")
    )
    return Check(
        name="cold.kv_utilization",
        expected=f">= {tol.min_kv_utilization:.0%}",
        observed=None if util is None else round(util, 4),
        passed=None if util is None else util >= tol.min_kv_utilization,
        tolerance="fraction",
        explanation=f"{why}the most requests running at a freeze ({running}) over the maximum concurrency vLLM "
        f"reported ({conc if conc is None else round(conc, 2)}): on a layout whose window or chunk groups free "
        "blocks, or whose state groups reserve more pages than a decoding request holds, vLLM reserves more "
        "than the requests hold, so the limits' fill of the pool is counted in requests",
    )
