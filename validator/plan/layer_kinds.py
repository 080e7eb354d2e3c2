"""Each decoder layer's kind of cache (full, sliding-window, chunked, linear state or none), from
config.json's layer_types or each family's convention."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError

FULL = "full"
SLIDING = "sliding"
LINEAR = "linear"  # Mamba / linear attention / short conv: per-request state
CHUNKED = "chunked"  # chunked local attention (Llama 4)
NO_CACHE = "none"  # an MLP or MoE block of a hybrid: no cache at all

# layer_types values used by transformers configs
_LAYER_TYPE_KIND = {
    "full_attention": FULL,
    "attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "linear_attention": LINEAR,
    "mamba": LINEAR,
    "mamba2": LINEAR,
    "conv": LINEAR,
    "short_conv": LINEAR,
    "recurrent": LINEAR,
}


LLAMA4_TYPES = ("llama4", "llama4_text")


def _llama4_kinds(cfg: dict[str, Any], layers: int) -> list[str]:
    """Llama 4: vLLM's llama4.py reads no_rope_layers (1: a RoPE layer, chunked when
    attention_chunk_size is set; 0: a NoPE layer, full attention); transformers fills an empty or
    missing list with a NoPE layer every no_rope_layer_interval (4) layers."""
    flags = cfg.get("no_rope_layers")
    if not flags:
        interval = cfg.get("no_rope_layer_interval", 4)
        if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
            raise InputError(f"config.json: no_rope_layer_interval must be a positive integer, got {interval!r:.60}")
        flags = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(flags, list) or len(flags) != layers or any(f not in (0, 1) for f in flags):
        raise InputError(f"config.json: no_rope_layers must list 0 or 1 for each of the {layers} layers")
    chunked = cfg.get("attention_chunk_size") is not None
    return [CHUNKED if f and chunked else FULL for f in flags]


def gemma4_layer_types(cfg: dict[str, Any], n: int) -> list[str]:
    """Each layer's type as Gemma4TextConfig gives it: config.json's layer_types, else 5 sliding : 1
    full with the last layer full."""
    given = cfg.get("layer_types")
    if isinstance(given, list) and len(given) == n:
        return given
    return ["full_attention" if (i + 1) % 6 == 0 or i == n - 1 else "sliding_attention" for i in range(n)]


def layer_kinds(cfg: dict[str, Any], layers: int, sliding_window: int | None) -> list[str]:
    if cfg.get("model_type") in LLAMA4_TYPES:
        return _llama4_kinds(cfg, layers)
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise InputError(f"config.json: layer_types must list one type per layer ({layers})")
        kinds = []
        for t in types:
            if not isinstance(t, str) or t not in _LAYER_TYPE_KIND:
                raise InputError(f"config.json: unknown layer type {t!r} in layer_types")
            kinds.append(_LAYER_TYPE_KIND[t])
        # transformers writes layer_types even when sliding is off; vLLM then uses full attention
        if sliding_window is None:
            kinds = [FULL if k == SLIDING else k for k in kinds]
        return kinds
    if "use_sliding_window" in cfg:  # Qwen2-family convention
        if cfg.get("use_sliding_window") and sliding_window is not None:
            start = cfg.get("max_window_layers", 0) or 0
            if isinstance(start, bool) or not isinstance(start, int):
                raise InputError(f"config.json: max_window_layers must be an integer, got {start!r:.60}")
            return [SLIDING if i >= start else FULL for i in range(layers)]
        return [FULL] * layers
    if sliding_window is None:
        if cfg.get("layers_block_type") or cfg.get("hybrid_override_pattern") or cfg.get("attn_layer_indices"):
            # Jamba / Nemotron-H / Falcon-H style hybrids: attention mixed with Mamba layers
            return [LINEAR] * layers
        return [FULL] * layers
    model_type = cfg.get("model_type")
    if model_type == "gemma2":
        return [SLIDING if i % 2 == 0 else FULL for i in range(layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = cfg.get("sliding_window_pattern", 6)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern <= 0:
            raise InputError(f"config.json: sliding_window_pattern must be a positive integer, got {pattern!r:.60}")
        return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers)]
    if model_type in ("gemma4", "gemma4_text"):
        return [_LAYER_TYPE_KIND[t] for t in gemma4_layer_types(cfg, layers)]
    return [SLIDING] * layers  # Mistral convention: a window on every layer
