"""Which checks rest on the judge's block model, and the layouts that model does not cover.

The freeze, sample, utilization, prefix-hit, cached-token and sweep predictions count blocks as one
full-attention KV group holds them: cdiv(tokens, block) a request, shared prompt blocks once. A
layout of several groups (sliding-window or chunked-local layers beside full ones, per-request
state of hybrids) holds blocks per group and frees the ones that leave a window or a chunk, so
those predictions do not apply to it: its block checks are `not measured`, saying why, whatever
the comparison gave (a mismatch there is no evidence against vLLM, and a match no evidence for it).
The start-up checks, the request counts at a freeze and the latency checks are layout-free and stay.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from validator.judge.check import Check

# the kinds of group the block model counts (plan.json's kv_groups kind)
ONE_GROUP_KINDS = ("FullAttentionSpec", "MLASpec")
BLOCK_CHECKS = (
    ".kv_blocks",
    ".kv_samples_bound",
    ".kv_utilization",
    ".prefix_hits",
    ".cached_tokens",
    ".admitted",
    ".waiting_at_start",
    "sweep.first_preemption",
)


def uncovered_layout(kv_groups: Any) -> str | None:
    """Why the block model does not cover plan.json's kv_groups; None when it does (one group of
    full attention or MLA, or a plan.json from before kv_groups was written: one group then)."""
    if not isinstance(kv_groups, list) or not kv_groups:
        return None
    kinds = [g.get("kind") if isinstance(g, dict) else None for g in kv_groups]
    if len(kinds) == 1 and kinds[0] in ONE_GROUP_KINDS:
        return None
    named = ", ".join(sorted({str(k).removesuffix("Spec") for k in kinds}))
    return (
        f"not modelled for this layout ({len(kinds)} KV cache groups: {named}): the judge counts blocks as one "
        "full-attention group holds them"
    )


def outside_the_block_model(checks: list[Check], reason: str, sweep_runs: set[str]) -> list[Check]:
    """The block checks as `not measured` with the reason; sweep steps' preemption predictions too."""
    out = []
    for c in checks:
        blocky = c.name.endswith(BLOCK_CHECKS) or (
            c.name.endswith(".preemptions") and c.name.rsplit(".", 1)[0] in sweep_runs
        )
        if blocky and c.judged and not c.explanation.startswith(reason):
            c = replace(c, passed=None, explanation=f"{reason}; {c.explanation}")
        out.append(c)
    return out
