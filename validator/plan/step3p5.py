"""StepFun's Step 3.5 (Step3p5ForCausalLM, model type step3p5) as vLLM 0.32's step3p5.py builds its
attention from config.json (pure): num_attention_groups KV heads (vLLM's config reads it as the KV
heads where no other key names them), and the layers whose type is attention_other_setting's
attention_type (its sliding layers) with that setting's heads, groups and head size. Its
checkpoints list more layer_types than layers (the MTP layers'): vLLM reads the first
num_hidden_layers. Its weights: plan/step3p5_weights.py; its rotary tables: plan/rope.py."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError

STEP3P5 = "step3p5"


def step_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    if cfg.get("model_type") != STEP3P5:
        return cfg
    out = dict(cfg)
    types, n = cfg.get("layer_types"), cfg.get("num_hidden_layers")
    if isinstance(types, list) and isinstance(n, int) and len(types) > n:
        out["layer_types"] = types[:n]
    if not any(cfg.get(k) is not None for k in ("n_head_kv", "num_kv_heads", "num_key_value_heads")):
        out["num_key_value_heads"] = cfg.get("num_attention_groups", 8)  # Step3p5Config's default
    return out


def step_heads(cfg: dict[str, Any], kinds: list[str], head_dim: int, kv_heads: int) -> tuple[tuple[int, int], ...]:
    """(head size, KV heads) of every layer, () where all share the model's."""
    other, types = cfg.get("attention_other_setting"), cfg.get("layer_types")
    if other is None or not isinstance(types, list):
        return ()
    if not isinstance(other, dict):
        raise InputError("config.json: attention_other_setting must map attention_type to its heads")
    own: list[int] = []
    for field in ("head_dim", "num_attention_groups", "num_attention_heads"):  # vLLM reads all three
        v = other.get(field)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= 1 << 16:
            raise InputError(f"config.json: attention_other_setting.{field} must be a positive integer, got {v!r:.30}")
        own.append(v)
    heads = [
        (own[0], own[1]) if t == other.get("attention_type") else (head_dim, kv_heads) for t in types[: len(kinds)]
    ]
    return () if all(h == (head_dim, kv_heads) for h in heads) else tuple(heads)
