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
