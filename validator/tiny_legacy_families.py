"""The tiny models of families older than the Llama layout that vLLM 0.32 still serves (validator/
tiny_architectures.py lists them with the others): Falcon as its three generations configure it,
and the GPT-2-era decoders with learned positions or a partial rotary (tests/test_legacy_families.py)."""

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
    # GPT-2: learned positions (n_positions, from max_position_embeddings), n_inner null (4 x hidden, not
    # the intermediate_size config.json also names), biases and LayerNorms, tied embeddings
    "tiny-gpt2": ("GPT2Config", dict(n_embd=128, n_layer=2, n_head=4), ()),
    # StarCoder 1 / SantaCoder: GPT-2's layout with one KV head (multi_query), through vLLM's Transformers backend
    "tiny-gptbigcode": ("GPTBigCodeConfig", dict(n_embd=128, n_layer=2, n_head=4, multi_query=True), ()),
    # OPT-350m's layout: tokens embedded 64 wide and projected to the hidden 128 and back, LayerNorm after
    # each block (so no final one), positions offset by 2
    "tiny-opt": (
        "OPTConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=256,
            word_embed_proj_dim=64,
            do_layer_norm_before=False,
            pad_token_id=0,
        ),
        (),
    ),  # fmt: skip
    # GPT-J: 16 of each head's 32 dims rotated, attention and MLP side by side after one LayerNorm, an LM
    # head of its own with a bias
    "tiny-gptj": ("GPTJConfig", dict(n_embd=128, n_layer=2, n_head=4, rotary_dim=16, tie_word_embeddings=False), ()),
    # BLOOM: ALiBi (no rotary table), a LayerNorm after the embeddings, biases everywhere, a 4 x hidden MLP
    "tiny-bloom": ("BloomConfig", dict(hidden_size=128, n_layer=2, n_head=4), ()),
    # Persimmon (through vLLM's Transformers backend): q/k LayerNorms a head, biases everywhere, squared ReLU
    "tiny-persimmon": (
        "PersimmonConfig",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, pad_token_id=0),
        (),
    ),  # fmt: skip
}
