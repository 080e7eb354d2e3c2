"""The vision towers kvgate counts, against the modules transformers builds from the same config
(on the meta device: shapes only, no weights, nothing downloaded). Where vLLM builds less (it stops
at the deepest feature layer; LLaVA's tower has no post-norm in vLLM) the count follows vLLM and the
test says by how much."""

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
    """The tower, the projector and LLaVA-NeXT's image_newline."""
    parts = ("vision_tower", "multi_modal_projector", "image_newline")
    return sum(p.numel() for name, p in model.named_parameters() if any(x in name for x in parts))


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


LLAVA = [
    (model, vit, layers, bias)
    for model in ("llava", "llava_next")
    for vit in ("clip_vision_model", "siglip_vision_model")
    for layers in ([-1, [-3, -1]] if model == "llava_next" else [-1])
    for bias in (True, False)
]


@pytest.mark.parametrize("model,vit,feature_layer,bias", LLAVA)
def test_llava_towers_are_transformers_modules_without_the_post_norm(model, vit, feature_layer, bias):
    """LLaVA and LLaVA-NeXT with a CLIP or a SigLIP ViT: vLLM builds the tower with
    require_post_norm=False, so the count is transformers' modules less the post-LayerNorm
    (2 x hidden), whatever the ViT, the projector's biases and the feature layers concatenated."""
    cfg = {
        "model_type": model,
        "vision_feature_layer": feature_layer,
        "multimodal_projector_bias": bias,
        "text_config": {"model_type": "llama", **TEXT},
        "vision_config": {"model_type": vit, "vision_use_head": False, **VISION},
    }
    config_class, model_class = {
        "llava": (transformers.LlavaConfig, transformers.LlavaForConditionalGeneration),
        "llava_next": (transformers.LlavaNextConfig, transformers.LlavaNextForConditionalGeneration),
    }[model]
    extra = {"image_grid_pinpoints": [[32, 32]]} if model == "llava_next" else {}
    with torch.device("meta"):
        hf = model_class(config_class(**{k: v for k, v in cfg.items() if k != "model_type"}, **extra))
    hf_count = _hf_tower_params(hf)
    tower = vision_tower(cfg, TEXT["hidden_size"])
    assert tower is not None and tower.name == ("CLIP" if vit.startswith("clip") else "SigLIP")
    assert tower.params == hf_count - 2 * VISION["hidden_size"]


def test_a_llava_config_without_feature_layer_reads_the_penultimate_layer():
    """transformers' LlavaConfig defaults vision_feature_layer to -2: vLLM builds 23 of CLIP's 24
    layers for LLaVA-1.5, while Mistral 3 (default -1) keeps all of Pixtral's."""
    llava = {"model_type": "llava", "vision_config": {"model_type": "clip_vision_model", **VISION}}
    llava["vision_config"] |= {"num_hidden_layers": 24}
    tower = vision_tower(llava, TEXT["hidden_size"])
    assert tower is not None and tower.layers == 23


@pytest.mark.parametrize("bias", [False, True])
def test_llama4_tower_and_projector_match_transformers(bias):
    """Llama 4's ViT, pixel-shuffle adapter and projector. transformers' adapter has no biases
    whatever the config says; vLLM's (mllama4.py) follows multi_modal_projector_bias, so with it the
    count is transformers' plus the adapter's two biases. (The adapter's input and output dims are
    equal, as in every Llama 4 checkpoint: where they differ transformers sizes fc2 output x output,
    vLLM input x output, and the count follows vLLM.)"""
    text = TEXT | {"intermediate_size_mlp": 128, "num_local_experts": 2}
    vision = VISION | {"intermediate_size": 256, "projector_input_dim": 80, "projector_output_dim": 80}
    vision |= {"vision_output_dim": 80, "pixel_shuffle_ratio": 0.5, "multi_modal_projector_bias": bias}
    cfg = {"model_type": "llama4", "text_config": text, "vision_config": vision}
    with torch.device("meta"):
        hf = transformers.Llama4ForConditionalGeneration(transformers.Llama4Config(**cfg))
    cfg["vision_config"] = vision | {"model_type": "llama4_vision_model"}  # as config.json writes it
    hf_params = sum(p.numel() for n, p in hf.named_parameters() if "vision_model" in n or "multi_modal_projector" in n)
    tower = vision_tower(cfg, TEXT["hidden_size"])
    assert tower is not None and tower.name == "Llama 4"
    assert tower.params == hf_params + ((80 + 80) if bias else 0)
