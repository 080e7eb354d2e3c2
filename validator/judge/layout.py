"""Which checks rest on the judge's block model, and the layouts that model does not cover.

The freeze, sample, utilization, prefix-hit, cached-token and sweep predictions count blocks as one
full-attention KV group holds them: cdiv(tokens, block) a request, shared prompt blocks once. A
layout of several groups (sliding-window or chunked-local layers beside full ones, per-request
state of hybrids) holds blocks per group and frees the ones that leave a window or a chunk, so
those predictions do not apply to it: its block checks are `not measured`, saying why, whatever
the comparison gave (a mismatch there is no evidence against vLLM, and a match no evidence for it).
The start-up checks, the request counts at a freeze and the latency checks are layout-free and stay;
so do the freezes' block counts where every group is full or chunked-local attention: those count
each group's blocks (HeldGroup).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from validator.judge.check import Check

# the kinds of group the block model counts (plan.json's kv_groups kind)
ONE_GROUP_KINDS = ("FullAttentionSpec", "MLASpec")
MAX_GROUPS = 256  # a real layout has one per layer at most; a doctored plan.json gets no loop over more
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


@dataclass(frozen=True)
class HeldGroup:
    """One KV group as the freeze arithmetic counts a request's blocks in it: full attention holds
    them all; chunked local attention (Llama 4) frees each finished chunk, so at a freeze it holds the
    blocks from the start of the current chunk on (measured: 7 of 7 freezes of a tiny Llama 4)."""

    chunk: int | None = None

    def first_held(self, computed: int, block_size: int) -> int:
        return 0 if self.chunk is None else (computed // self.chunk * self.chunk) // block_size


ONE_FULL_GROUP = (HeldGroup(),)


@dataclass(frozen=True)
class BlockLayout:
    """plan.json's kv_groups as the judge reads them, once: `groups` the freeze arithmetic counts
    (None where it does not cover the layout: sliding windows, per-request state, a doctored list),
    `gap` why the one-group block model does not apply (None for one full-attention or MLA group)."""

    groups: tuple[HeldGroup, ...] | None
    gap: str | None

    @property
    def freeze_groups(self) -> tuple[HeldGroup, ...]:
        return self.groups or ONE_FULL_GROUP  # where not covered, the freezes' checks are not measured


def block_layout(kv_groups: Any) -> BlockLayout:
    """A plan.json from before kv_groups was written had one full group."""
    if not isinstance(kv_groups, list) or not kv_groups:
        return BlockLayout(ONE_FULL_GROUP, None)
    if len(kv_groups) > MAX_GROUPS:
        return BlockLayout(
            None, f"not modelled for this layout ({len(kv_groups)} KV cache groups listed, more than any model has)"
        )
    kinds, groups = [], []
    for g in kv_groups:
        kind = g.get("kind") if isinstance(g, dict) else None
        chunk = g.get("attention_chunk_size") if isinstance(g, dict) else None
        kinds.append(kind)
        if kind in ONE_GROUP_KINDS:
            groups.append(HeldGroup())
        elif kind == "ChunkedLocalSpec" and type(chunk) is int and chunk > 0:
            groups.append(HeldGroup(chunk))
    covered = tuple(groups) if len(groups) == len(kinds) else None
    if len(kinds) == 1 and covered:
        return BlockLayout(covered, None)
    named = ", ".join(sorted({str(k).removesuffix("Spec") for k in kinds}))
    gap = (
        f"not modelled for this layout ({len(kinds)} KV cache groups: {named}): the judge counts blocks as one "
        "full-attention group holds them"
    )
    return BlockLayout(covered, gap)


def outside_the_block_model(
    checks: list[Check], reason: str, sweep_runs: set[str], freezes_covered: bool = False
) -> list[Check]:
    """The block checks as `not measured` with the reason; sweep steps' preemption predictions too.
    With `freezes_covered` the freezes' kv_blocks stay judged (their arithmetic counts each group)."""
    out = []
    for c in checks:
        if freezes_covered and c.name.endswith(".kv_blocks"):
            out.append(c)
            continue
        blocky = c.name.endswith(BLOCK_CHECKS) or (
            c.name.endswith(".preemptions") and c.name.rsplit(".", 1)[0] in sweep_runs
        )
        if blocky and c.judged and not c.explanation.startswith(reason):
            c = replace(c, passed=None, explanation=f"{reason}; {c.explanation}")
        out.append(c)
    return out
