"""What a freeze's client view implies the engine holds (pure): blocks in each KV group, running and
waiting requests. freezecheck.py compares it with the server's reading."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from validator.flags import flag_key, names
from validator.judge.layout import ONE_FULL_GROUP, HeldGroup, align_block
from validator.judge.predict import Lookup, block_keys
from validator.rundir.rundata import RunData
from validator.units import cdiv

Prompts = dict[str, Any]  # request id -> the prompt as saved (token ids, or text)


FRESH = (
    "not measured: a request had its first token only, and which of its chunk's or window's blocks vLLM "
    "freed then depends on its cache hit and on whether its prefill took one step (known where the prompts "
    "in flight with it fit the --max-num-batched-tokens kvgate started vLLM with); "
)
FRESH_STATE = (
    "not measured: a request had its first token only, and how many state pages vLLM held for it then follows "
    "its prefill's last chunk: known beside align-mode state of two pages a request whose block fits the "
    "--max-num-batched-tokens kvgate started vLLM with, where the request's cache hit falls short of the block "
    "boundary before its last token, in a run that never preempted; "
)
NO_IDS = (
    "not measured: beside state groups which prompt blocks requests share follows their token ids, and a "
    "prompt in flight was saved as text; "
)
# flags that cap a prefill's chunk below the step's budget: then one step is not implied by the budget
CHUNK_CAPS = ("--long-prefill-token-threshold", "--max-num-partial-prefills")
LAUNCHED_ARGV = "launched_argv"  # what the judge adds to the plan's shown keys: startup.json's argv
NO_LOOKUP = (
    "not measured: beside a sliding-window group which copy of a prompt block a request holds follows the "
    "window's cache checkpoints, modelled for vLLM >= 0.32 at the default prefix_cache_retention_interval "
    "and prompts sent as token ids only; "
)


def expected_state(
    requests: list[dict[str, Any]],
    prompts: Prompts,
    block_size: int,
    groups: tuple[HeldGroup, ...] = ONE_FULL_GROUP,
    lookups: dict[str, Lookup] | None = None,
    one_step: frozenset[str] = frozenset(),
    hits: dict[str, int | None] | None = None,
    shared: bool = True,
) -> dict[str, Any]:
    """Blocks in use, running and waiting that the client's view implies: in each KV group, the
    blocks each decoding request holds there (all of them, or from its current chunk or window on),
    shared prompt blocks once (`shared`: vLLM runs with its prefix cache, without which nothing is).

    vLLM frees a chunk's or a window's blocks when it schedules a step (remove_skipped_blocks, on the
    tokens computed before that step): a request with d >= 2 tokens was last scheduled for a decode
    step with n - 1 of its n positions computed. One with a single token was last scheduled for its
    prefill, with only its cache hit computed where that prefill took one step (`one_step`:
    one_step_prefills) and its hit is known (`lookups`); otherwise where a group frees blocks they are not
    known from the client's view, and kv_blocks is None (not measured).

    Beside a sliding-window group, which copy of a prompt block a request holds follows its lookup
    (`lookups`, predict.PrefixCacheModel): a hit shares the first cached copy, a block it cached first
    is that copy, any other is its own (a prefix the window group made it miss is held twice). Each
    group counts its blocks at its own size (HeldGroup.size: Gemma 4's differ), the plan's otherwise.

    Beside state groups (hybrids), a state group holds HeldGroup.state_held pages a request. Where
    vLLM keeps the states at its checkpoints (`lookups` given), which copy of a prompt block a request
    holds follows its lookup as beside a window; otherwise a block is shared where vLLM reported the
    requests hit it (`hits`: cached_tokens), and one that a live request computed itself while
    another hit it is not known to be the same copy: not measured."""
    blocks = running = waiting = 0
    live = []
    ids: list[str] = []
    stateful = [g for g in groups if g.state is not None]
    aligned = align_block(groups, block_size)
    # which copy a block is follows each request's lookup: beside a window, or a hybrid's checkpoints
    windowed = any(g.window is not None for g in groups) or bool(stateful and lookups is not None)
    for r in requests:
        d, p, out = r["delivered"], r["prompt_tokens"], r.get("output_tokens")
        if d == 0:
            waiting += 1
        elif out is None or d < out:
            running += 1
            prompt = prompts.get(r["id"])
            keys = {
                bs: block_keys(prompt, bs, None if windowed else (p - 1) // bs)
                if shared and isinstance(prompt, list)
                else []
                for bs in {g.size(block_size) for g in groups}
            }
            look = (lookups or {}).get(r["id"])
            computed = p + d - 2 if d >= 2 else first_step(r["id"], p, look, one_step, aligned, hits)
            live.append((p + d - 1, computed, keys, look))
            ids.append(r["id"])
    state: dict[str, Any] = {"kv_blocks": None, "running": running, "waiting": waiting}
    if any(g.frees for g in groups) and any(c is None for _, c, _, _ in live):
        return state | {"why": FRESH}
    if stateful and any(c is None for _, c, _, _ in live):
        return state | {"why": FRESH_STATE}
    if windowed and any(look is None for _, _, _, look in live):
        return state | {"why": NO_LOOKUP}
    if stateful:
        if any(not isinstance(prompts.get(i), list) for i in ids):
            return state | {"why": NO_IDS}
        blocks = sum(g.state_held(computed or 0, block_size) for g in stateful for _, computed, _, _ in live)
        if not windowed:  # no lookups: the hits vLLM reported say which blocks are shared
            common = hybrid_shared(live, ids, hits or {}, {g.size(block_size) for g in groups if g.state is None})
            if isinstance(common, str):
                return state | {"why": common}
            for g in groups:
                if g.state is None:
                    bs = g.size(block_size)
                    blocks += sum(cdiv(n, bs) for n, _, _, _ in live) - common[bs]
            return state | {"kv_blocks": blocks}
        groups = tuple(g for g in groups if g.state is None)  # the attention groups, by the lookups below
    for g in groups:
        seen: set[int] = set()
        bs = g.size(block_size)  # Gemma 4: each group's blocks at its own size
        for n, computed, by_size, look in live:
            held = by_size[bs]
            # which copy a block is follows the lookup beside a window; elsewhere equal blocks are one
            copies = look if windowed else None
            hit = None if copies is None else copies.hit_tokens // bs
            first = frozenset() if copies is None else copies.first_copy.get(g.cache, frozenset())
            for j in range(g.first_held(computed or 0, block_size), cdiv(n, bs)):
                if j < len(held) and (hit is None or j < hit or j in first):
                    if held[j] in seen:
                        continue
                    seen.add(held[j])
                blocks += 1
    return state | {"kv_blocks": blocks}


AMBIGUOUS = (
    "not measured: beside state groups a prompt block is shared only where the requests hit it; {a} computed "
    "block {j} itself while {b} reports a hit on the same content, and whether {b} holds {a}'s copy or one "
    "cached before is not known from the client's view; "
)
NO_HIT = (
    "not measured: beside state groups a prompt block is shared only where the requests hit it, and vLLM "
    "reported no cached_tokens for {a}, whose prompt shares blocks with another request in flight; "
)


def hybrid_shared(
    live: list[tuple[int, int | None, dict[int, list[int]], Any]],
    ids: list[str],
    hits: dict[str, int | None],
    sizes: set[int],
) -> dict[int, int] | str:
    """Beside state groups: per attention block size, the blocks the live requests hold twice over
    (a block hit by several is one block), or why that is not known. A request holds its first
    hit // block blocks from the cache: all of them equal are one. Blocks it computed are its own
    (vLLM does not merge a computed block into a cached copy), except that where another live request
    hit the same content, that hit may be on this very block: not known."""
    out = {}
    for bs in sizes:
        count = Counter(k for _, _, keys, _ in live for k in set(keys.get(bs, [])))
        hit_by: dict[int, str] = {}
        own_by: dict[int, tuple[str, int]] = {}
        twice = 0
        for rid, (_, _, keys, _) in zip(ids, live, strict=True):
            held, got = keys.get(bs, []), hits.get(rid)
            if got is None:
                if any(count[k] > 1 for k in held):
                    return NO_HIT.format(a=rid)
                continue
            for j, k in enumerate(held):
                if count[k] < 2:
                    continue  # no other request in flight holds this content
                if j < got // bs:
                    if k in own_by:
                        return AMBIGUOUS.format(a=own_by[k][0], j=own_by[k][1], b=rid)
                    twice += k in hit_by
                    hit_by.setdefault(k, rid)
                elif k in hit_by:
                    return AMBIGUOUS.format(a=rid, j=j, b=hit_by[k])
                else:
                    own_by.setdefault(k, (rid, j))
        out[bs] = twice
    return out


def launched_budget(argv: Any) -> int | None:
    """The step's token budget vLLM was started with (--max-num-batched-tokens in the argv kvgate
    launched, startup.json's), or None: a server kvgate did not start (--url), no such flag, or a flag
    that caps a prefill's chunk below it, in any spelling vLLM reads (flags.flag_key)."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    keys = [flag_key(a) for a in argv]
    if any(k is not None and names(k, cap) for k in keys for cap in CHUNK_CAPS):
        return None
    budget = None
    for i, k in enumerate(keys):
        if k == "--max-num-batched-tokens":  # kvgate's own flag: refused in the user's extra args
            value = argv[i].split("=", 1)[1] if "=" in argv[i] else (argv[i + 1] if i + 1 < len(argv) else "")
            budget = int(value) if value.isdigit() else None
    return budget


def first_step(
    rid: str,
    p: int,
    look: Lookup | None,
    one_step: frozenset[str],
    aligned: int | None,
    hits: dict[str, int | None] | None,
) -> int | None:
    """The tokens a request caught at its first token had computed when its last prefill step was
    scheduled: its hit, where that prefill took one step; beside align-mode state (`aligned`), the block
    boundary before its last token (its last chunk's start, _mamba_block_aligned_split), where its hit
    (the lookup, else what vLLM reported) fell short of it: a hit reaching it holds the page at that
    boundary shared with the requests that hit it too. None: not known."""
    if rid not in one_step:
        return None
    if aligned is None:
        return look.hit_tokens if look else None
    last = (p - 1) // aligned * aligned
    hit = look.hit_tokens if look else (hits or {}).get(rid)
    return last if last == 0 or (hit is not None and hit < last) else None


def one_step_prefills(run: RunData, budget: int | None, max_running: int, aligned: int | None = None) -> frozenset[str]:
    """Requests a freeze caught at their first token whose last prefill step is known: it took one
    engine step, the largest `max_running` prompts of the requests in flight between its sending and
    its first token (itself included) fitting the step's token budget (`budget`: launched_budget), so
    the scheduler never cut its prefill into chunks; or, beside align-mode state (`aligned`:
    align_block), every one where that block fits the budget: a chunk the budget cuts ends on a block,
    so the last one starts at the block boundary before the last token whatever came before it, unless
    the run preempted (or its preemptions are not known). None where the budget is not known."""
    if not budget or max_running <= 0:
        return frozenset()
    fresh = {q.get("id") for f in run.freezes for q in f.requests if q.get("delivered") == 1}
    if aligned is not None:
        # a block wider than the budget is computed in sub-block chunks; a request preempted after its
        # first token computes it again, from another hit: neither is known
        return frozenset(str(i) for i in fresh) if aligned <= budget and never_preempted(run) else frozenset()
    spans = []
    for r in run.records if fresh else ():
        if r.sent is None or r.prompt_tokens is None:
            continue
        end = r.sent + (r.done if r.done is not None else (r.chunk_times[-1] if r.chunk_times else math.inf))
        spans.append((r.id, r.sent, r.sent + r.chunk_times[0] if r.chunk_times else None, end, r.prompt_tokens))
    out = set()
    for rid, sent, first, _, _ in spans:
        if first is None or rid not in fresh:
            continue  # only those a freeze caught at their first token
        along = sorted((p for _, s, _, e, p in spans if s <= first and e >= sent), reverse=True)
        if sum(along[:max_running]) <= budget:
            out.add(rid)
    return frozenset(out)


def never_preempted(run: RunData) -> bool:
    """Whether the run's preemption counter stayed put from its start to its end. vLLM counts a
    preemption only with the preempted request's next token (the event rides on its next output), so
    the counter at a freeze misses a request preempted after its first token and computing it again:
    only the run's end says no request was."""
    a = run.before.values.get("num_preemptions") if run.before else None
    b = run.after.values.get("num_preemptions") if run.after else None
    return a is not None and b is not None and a == b
