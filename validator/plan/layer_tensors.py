"""The parameters of a decoder layer as vLLM 0.32 allocates them (pure): one tensor per
allocation (q/k/v and gate/up fused, experts stacked), split by tensor parallelism or held whole
by every rank; the building blocks of plan/hybrid_weights.py and plan/gemma4_weights.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validator.errors import InputError


@dataclass(frozen=True)
class Tensor:
    """One parameter as vLLM allocates it, whole model: its elements, whether TP splits it (False:
    every rank holds it whole) and whether it is float32 whatever the model's dtype."""

    elements: int
    split: bool = True
    fp32: bool = False


def linear(out: int, inp: int, bias: bool, row: bool = False) -> list[Tensor]:
    """A column- (or row-) parallel linear layer: a row-parallel one's bias is on every rank."""
    return [Tensor(out * inp)] + ([Tensor(out, split=not row)] if bias else [])


def attention_heads(
    h: int, heads: int, hd: int, kv: int, tp: int, bias: bool, gate: bool = False, qk_norm: bool = False,
    kv_proj: bool = True, o_bias: bool = False,
) -> list[Tensor]:  # fmt: skip
    """q (doubled for an output gate), k and v fused (none for a layer that reads another's cache:
    kv_proj False, and then no k norm), and o. With fewer KV heads than ranks each rank holds one
    (QKVParallelLinear replicates them): max(kv, tp) heads' worth over the ranks."""
    kv_out = 2 * max(kv, tp) * hd if kv_proj else 0
    out = linear(heads * (2 if gate else 1) * hd + kv_out, h, bias) + linear(h, heads * hd, o_bias, row=True)
    return out + ([Tensor((2 if kv_proj else 1) * hd, split=False)] if qk_norm else [])


def mlp(h: int, inter: int, gated: bool, bias: bool = False) -> list[Tensor]:
    return linear((2 if gated else 1) * inter, h, bias) + linear(h, inter, bias, row=True)


def moe(h: int, experts: int, inter: int) -> list[Tensor]:
    return [Tensor(experts * h, split=False), Tensor(experts * 2 * inter * h), Tensor(experts * h * inter)]


def whole(cfg: dict[str, Any], key: str, default: int = 0) -> int:
    """A size or count config.json may leave out (the default: vLLM's, or 0 for none); given, it
    must be a whole number (a wrong one would silently miscount)."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        mt = cfg.get("model_type")
        raise InputError(f"config.json: {key} must be a non-negative integer for a {mt} model, got {v!r:.40}")
    return v


Layers = list[list[Tensor]]
