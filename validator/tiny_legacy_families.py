"""The tiny models of families older than the Llama layout that vLLM 0.32 still serves (validator/
tiny_architectures.py lists them with the others): Falcon as its three generations configure it
(tests/test_legacy_families.py)."""

from __future__ import annotations

from typing import Any

_FALCON = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, pad_token_id=0)
LEGACY_FAMILIES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # Falcon-7B: one KV head (multi_query), attention and MLP side by side after one LayerNorm; the
    # config.json transformers writes also names num_kv_heads (the head count), which vLLM ignores
    "tiny-falcon7": ("FalconConfig", dict(_FALCON, multi_query=True, parallel_attn=True), ()),
    # Falcon-40B / 180B: the new decoder (num_kv_heads KV heads, two LayerNorms a layer)
    "tiny-falcon40": ("FalconConfig", dict(_FALCON, new_decoder_architecture=True, num_kv_heads=2), ()),
    # Falcon-RW: ALiBi (no rotary table), biases on every linear layer, attention then MLP, a KV head a head
    "tiny-falcon-rw": (
        "FalconConfig",
        dict(_FALCON, alibi=True, bias=True, multi_query=False, parallel_attn=False),
        (),
    ),  # fmt: skip
}
