"""Families vLLM 0.32 serves through its Transformers backend without a TP plan, at TP 2: it splits only
what its fusers match (plan/classic.py WHOLE_AT_TP), and for BitNet, Persimmon and JetMoE that partial
split starts (the weights are allocated, the KV cache sized) and then fails the first forward pass. Measured
on the tiny ones with tests/vllm_weights.py FORWARD=1 (2026-12-07): at TP 2 each raised (Persimmon "shape
'[-1, 128]' is invalid for input of size 1216", BitNet "shape '[-1, 256]' ...", JetMoE "mat1 and mat2 shapes
cannot be multiplied"); at TP 1 each ran, and GPTBigCode ran at TP 2. kvgate planned them at TP 2 and the
launch ended in a server that died at its first request (exit 3); the plan now refuses it (exit 2)."""

from __future__ import annotations

import json

import pytest

from tests.test_cli_plan import validate
from tests.test_norm_families import BITNET, JETMOE
from tests.vllm_tool import run_tool


@pytest.fixture(params=["tiny-persimmon", "bitnet", "jetmoe"])
def model(request, tiny_model, tmp_path) -> str:
    if request.param.startswith("tiny-"):
        return str(tiny_model(request.param))
    (tmp_path / "config.json").write_text(json.dumps({"bitnet": BITNET, "jetmoe": JETMOE}[request.param]))
    return str(tmp_path)


def plan(model: str, tp: int, version: str = "0.32.0"):
    return validate(
        "--plan-only", "--model", model, "--kv-cache-bytes", "1GiB", "--max-model-len", "512",
        "--tensor-parallel-size", str(tp), "--vllm-version", version,
    )  # fmt: skip


def test_tp_2_is_refused_naming_the_field_and_the_fix(model):
    r = plan(model, 2)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "hardware.tensor_parallel_size" in r.stderr and "first forward pass fails" in r.stderr
    assert r.stderr.rstrip().endswith("use 1")


@pytest.mark.parametrize(("tp", "version"), [(1, "0.32.0"), (1, "0.33.0"), (2, "0.31.0")])
def test_tp_1_and_versions_not_measured_are_planned(model, tp, version):
    assert plan(model, tp, version).returncode == 0


def test_gptbigcode_which_ran_at_tp_2_is_planned(tiny_model):
    assert plan(str(tiny_model("tiny-gptbigcode")), 2).returncode == 0


@pytest.mark.vllm
def test_the_installed_vllm_starts_persimmon_at_tp_2_and_fails_its_first_forward_pass(tiny_model):
    """The refusal's evidence, re-measured: rank 0 holds what the plan counts (every layer whole), and the
    first forward pass raises. Should a vLLM run it, this fails and the refusal must go."""
    out = run_tool("tests.vllm_weights", str(tiny_model("tiny-persimmon")), "2", ranks=2, env={"FORWARD": "1"})
    assert out["ranks"][0]["params"] == 596_480
    assert out["forward"] != "ok"
