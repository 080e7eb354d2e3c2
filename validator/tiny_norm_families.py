"""The tiny models of families whose norms or rotary tables vLLM 0.32 holds its own way
(validator/tiny_architectures.py lists them with the others): OLMo 2 / 3 and OLMoE's q/k norms across
all the heads, HunYuan's and EXAONE 4's per head, Cohere's one norm a layer, GLM-4's four, Qwen2-MoE's
shared-expert gate, and the Transformers backend's rotary embedding, which holds no cos/sin table (OLMo
2 / 3, Seed-OSS, HunYuan: tests/test_norm_families.py)."""

from __future__ import annotations

from typing import Any

_GQA = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
NORM_FAMILIES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "tiny-olmo2": ("Olmo2Config", dict(_GQA, tie_word_embeddings=False), ()),
    "tiny-olmo3": ("Olmo3Config", dict(_GQA, tie_word_embeddings=False), ()),
    "tiny-olmoe": ("OlmoeConfig", dict(_GQA, num_experts=4, num_experts_per_tok=2), ()),
    "tiny-seedoss": ("SeedOssConfig", dict(_GQA, head_dim=64, attention_bias=True, tie_word_embeddings=False), ()),
    "tiny-hunyuan": ("HunYuanDenseV1Config", dict(_GQA, head_dim=64), ()),
    "tiny-cohere2": (
        "Cohere2Config",
        dict(_GQA, head_dim=32, sliding_window=64, layer_types=["sliding_attention", "full_attention"]),
        (),
    ),
    # GLM-4-0414 (glm4): four norms a layer, half the head rotated
    "tiny-glm4": ("Glm4Config", dict(_GQA, head_dim=32, tie_word_embeddings=False, pad_token_id=0), ()),
    # EXAONE 4: per-head q/k norms, a sliding layer beside a full one
    "tiny-exaone4": (
        "Exaone4Config",
        dict(
            _GQA,
            head_dim=64,
            tie_word_embeddings=False,
            sliding_window=64,
            sliding_window_pattern=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        (),
    ),  # fmt: skip
    # Qwen2-MoE: q/k/v biases, a shared expert and its one-row gate; sliding_window 0 (none, as vLLM reads it)
    "tiny-qwen2moe": (
        "Qwen2MoeConfig",
        dict(
            _GQA,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=96,
            use_sliding_window=False,
            sliding_window=0,
        ),
        (),
    ),  # fmt: skip
    # HunYuan MoE with Hunyuan-A13B's per-layer lists (moe_topk, num_shared_expert, moe_intermediate_size
    # equal to intermediate_size, as vLLM's fused experts and transformers' class must agree): experts and
    # one shared MLP of intermediate_size, the router stored in float32
    "tiny-hunyuanmoe": (
        "HunYuanMoEV1Config",
        dict(
            _GQA,
            head_dim=64,
            num_experts=4,
            moe_topk=[2, 2],
            num_shared_expert=[1, 1],
            moe_intermediate_size=[256, 256],
        ),
        (),
    ),
    # FlexOlmo: OLMoE-style q/k norms across the heads (Transformers backend); OLMo 1: LayerNorms without
    # parameters; Granite MoE with a shared MLP (shared_intermediate_size)
    "tiny-flexolmo": (
        "FlexOlmoConfig",
        dict(_GQA, tie_word_embeddings=False, pad_token_id=0, num_experts=4, num_experts_per_tok=2),
        (),
    ),
    "tiny-olmo": ("OlmoConfig", dict(_GQA, tie_word_embeddings=False, pad_token_id=0), ()),
    "tiny-granitemoeshared": (
        "GraniteMoeSharedConfig",
        dict(_GQA, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=96),
        (),
    ),
    # Helium and Ministral: architectures vLLM has no class for, served through the Transformers backend
    "tiny-helium": ("HeliumConfig", dict(_GQA, head_dim=32, pad_token_id=0), ()),
    "tiny-ministral": (
        "MinistralConfig",
        dict(_GQA, head_dim=32, sliding_window=None, layer_types=["full_attention", "full_attention"]),
        (),
    ),
    # Solar Open: no class in vLLM 0.32 either (an MoE with a shared expert and a correction bias)
    "tiny-solaropen": (
        "SolarOpenConfig",
        dict(
            _GQA,
            head_dim=32,
            tie_word_embeddings=False,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
        ),
        (),
    ),  # fmt: skip
    # dots.llm1: vLLM removed its class in 0.23 and serves it through the Transformers backend (no rotary
    # table); per-head q/k norms, a dense first layer, one shared expert
    "tiny-dots1": (
        "Dots1Config",
        dict(
            _GQA,
            head_dim=64,
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            n_shared_experts=1,
            first_k_dense_replace=1,
        ),
        (),
    ),  # fmt: skip
}
