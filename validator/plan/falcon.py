"""Falcon's config.json as vLLM 0.32's falcon.py reads it (pure), rewritten to the keys the rest of
the planner reads.

- KV heads: num_kv_heads with the new decoder architecture (Falcon-40B / 180B, Falcon 2), one with
  multi_query (Falcon-7B), else one a head. A config.json transformers re-saved for Falcon-7B also
  names num_kv_heads (the head count), which vLLM ignores there: read first, it was 4 x the KV cache
  of the tiny one (71 x Falcon-7B's).
- The MLP is 4 x hidden_size (vLLM ignores ffn_hidden_size), ungated; `bias` gives every linear
  layer one; the norms are LayerNorms: two a layer, one where attention and the MLP run side by side
  (parallel_attn) unless num_ln_in_parallel_attn is 2 (the new decoder's default); ALiBi: no
  rotary table.
- transformers' FalconConfig defaults where config.json is silent (multi_query, parallel_attn, tied
  embeddings, 2,048 positions); the old model types RefinedWeb / RefinedWebModel take vLLM's
  RWConfig's (n_head_kv, 1 unless given; attention then MLP; the new decoder at hidden_size 8,192).
Measured on tiny models of each generation (tests/test_legacy_families.py)."""

from __future__ import annotations

from typing import Any

FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")
FALCON_DEFAULTS = dict(multi_query=True, parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False,
                       tie_word_embeddings=True, max_position_embeddings=2048)  # fmt: skip
RW_DEFAULTS = dict(multi_query=True, parallel_attn=False, new_decoder_architecture=False, bias=False, alibi=False,
                   tie_word_embeddings=True, n_head_kv=1)  # fmt: skip
_KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")


def falcon_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Falcon config.json as the planner's keys (any other returned as is)."""
    model_type = cfg.get("model_type")
    if model_type not in FALCON_TYPES:
        return cfg
    rw = model_type != "falcon"
    cfg = (RW_DEFAULTS if rw else FALCON_DEFAULTS) | cfg
    hidden = cfg.get("hidden_size", cfg.get("n_embed"))
    new = cfg.get("new_decoder_architecture") is True or (rw and hidden == 8192)
    out = {k: v for k, v in cfg.items() if k not in _KV_KEYS} | {"model_type": "falcon", "hidden_size": hidden}
    if new:  # None (FalconConfig: the head count) leaves one a head
        out["num_kv_heads"] = cfg.get("n_head_kv" if rw else "num_kv_heads")
    elif cfg.get("multi_query") is True:
        out["num_key_value_heads"] = 1
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        out["intermediate_size"] = 4 * hidden
    bias = cfg.get("bias") is True
    lns = cfg.get("num_ln_in_parallel_attn")
    one = cfg.get("parallel_attn") is True and lns != 2 and not (lns is None and new)
    return out | {"attention_bias": bias, "mlp_bias": bias, "falcon_layer_norms": 1 if one else 2}
