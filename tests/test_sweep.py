"""The capacity sweep's arithmetic (issue 24): the steps, who the ledger says runs, where vLLM must
first preempt, and a KV-binding profile planned (not refused) for a sweep."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from validator.errors import InputError
from validator.observe.sweep import admitted, held_at_full_length, steps_of, sweep_runs
from validator.profile import SweepSection


def plan_of(*flags: str):
    from validator.cli import build_parser, resolve_profile
    from validator.inputs import plan_input_from_profile
    from validator.plan.limits import make_plan

    prof = resolve_profile(
        build_parser().parse_args(["--profile", str(ROOT / "profiles" / "tiny-cpu-kvbound.yaml"), *flags])
    )
    return make_plan(plan_input_from_profile(prof)), prof


def test_a_kv_binding_profile_is_planned_for_a_sweep_and_refused_without_one():
    plan, prof = plan_of()
    assert plan.fits and prof.sweep.steps == "auto"
    assert any("the KV cache holds 4 full-length sequences, so vLLM preempts from 5" in n for n in plan.notes)
    plan, prof = plan_of("--profile", str(ROOT / "profiles" / "tiny-cpu.yaml"), "--max-num-seqs", "8")
    assert prof.sweep.steps is None and not plan.fits  # the same overcommit, no sweep: refused with the ledger
    assert "8 sequences x 16 blocks = 128 blocks > 64 usable blocks" in plan.reasons[0]
    plan, _ = plan_of("--profile", str(ROOT / "profiles" / "tiny-cpu.yaml"), "--max-num-seqs", "8", "--sweep", "1,2")
    assert plan.fits


def test_plan_only_previews_the_steps_the_sweep_starts_with():
    """`--plan-only` with a sweep lists its steps and what the ledger says of each, the figures the
    sweep's runs then freeze for: the KV-binding profile holds 4 to their last token (vLLM preempted
    from 5 in its live sweeps, tests/test_sweep_live.py), 8 run at once at most."""
    import json
    import subprocess
    import sys

    from validator.serve.argv import plan_record

    kvbound = str(ROOT / "profiles" / "tiny-cpu-kvbound.yaml")
    r = subprocess.run(
        [sys.executable, "-m", "validator", "--profile", kvbound, "--plan-only", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["sweep"]
    assert [(x["run"], x["running"], x["waiting"], x["past_kv_limit"]) for x in rows] == [
        ("sweep-c1", 1, 0, False),
        ("sweep-c2", 2, 0, False),
        ("sweep-c4", 4, 0, False),
        ("sweep-c5", 5, 0, True),
        ("sweep-c6", 6, 0, True),
        ("sweep-c8", 8, 0, True),
        ("sweep-c9", 8, 1, True),
    ]
    assert {(x["prompt_tokens"], x["output_tokens"], x["held_to_last_token"]) for x in rows} == {(128, 384, 4)}
    plan, prof = plan_of()
    runs = sweep_runs(plan_record(plan, prof), prof.sweep, prof.workload.seed)
    assert [(s.name, s.freezes[0].running, s.freezes[0].waiting) for s in runs] == [
        (x["run"], x["running"], x["waiting"]) for x in rows
    ]
    text = subprocess.run(
        [sys.executable, "-m", "validator", "--profile", kvbound, "--plan-only"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    ).stdout
    assert (
        "  sweep-c5     5 in flight, 10 requests: 5 run at the first tokens: past the KV limit, vLLM must preempt"
        in text
    )
    assert "  sweep-c4     4 in flight, 8 requests: 4 run at the first tokens\n" in text
    # no sweep asked: no preview
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "validator",
            "--profile",
            str(ROOT / "profiles" / "tiny-cpu.yaml"),
            "--plan-only",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0 and "sweep" not in json.loads(r.stdout)


def test_the_steps_go_from_one_past_the_kv_limit():
    assert steps_of("auto", held=4, max_num_seqs=8) == [1, 2, 4, 5, 6, 8, 9]
    assert steps_of("auto", held=1, max_num_seqs=1) == [1, 2, 3]
    assert steps_of("8, 2,2,1", held=4, max_num_seqs=8) == [1, 2, 8]
    for bad in ("", "0,1", "a,b", ",".join(str(i) for i in range(1, 20))):
        with pytest.raises(InputError, match="sweep.steps"):
            steps_of(bad, held=4, max_num_seqs=8)


def test_the_ledger_says_who_runs_who_waits_and_where_preemption_starts():
    from validator.serve.argv import plan_record

    plan, _ = plan_of()
    rec = plan_record(plan)
    assert held_at_full_length(rec, 128, 384) == 4  # cdiv(128 + 383, 32) = 16 blocks each, 64 usable
    assert held_at_full_length(rec, 128, 385) == 4  # 512 positions with KV: still 16 blocks
    assert held_at_full_length(rec, 128, 386) == 3  # 513: a 17th block each
    assert [admitted(rec, n, 128) for n in (1, 4, 8, 9, 20)] == [1, 4, 8, 8, 8]  # max_num_seqs 8
    assert admitted(rec, 9, 480) == 4  # 15 prompt blocks each: 4 fit in 64, the rest wait for blocks
    runs = sweep_runs(rec, SweepSection(steps="1,5,9", waves=2), seed=0)
    assert [(r.name, r.concurrency, len(r.workload.items)) for r in runs] == [
        ("sweep-c1", 1, 2),
        ("sweep-c5", 5, 10),
        ("sweep-c9", 9, 18),
    ]
    p = runs[2].freezes[0]
    assert (p.running, p.waiting) == (8, 1)
    with pytest.raises(InputError, match="exceed max_model_len"):
        sweep_runs(rec, SweepSection(steps="1", prompt_tokens=500, output_tokens=100), seed=0)


def test_bisection_measures_between_the_last_step_within_the_slos_and_the_first_beyond():
    from validator.observe.sweep import bisection_step

    assert bisection_step({1: True, 4: True, 5: True, 9: False}) == 7
    assert bisection_step({1: True, 4: True, 5: True, 7: True, 9: False}) == 8
    assert bisection_step({1: True, 4: True, 5: True, 7: True, 8: True, 9: False}) is None  # found: 8
    assert bisection_step({1: True, 2: False, 8: True}) is None  # adjacent: 1 is the capacity
    assert bisection_step({1: True, 4: False, 5: True, 9: True}) == 2  # up to which EVERY step held
    assert bisection_step({1: True, 9: True}) is None and bisection_step({1: False, 9: False}) is None


def _step_run(n, ttfts_ms, gap_ms=10.0, tokens=4, memory=None):
    from loadgen.results.records import RequestRecord
    from validator.rundir.rundata import RunData
    from validator.rundir.samples import MEMORY, Sample
    from validator.rundir.schedule import RunKind

    recs = [
        RequestRecord(
            id=f"c{n}-{i}",
            sent=0.0,
            chunk_times=[t / 1e3 + k * gap_ms / 1e3 for k in range(tokens)],
            output_tokens=tokens,
            status=200,
        )
        for i, t in enumerate(ttfts_ms)
    ]
    samples = [Sample(t=100.5 + i / 10, values={MEMORY: m}) for i, m in enumerate(memory or [])]
    return RunData(
        name=f"sweep-c{n}",
        kind=RunKind.SWEEP,
        purpose="",
        records=recs,
        prompts={},
        started_at=100.0,
        ended_at=102.0,
        before=None,
        after=None,
        samples=samples,
    )


def test_goodput_counts_the_requests_that_each_met_the_slos():
    from validator.judge.sweep import goodput
    from validator.profile import SloSection

    run = _step_run(4, [100.0, 300.0, 600.0, 900.0])  # 2 s window
    assert goodput(run, SloSection(ttft_p99_ms=500.0)) == 1.0  # 2 of 4 within 500 ms, over 2 s
    assert goodput(run, SloSection(ttft_p99_ms=1000.0, itl_p99_ms=5.0)) == 0.0  # 10 ms gaps: none within 5
    assert goodput(run, SloSection()) is None  # no SLO: not measured, not "all good"


def test_a_step_with_a_failed_request_misses_its_slos_and_says_how_many_failed():
    """A step whose latencies are all within the SLOs but where one request failed: missed, not held,
    and the row, the table and the page say how many failed (where fast latencies alone read `held`)."""
    from dataclasses import replace

    from validator.judge.figures import run_figures
    from validator.judge.sweep import sweep_summary
    from validator.profile import SloSection
    from validator.report.markdown import _sweep_table
    from validator.report.sweephtml import sweep_html
    from validator.serve.argv import plan_record

    plan = plan_record(plan_of()[0])
    slo = SloSection(ttft_p99_ms=500.0, itl_p99_ms=200.0)
    good = _step_run(2, [100.0, 120.0])
    bad = _step_run(3, [100.0, 120.0, 110.0])
    bad.records[2] = replace(bad.records[2], status=503, chunk_times=[], output_tokens=0, error="HTTP 503")
    runs = [good, bad]
    sw = sweep_summary(runs, {r.name: run_figures(r, plan) for r in runs}, plan, slo)
    assert sw is not None
    rows = {r["run"]: r for r in sw["steps"]}
    assert (rows["sweep-c2"]["within_slo"], rows["sweep-c2"]["errors"]) == (True, 0)
    assert (rows["sweep-c3"]["within_slo"], rows["sweep-c3"]["errors"]) == (False, 1)
    assert rows["sweep-c3"]["ttft_p99_ms"] < 500  # its answered requests were fast: the failure decides
    assert "| missed (1 failed) |" in _sweep_table(sw["steps"]) and "| held |" in _sweep_table(sw["steps"])
    assert "missed (1 failed)" in "".join(sweep_html(sw))


def test_peak_memory_is_judged_against_the_gpu_budget_and_shown_on_the_cpu():
    from dataclasses import replace

    from validator.judge.sweep import peak_memory_check
    from validator.plan.record import Platform
    from validator.serve.argv import plan_record

    cpu = plan_record(plan_of()[0])
    runs = [_step_run(1, [10.0], memory=[1.5 * 2**30, 2.0 * 2**30]), _step_run(2, [10.0], memory=[None])]
    c = peak_memory_check(runs, cpu)
    assert (c.observed, c.judged, c.passed) == (2.0, False, None)  # the CPU's RSS holds the runtime: shown
    gpu = replace(cpu, platform=Platform.GPU, ledger=replace(cpu.ledger, budget_bytes=int(1.9 * 2**30)))
    assert peak_memory_check(runs, gpu).passed is False  # 2.0 GiB used, 1.9 GiB budget
    gpu = replace(gpu, ledger=replace(gpu.ledger, budget_bytes=int(2.5 * 2**30)))
    assert peak_memory_check(runs, gpu).passed is True
    assert peak_memory_check([_step_run(1, [10.0])], gpu).passed is None  # not sampled: not measured


def test_a_layout_of_several_groups_states_its_own_capacity_or_none():
    """The sweep's summary says what the KV cache holds and where the ledger preempts: one
    full-attention group's arithmetic says 8 sequences of 128 + 384 tokens in 132 blocks; gpt-oss's
    two groups hold a request's 16 full blocks plus up to 5 window blocks, 21, so 6 (the one-group
    figure would have a run preempt where the ledger says it holds); a layout with per-request
    state (Mamba) gives neither figure, naming the layout."""
    from dataclasses import replace

    from validator.judge.figures import run_figures
    from validator.judge.sweep import sweep_summary
    from validator.profile import SloSection
    from validator.rundir.schedule import PlannedRun, RunKind
    from validator.serve.argv import plan_record

    one = replace(plan_record(plan_of()[0]), num_blocks=133, usable_blocks=132, block_size=32, max_num_seqs=10)
    run = _step_run(10, [100.0] * 10)
    run.planned = PlannedRun(name=run.name, kind=RunKind.SWEEP, requests=10, concurrency=10)
    for r in run.records:
        r.asked_prompt_tokens, r.asked_output_tokens = 128, 384
    figs = {run.name: run_figures(run, one)}
    sw = sweep_summary([run], figs, one, SloSection())
    assert sw is not None and (sw["kv_holds"], sw["first_preemption_predicted"]) == (8, 10)
    assert sw["line"].startswith("the KV cache holds 8 sequences of 128 + 384 tokens")
    groups = [
        {"kind": "SlidingWindowSpec", "layers": 2, "page_size_bytes": 16384, "sliding_window": 128},
        {"kind": "FullAttentionSpec", "layers": 2, "page_size_bytes": 16384},
    ]
    two = replace(one, shown={**one.shown, "kv_groups": groups})
    sw = sweep_summary([run], {run.name: run_figures(run, two)}, two, SloSection())
    assert sw is not None and (sw["kv_holds"], sw["first_preemption_predicted"]) == (6, 10)
    assert sw["steps"][0]["admitted_predicted"] == 10  # 8 blocks a prompt (4 a group): 10 x 8 fit in 132
    assert sw["line"].startswith("the KV cache holds 6 sequences of 128 + 384 tokens")
    state = [{**groups[1]}, {"kind": "MambaSpec", "layers": 2, "page_size_bytes": 16384}]
    mamba = replace(one, shown={**one.shown, "kv_groups": state})
    sw = sweep_summary([run], {run.name: run_figures(run, mamba)}, mamba, SloSection())
    assert sw is not None and (sw["kv_holds"], sw["first_preemption_predicted"]) == (None, None)
    assert sw["steps"][0]["admitted_predicted"] is None
    assert "what the KV cache holds is not modelled for this layout (2 KV cache groups" in sw["line"]
    assert "(the ledger: not known)" in sw["line"]
