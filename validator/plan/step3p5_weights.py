"""Weight bytes of a Step 3.5 model (plan/step3p5.py) from config.json, as vLLM 0.32's step3p5.py
allocates them (pure): per layer fused q/k/v of the layer's own heads (attention_other_setting's on its
layer type), o, a per-head q and k norm, the head-wise gate (g_proj, one output a query head) where
use_head_wise_attn_gate, two norms; an MoE block on moe_layers_enum's layers (every layer but the first
without it) of a float32 router and router bias, the routed experts and a shared expert of
share_expert_dim; a dense MLP elsewhere; the embedding, an LM head of its own whatever
tie_word_embeddings says, the final norm and the rotary tables (plan/rope.py). Step3p5Config's
defaults where config.json is silent. Measured on a tiny one (tests/test_step3p5_weights.py); a
quantized checkpoint is not counted (its headers are)."""

from __future__ import annotations

import contextlib
from typing import Any

from validator.errors import InputError
from validator.plan import layer_tensors as lt
from validator.plan.layer_tensors import Tensor, attention_heads, mlp, whole
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.quant import Role
from validator.plan.step3p5 import STEP3P5
from validator.plan.weights import WeightCount


def moe_layers(cfg: dict[str, Any], n: int) -> set[int]:
    """vLLM reads moe_layers_enum as comma-separated layer numbers; without it, every layer but the first."""
    given = cfg.get("moe_layers_enum")
    if given is None:
        return set(range(1, n))
    if isinstance(given, str):
        with contextlib.suppress(ValueError):
            return {int(i) for i in given.strip().split(",")}
    raise InputError(f"config.json: moe_layers_enum must be comma-separated layer numbers, got {given!r:.40}")


def count_step3p5(cfg: dict[str, Any], shape: ModelShape, dtype: str | None = None, tp: int = 1) -> WeightCount | None:
    """None for any other family, or quantized."""
    h, v = shape.hidden_size, shape.vocab_size
    if shape.model_type != STEP3P5 or h is None or v is None or shape.quant_method or shape.quant:
        return None
    experts, inter = whole(cfg, "moe_num_experts", 16), whole(cfg, "moe_intermediate_size", 10240)
    shared = whole(cfg, "share_expert_dim", inter * whole(cfg, "moe_top_k", 4))
    dense, gate, bias = (
        shape.intermediate_size or 0,
        cfg.get("use_head_wise_attn_gate") is True,
        cfg.get("attention_bias") is True,
    )
    other, types = cfg.get("attention_other_setting"), cfg.get("layer_types")
    moe = moe_layers(cfg, shape.num_layers)
    layers: list[list[Tensor]] = []
    for i in range(shape.num_layers):
        hd, kv = shape.layer_heads[i] if shape.layer_heads else (shape.head_dim, shape.num_kv_heads)
        heads = shape.num_attention_heads
        if isinstance(other, dict) and isinstance(types, list) and i < len(types):
            heads = other["num_attention_heads"] if types[i] == other.get("attention_type") else heads
        layer = attention_heads(h, heads, hd, kv, tp, bias, qk_norm=True)
        layer += [lt.weight(Role.ATTENTION, (heads, h, 1))] if gate else []
        if i in moe:
            router = [Tensor(experts * h, split=False, fp32=True), Tensor(experts, split=False, fp32=True)]
            layer += router + lt.moe(h, experts, inter)[1:] + mlp(h, shared, True)
        else:
            layer += mlp(h, dense, True)
        layers.append(layer + [Tensor(2 * h, split=False)])
    dt = DTYPE_BYTES[dtype or shape.dtype]
    rope = sum(n * d for n, d in shape.rope_tables) * dt
    return lt.count_of_layers(layers, v, h, None, dt, False, rope_cache=rope)  # an LM head of its own, always
