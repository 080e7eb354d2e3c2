"""NVIDIA's Nemotron-NAS models (Llama-3.1-Nemotron-51B, Llama-3.3-Nemotron-Super-49B,
Llama-3.1-Nemotron-Ultra-253B: `DeciLMForCausalLM`, model type nemotron-nas) as vLLM 0.32's
nemotron_nas.py builds them from config.json's `block_configs` (pure): one block a layer, whose
attention is either skipped (`no_op`: no KV cache, no weights) or has num_attention_heads /
n_heads_in_group KV heads, and whose MLP is skipped or ffn_mult wide (2 x ffn_mult x hidden_size / 3,
rounded up to a multiple of 256). Read as a Llama, the tiny one was planned 2.67 x the KV cache a
token vLLM holds (every layer caching every head); Super-49B's 80 layers of 64 heads would be 8 x
its heads alone (tests/test_nemotron_nas.py)."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError
from validator.plan.layer_kinds import FULL, NO_CACHE

NAS_TYPES = ("nemotron-nas",)
Block = tuple[int | None, int | None]  # (KV heads, or None: no attention; MLP width, or None: no MLP)


def _positive(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 20:
        raise InputError(f"config.json: {field} must be a positive integer, got {value!r:.60}")
    return value


def _mlp_width(ffn: dict[str, Any], hidden: int, i: int) -> int:
    mult = ffn.get("ffn_mult")
    if mult is None:
        return _positive(ffn.get("intermediate_size"), f"block_configs[{i}].ffn.intermediate_size")
    if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1 << 10:
        raise InputError(f"config.json: block_configs[{i}].ffn.ffn_mult must be a positive number, got {mult!r:.40}")
    width = int(2 * mult * hidden / 3)  # vLLM's _ffn_mult_to_intermediate_size
    return width if width % 256 == 0 else width + 256 - width % 256


def nas_blocks(cfg: dict[str, Any]) -> tuple[Block, ...]:
    """Each layer's (KV heads, MLP width), None where its block skips one."""
    blocks, layers = cfg.get("block_configs"), cfg.get("num_hidden_layers")
    if not isinstance(blocks, list) or len(blocks) != layers:
        raise InputError(f"config.json: block_configs must list one block per layer ({layers!r:.20})")
    heads = _positive(cfg.get("num_attention_heads"), "num_attention_heads")
    hidden = _positive(cfg.get("hidden_size"), "hidden_size")
    out: list[Block] = []
    for i, b in enumerate(blocks):
        attn, ffn = (b.get("attention"), b.get("ffn")) if isinstance(b, dict) else (None, None)
        if not isinstance(attn, dict) or not isinstance(ffn, dict):
            raise InputError(f"config.json: block_configs[{i}] must hold an attention and an ffn block")
        kv = None
        if attn.get("no_op") is not True:
            group = _positive(attn.get("n_heads_in_group"), f"block_configs[{i}].attention.n_heads_in_group")
            if heads % group:
                raise InputError(f"config.json: block_configs[{i}]: n_heads_in_group {group} does not divide {heads}")
            kv = heads // group
        out.append((kv, None if ffn.get("no_op") is True else _mlp_width(ffn, hidden, i)))
    return tuple(out)


def nas_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    """The model's KV heads as vLLM's config reads them: the first attention block's."""
    if cfg.get("model_type") not in NAS_TYPES:
        return cfg
    kv = next((k for k, _ in nas_blocks(cfg) if k is not None), None)
    if kv is None:
        raise InputError("config.json: every block_configs entry skips its attention; nothing to cache")
    return cfg | {"num_key_value_heads": kv}


def nas_layers(cfg: dict[str, Any], head_dim: int, kv_heads: int) -> tuple[list[str], tuple[tuple[int, int], ...]]:
    """The layers' kinds (no cache where the block skips attention) and heads, () where all share them."""
    blocks = nas_blocks(cfg)
    kinds = [NO_CACHE if kv is None else FULL for kv, _ in blocks]
    heads = tuple((head_dim, kv if kv is not None else kv_heads) for kv, _ in blocks)
    return kinds, () if all(h == (head_dim, kv_heads) for h in heads) else heads
