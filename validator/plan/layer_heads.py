"""Layers whose attention has its own head size and KV heads, from config.json (pure).

Gemma 4's full-attention layers: transformers' Gemma4TextConfig turns `global_head_dim` (512 when
absent) and, with `attention_k_eq_v`, `num_global_key_value_heads` into `per_layer_config`
({layer index: {head_dim, num_key_value_heads}}), which newer config.json files carry themselves;
vLLM's gemma4.py builds each layer's attention from it. Every other layer keeps the model's shape.
"""

from __future__ import annotations

from typing import Any

from validator.errors import InputError
from validator.plan.layer_kinds import FULL, NO_CACHE
from validator.plan.nemotron_nas import NAS_TYPES, nas_layers
from validator.plan.step3p5 import STEP3P5, step_heads

GEMMA4 = ("gemma4_text", "gemma4")  # the model types read here: text-only, or a multimodal text_config
GEMMA4_GLOBAL_HEAD_DIM = 512  # Gemma4TextConfig's default for global_head_dim
OVERRIDABLE = ("head_dim", "num_key_value_heads")


def _positive(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 16:
        raise InputError(f"config.json: {field} must be a positive integer, got {value!r:.60}")
    return value


def layer_heads(cfg: dict[str, Any], kinds: list[str], head_dim: int, kv_heads: int) -> tuple[tuple[int, int], ...]:
    """(head_dim, KV heads) of every layer, or () where all layers share the model's."""
    plc = cfg.get("per_layer_config")
    overrides: dict[int, dict[str, Any]] = {}
    if plc is not None:
        if not isinstance(plc, dict):
            raise InputError("config.json: per_layer_config must map layer indices to their attention settings")
        for key, over in plc.items():
            idx = int(key) if isinstance(key, str) and key.isdigit() else key
            if not isinstance(idx, int) or not 0 <= idx < len(kinds) or not isinstance(over, dict):
                raise InputError(f"config.json: per_layer_config[{key!r:.20}] names no layer of {len(kinds)}")
            unknown = sorted(set(over) - set(OVERRIDABLE))
            if unknown:
                raise InputError(
                    f"config.json: per_layer_config sets {unknown[0]!r:.40}; kvgate reads only {OVERRIDABLE}"
                )
            overrides[idx] = over
    else:
        full: dict[str, Any] = {"head_dim": cfg.get("global_head_dim", GEMMA4_GLOBAL_HEAD_DIM)}
        if cfg.get("attention_k_eq_v") is True and cfg.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = cfg["num_global_key_value_heads"]
        overrides = {i: full for i, kind in enumerate(kinds) if kind == FULL}
    heads = []
    for i in range(len(kinds)):
        over = overrides.get(i, {})
        d = _positive(over.get("head_dim", head_dim), f"layer {i}'s head_dim")
        k = _positive(over.get("num_key_value_heads", kv_heads), f"layer {i}'s num_key_value_heads")
        heads.append((d, k))
    return () if all(h == (head_dim, kv_heads) for h in heads) else tuple(heads)


def without_shared_caches(kinds: list[str], shared: Any) -> tuple[list[str], int]:
    """Gemma 4 (E2B, E4B): its last num_kv_shared_layers read the cache of the last earlier layer of
    their type and hold none of their own (vLLM's gemma4.py: kv_sharing_target_layer_name; the KV
    cache spec skips them): those layers cache nothing, and no sharing is left to refuse."""
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 < shared < len(kinds):
        return kinds, shared if isinstance(shared, int) else 0
    return [NO_CACHE if i >= len(kinds) - shared else k for i, k in enumerate(kinds)], 0


def own_attention(
    cfg: dict[str, Any], model_type: str, kinds: list[str], shared: Any, head_dim: int, kv_heads: int
) -> tuple[list[str], Any, tuple[tuple[int, int], ...]]:
    """Gemma 4's layers as vLLM builds them: the shared ones without a cache, each with its heads;
    Nemotron-NAS's blocks (plan/nemotron_nas.py), Step 3.5's other setting (plan/step3p5.py); any
    other model's as given (its shared layers, if any, are refused when planned)."""
    if model_type in NAS_TYPES:
        nas_kinds, heads = nas_layers(cfg, head_dim, kv_heads)
        return nas_kinds, shared, heads
    if model_type == STEP3P5:
        return kinds, shared, step_heads(cfg, kinds, head_dim, kv_heads)
    if model_type not in GEMMA4:
        return kinds, shared, ()
    kinds, shared = without_shared_caches(kinds, shared)
    return kinds, shared, layer_heads(cfg, kinds, head_dim, kv_heads)
