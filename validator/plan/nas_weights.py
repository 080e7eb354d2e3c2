"""Weight bytes of a Nemotron-NAS model (plan/nemotron_nas.py) from config.json, as vLLM 0.32's
nemotron_nas.py allocates them (pure): per layer the attention (fused q/k/v of its KV heads, o, the
input norm) unless its block skips it, and the MLP (gate/up, down, the post-attention norm) unless
its block skips it, each its own width; a Llama's embedding, final norm, LM head and rotary table.
Measured on a tiny one (tests/test_nemotron_nas.py)."""

from __future__ import annotations

from typing import Any

from validator.plan import layer_tensors as lt
from validator.plan.layer_tensors import Tensor, attention_heads, mlp
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.nemotron_nas import NAS_TYPES, nas_blocks
from validator.plan.weights import WeightCount


def count_nas(cfg: dict[str, Any], shape: ModelShape, dtype: str | None = None, tp: int = 1) -> WeightCount | None:
    """None for any other family, or where a size or a bias (Smaug's, InternLM 3's) is not counted."""
    h, v = shape.hidden_size, shape.vocab_size
    if shape.model_type not in NAS_TYPES or h is None or v is None or shape.quant_method and shape.quant is None:
        return None
    if any(cfg.get(k) for k in ("attention_bias", "bias", "qkv_bias", "mlp_bias")):
        return None
    fmt, dt = shape.quant, DTYPE_BYTES[dtype or shape.dtype]
    layers: list[list[Tensor]] = []
    for kv, width in nas_blocks(cfg):
        layer = []
        if kv is not None:
            layer += attention_heads(h, shape.num_attention_heads, shape.head_dim, kv, tp, False)
            layer += [Tensor(h, split=False)]
        if width is not None:
            layer += mlp(h, width, True) + [Tensor(h, split=False)]
        layers.append(layer)

    rope = sum(n * d for n, d in shape.rope_tables) * dt
    return lt.count_of_layers(layers, v, h, fmt, dt, shape.tie_word_embeddings, rope_cache=rope)
