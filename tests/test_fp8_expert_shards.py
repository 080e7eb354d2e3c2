"""Block-FP8 experts split by tensor parallelism under --moe-backend (plan/parallel_fit.py,
plan/weights.py): vLLM 0.32 refines the blocks where a rank's slice of an expert is not whole blocks,
and with a backend that cannot take refined blocks pads the slice up to whole ones instead, which
every rank then holds. The truth is the installed vLLM's own decision (tests/vllm_fp8_moe.py asks its
functions) for the shapes of public checkpoints; the bytes follow from that width."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import plan_input_from_profile
from validator.plan.model_shape import shape_from_config
from validator.plan.parallel_fit import check, expert_split
from validator.plan.weights import count_weights
from validator.profile import from_dict

ROOT = Path(__file__).resolve().parents[1]
QWEN3_235B_FP8 = {
    k: v
    for k, v in json.loads(
        (ROOT / "tests/data/vllm-gpu-starts/configs-kvgate/Qwen__Qwen3-235B-A22B-Instruct-2507-FP8.json").read_text()
    ).items()
    if not k.startswith("_")
}
V032 = (0, 32, 0)

# (experts' width, hidden size) of public MoE checkpoints, and one whose width is not whole blocks
SHAPES = [(1536, 4096), (768, 2048), (1408, 2048), (1536, 3072), (2048, 7168), (1400, 2048)]
BACKENDS = ["auto", "triton", "deep_gemm", "flashinfer_trtllm", "marlin", "batched_triton"]


def moe_config(width: int, hidden: int) -> dict:
    """A Qwen3-MoE decoder of these sizes, its experts in vLLM's fp8 method with 128 x 128 blocks
    (attention of 64 heads of 128, 4 KV heads: whole blocks at every TP size tried)."""
    return {
        **QWEN3_235B_FP8,
        "hidden_size": hidden,
        "moe_intermediate_size": width,
        "num_hidden_layers": 2,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
    }


def kvgate_says(width: int, hidden: int, tp: int, backend: str) -> dict:
    shape = shape_from_config(moe_config(width, hidden))
    try:
        check(shape, tp, False, V032, backend)
    except InputError as e:
        return {"refused": str(e)}
    argv = [] if backend == "auto" else ["--moe-backend", backend]
    return {"width": expert_split(shape, tp, argv, V032).width or width // tp}


@pytest.fixture(scope="module")
def vllm_says():
    cases = [[w, h, tp, b] for w, h in SHAPES for tp in (2, 4, 8) for b in BACKENDS]
    answers = run_tool("tests.vllm_fp8_moe", json.dumps(cases), timeout=180)["answers"]
    return {tuple(c): a for c, a in zip(cases, answers, strict=True)}


def test_each_rank_holds_the_slice_the_installed_vllm_allocates(vllm_says):
    """108 cases: a refined split keeps width / TP, a padded one rounds it up to whole blocks
    (Qwen3-235B at TP 8: 192 to 256 for deep_gemm, 192 kept for auto and triton, refined to 64-wide
    blocks); what vLLM refuses (a width of 1400, batched_triton for FP8 blocks, 176 a rank under
    auto) the plan refuses, and nothing else."""
    padded = refused = 0
    for (w, h, tp, backend), truth in vllm_says.items():
        ours = kvgate_says(w, h, tp, backend)
        assert ("refused" in ours) == ("refused" in truth), (w, h, tp, backend, ours, truth)
        if "width" in truth:
            assert ours["width"] == truth["width"], (w, h, tp, backend, ours, truth)
            padded += truth["width"] != w // tp
        refused += "refused" in truth
    assert padded >= 20 and refused >= 20  # both outcomes are exercised, not only the even split
    assert vllm_says[(1536, 4096, 8, "deep_gemm")] == {"width": 256, "refined": None}
    assert vllm_says[(1536, 4096, 8, "triton")] == {"width": 192, "refined": [64, 64]}


def qwen3_235b(tmp_path: Path, *extra: str, headers: int | None = None):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_235B_FP8))
    if headers is not None:  # a header-only checkpoint of that many bytes
        h = json.dumps({"all": {"dtype": "U8", "shape": [headers], "data_offsets": [0, headers]}})
        (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h.encode())
    profile = {
        "model": {"path": str(tmp_path)},
        "hardware": {"platform": "gpu", "gpu_memory": "79.19GiB", "tensor_parallel_size": 8},
        "limits": {"max_model_len": 32768},
        "vllm": {"version": "0.32.0", "extra_args": list(extra)},
    }
    return plan_input_from_profile(from_dict(profile))


# Qwen3-235B-A22B FP8 at TP 8 padded from 192 to 256 of each expert's 1536 (rank 0): per expert
# 3 x 4096 x 64 B of weights + (32 + 16) fp32 block scales = 786,624 B; x 128 experts x 94 layers
PADDED_SURPLUS = 9_464_659_968


def test_a_padded_slice_is_held_on_every_rank_in_the_weights(tmp_path):
    auto = qwen3_235b(tmp_path)
    deep_gemm = qwen3_235b(tmp_path, "--moe-backend", "deep_gemm")
    triton = qwen3_235b(tmp_path, "--moe_backend=triton")
    assert auto.weights_rank_bytes is not None and deep_gemm.weights_rank_bytes is not None
    assert deep_gemm.weights_rank_bytes - auto.weights_rank_bytes == PADDED_SURPLUS
    assert triton.weights_rank_bytes == auto.weights_rank_bytes  # Triton's kernels take the refined blocks
    assert "192 of 1536 padded to 256" in deep_gemm.weights_source and "padded" not in auto.weights_source
    # the last --moe-backend given wins, as in vLLM's parser
    assert qwen3_235b(tmp_path, "--moe-backend", "marlin", "--moe-backend", "auto").weights_rank_bytes == (
        auto.weights_rank_bytes
    )


def test_the_checkpoints_headers_split_evenly_gain_the_same_padding(tmp_path):
    """With the checkpoint present and its headers other than the count (split evenly by TP), the
    padded slice adds the same bytes to rank 0's share."""
    count = count_weights(shape_from_config(QWEN3_235B_FP8), None, tp=8)
    assert count is not None
    stored = count.total_bytes + 8 * 2**20  # 8 MiB the count does not know of
    auto = qwen3_235b(tmp_path, headers=stored)
    padded = qwen3_235b(tmp_path, "--moe-backend", "flashinfer_trtllm", headers=stored)
    assert "split evenly" in auto.weights_source
    assert auto.weights_rank_bytes is not None and padded.weights_rank_bytes is not None
    assert padded.weights_rank_bytes - auto.weights_rank_bytes == PADDED_SURPLUS


