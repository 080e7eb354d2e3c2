"""Step 3.5 (Step3p5ForCausalLM) as vLLM 0.32's step3p5.py builds its attention (plan/step3p5.py). The
start-up of tiny-step3p5 (validator/tiny_own_builds.py: sliding layers of the other setting's 4 KV
heads between full layers of num_attention_groups 2, served with --load-format dummy) is a recorded
truth (tests/vllm_cases.py step3p5-b32: 32,768 blocks, 691,843 tokens, 337.81 x); kvgate refused it
before (not modelled). Its demo job (105 blocks of 32) passed every check. Its weights:
tests/test_step3p5_weights.py."""

from __future__ import annotations

from validator.inputs import load_config
from validator.plan.layer_kinds import FULL, SLIDING
from validator.plan.model_shape import shape_from_config


def test_the_sliding_layers_cache_the_other_settings_heads(tiny_model):
    shape = shape_from_config(load_config(tiny_model("tiny-step3p5")))
    assert shape.layer_kinds == (SLIDING, FULL, SLIDING, FULL) and shape.sliding_window == 64
    assert (shape.num_kv_heads, shape.layer_heads) == (2, ((32, 4), (32, 2), (32, 4), (32, 2)))


def test_num_attention_groups_are_the_kv_heads(tiny_model):
    """Without the other setting every layer holds num_attention_groups KV heads (vLLM's config reads
    it where no other key names them; kvgate read one a head: 4, twice the cache)."""
    cfg = {k: v for k, v in load_config(tiny_model("tiny-step3p5")).items() if k != "attention_other_setting"}
    shape = shape_from_config(cfg)
    assert (shape.num_kv_heads, shape.layer_heads) == (2, ())


def test_layer_types_beyond_the_layers_are_the_mtp_layers(tiny_model):
    """Step-3.5-Flash's config.json lists layer_types for its MTP layers too; vLLM reads the first
    num_hidden_layers (kvgate refused the list: one type per layer)."""
    cfg = load_config(tiny_model("tiny-step3p5"))
    cfg["layer_types"] = cfg["layer_types"] + ["full_attention"] * 3
    assert shape_from_config(cfg).layer_kinds == (SLIDING, FULL, SLIDING, FULL)
