"""DBRX's config.json (its own key names, attention and MoE settings nested) as vLLM 0.32's dbrx.py
reads it (pure), rewritten to the keys the rest of the planner reads: d_model, n_heads, n_layers,
max_seq_len; attn_config.kv_n_heads KV heads (kvgate refused the config: no num_attention_heads, and
read without them it would cache every head); ffn_config's experts, each gated, of ffn_hidden_size.
Its LayerNorms hold no bias (dbrx.py removes them), its LM head is never tied. Measured on a tiny one
(tests/test_legacy_families.py)."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError

_TOP = {"d_model": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers",
        "max_seq_len": "max_position_embeddings"}  # fmt: skip
_FFN = {"ffn_hidden_size": "moe_intermediate_size", "moe_num_experts": "num_local_experts",
        "moe_top_k": "num_experts_per_tok"}  # fmt: skip


def dbrx_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    if cfg.get("model_type") != "dbrx":
        return cfg
    out = {_TOP.get(k, k): v for k, v in cfg.items()}
    attn, ffn = cfg.get("attn_config"), cfg.get("ffn_config")
    for key, value in (("attn_config", attn), ("ffn_config", ffn)):  # vLLM reads their keys: no other type
        if value is not None and not isinstance(value, dict):
            raise InputError(f"config.json: {key} must be an object of DBRX's settings, got {value!r:.60}")
    if isinstance(attn, dict):
        if attn.get("kv_n_heads") is not None:
            out["num_key_value_heads"] = attn["kv_n_heads"]
        if attn.get("rope_theta") is not None:
            out.setdefault("rope_theta", attn["rope_theta"])
    if isinstance(ffn, dict):
        for k, v in ffn.items():
            if k in _FFN and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise InputError(f"config.json: ffn_config.{k} must be a positive integer, got {v!r:.60}")
        out |= {_FFN[k]: v for k, v in ffn.items() if k in _FFN}
    return out | {"tie_word_embeddings": False}