def test_expert_parallelism_and_compressed_tensors_are_not_padded():
    """With --enable-expert-parallel each rank holds whole experts (vLLM's MoE runs at tp_size 1 and
    never pads); compressed-tensors' MoE method neither refines nor pads: 192 of 128-wide blocks is
    refused at 0.32 whatever the backend."""
    shape = shape_from_config(QWEN3_235B_FP8)
    assert expert_split(shape, 8, ["--enable-expert-parallel", "--moe-backend", "deep_gemm"], V032).width == 0
    ct = {
        **QWEN3_235B_FP8,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}}
            },
        },
    }
    ct_shape = shape_from_config(ct)
    for backend in ("auto", "deep_gemm"):
        with pytest.raises(InputError, match="192 of each expert"):
            check(ct_shape, 8, False, V032, backend)
    check(ct_shape, 8, True, V032, "deep_gemm")  # whole experts: accepted
    assert expert_split(ct_shape, 8, ["--moe-backend", "deep_gemm"], V032).width == 0


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "validator", "--plan-only", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_the_cli_plans_with_the_backend_and_refuses_one_vllm_refuses(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_235B_FP8))
    base = ["--model", str(tmp_path), "--platform", "gpu", "--gpu-memory-bytes", "79.19GiB"]
    base += ["--tensor-parallel-size", "8", "--max-model-len", "32768", "--vllm-version", "0.32.0", "--json"]
    auto, padded = validate(*base), validate(*base, "--moe-backend", "deep_gemm")
    assert auto.returncode == 0 and padded.returncode == 0, auto.stderr + padded.stderr
    a, p = json.loads(auto.stdout), json.loads(padded.stdout)
    assert p["ledger"]["weights_bytes"] - a["ledger"]["weights_bytes"] == PADDED_SURPLUS
    assert p["max_num_seqs"] < a["max_num_seqs"]  # 8.8 GiB less KV on each rank
    assert p["vllm_args"][-2:] == ["--moe-backend", "deep_gemm"]  # the launch line carries it
    refused = validate(*base, "--moe-backend", "batched_triton")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--moe-backend batched_triton" in refused.stderr
