"""The vision towers kvgate counts, against the modules transformers builds from the same config
(on the meta device: shapes only, no weights, nothing downloaded). vLLM builds the same parameters
for these two families when the tower reads its last layer; where vLLM differs (it stops at the
deepest feature layer, tests/test_gpu_memory.py) the count follows vLLM."""

from __future__ import annotations

import pytest
import torch  # installed with vLLM by `make test`; the planner itself never imports either
import transformers

from validator.plan.vision import vision_tower

TEXT = {"hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4}
TEXT |= {"num_key_value_heads": 2, "head_dim": 12, "vocab_size": 128}
VISION = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4}
VISION |= {"patch_size": 4, "image_size": 32}


def _hf_tower_params(model) -> int:
    return sum(
        p.numel() for name, p in model.named_parameters() if "vision_tower" in name or "multi_modal_projector" in name
    )


@pytest.mark.parametrize("bias", [False, True])
def test_pixtral_tower_and_projector_match_transformers(bias):
    cfg = {
        "model_type": "mistral3",
        "spatial_merge_size": 2,
        "multimodal_projector_bias": bias,
        "vision_feature_layer": -1,
        "text_config": {"model_type": "mistral", **TEXT},
        "vision_config": {"model_type": "pixtral", "head_dim": 16, **VISION},
    }
    with torch.device("meta"):
        hf = transformers.Mistral3ForConditionalGeneration(
            transformers.Mistral3Config(**{k: v for k, v in cfg.items() if k != "model_type"})
        )
    tower = vision_tower(cfg, TEXT["hidden_size"])
    assert tower is not None and tower.name == "Pixtral"
    assert tower.params == _hf_tower_params(hf)  # 148,224 without the projector's biases


def test_siglip_tower_and_gemma3_projector_match_transformers():
    cfg = {
        "model_type": "gemma3",
        "mm_tokens_per_image": 16,
        "text_config": {"model_type": "gemma3_text", **TEXT},
        # Gemma 3's published vision_config turns the pooling head off, as here
        "vision_config": {"model_type": "siglip_vision_model", "vision_use_head": False, **VISION},
    }
    with torch.device("meta"):
        hf = transformers.Gemma3ForConditionalGeneration(
            transformers.Gemma3Config(**{k: v for k, v in cfg.items() if k != "model_type"})
        )
    tower = vision_tower(cfg, TEXT["hidden_size"])
    assert tower is not None and tower.name == "SigLIP"
    assert tower.params == _hf_tower_params(hf)  # 110,912
