"""Weight bytes of state-space and linear-attention models from config.json (pure), as vLLM 0.32
allocates them: Mamba, Mamba-2, Jamba, Nemotron-H, Granite-4 (granitemoehybrid), Qwen3-Next,
Qwen3.5 (3.6 and 3.8 are the same module: Qwen3-Next's layers, a text_config, a vision tower),
LFM2 and LFM2-MoE (short convolutions).

One tensor per allocation (q/k/v and gate/up fused, experts stacked, as vLLM builds them), each
split by tensor parallelism or held whole by every rank. What a checkpoint's headers do not say:
a state layer's A (A_log) is float32 whatever the model's dtype (vLLM's MambaMixer, MambaMixer2
and Qwen's Gated DeltaNet), Jamba, Nemotron-H and Qwen3-Next keep an LM head of their own even
where config.json ties it, and a Mamba-2 mixer whose groups TP does not divide holds the group on
every rank (extra_groups_for_head_shards). Quantized checkpoints are counted (tests/test_quantized_hybrids.py):
each linear weight vLLM builds with the quantization in its format's bytes where the format's skip
list does not leave its role unquantized (routers, the shared expert's gate, convolutions, norms never
are); quantized Mamba-1 mixers (Jamba, Mamba) and Nemotron-H's latent expert projections are not
counted (None): their checkpoint's headers, or model.weights_bytes, give the bytes.
"""

from __future__ import annotations

import math
from typing import Any

from validator.errors import InputError
from validator.plan import layer_tensors as lt
from validator.plan.layer_tensors import Layers, Tensor, attention_heads, linear, mlp, moe, weight, whole
from validator.plan.mixer_tensors import gated_delta_net, mamba1, mamba2
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.quant import Mxfp4, QuantFormat, Role
from validator.plan.ssm_state import (
    ATTENTION,
    GatedDeltaNetState,
    Mamba1State,
    Mamba2State,
    ShortConvState,
    layer_roles,
)
from validator.plan.weights import WeightCount
from validator.units import cdiv


def attention(shape: ModelShape, tp: int, bias: bool, gate: bool, qk_norm: bool) -> list[Tensor]:
    """The model's one attention shape (attention_heads)."""
    h, heads, hd, kv = shape.hidden_size or 0, shape.num_attention_heads, shape.head_dim, shape.num_kv_heads
    return attention_heads(h, heads, hd, kv, tp, bias, gate, qk_norm)


def _dt_rank(cfg: dict[str, Any], key: str, h: int) -> int:
    """Mamba's time-step rank: "auto" (or absent) is ceil(hidden / 16), as transformers sets it."""
    return math.ceil(h / 16) if cfg.get(key, "auto") == "auto" else whole(cfg, key)


def _pure(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """Mamba and Mamba-2: a norm and the mixer a layer (MambaDecoderLayer, Mamba2DecoderLayer)."""
    h, st, n = shape.hidden_size or 0, shape.state, shape.num_layers
    conv_bias, bias = bool(cfg.get("use_conv_bias", True)), bool(cfg.get("use_bias"))
    if isinstance(st, Mamba1State):
        mixer = mamba1(h, st, _dt_rank(cfg, "time_step_rank", h), conv_bias, bias, norms=False)
    elif isinstance(st, Mamba2State):
        mixer = mamba2(h, st, conv_bias, bias, tp)
    else:
        return None
    return [[Tensor(h, split=False), *mixer] for _ in range(n)]


def _jamba(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """Two norms, Mamba or attention (no bias, no rotary), then an MLP, or experts every
    expert_layer_period-th layer from expert_layer_offset (JambaConfig.layers_num_experts)."""
    h, st, inter = shape.hidden_size or 0, shape.state, shape.intermediate_size or 0
    if not isinstance(st, Mamba1State):
        return None
    period, offset = whole(cfg, "expert_layer_period", 1) or 1, whole(cfg, "expert_layer_offset", 0)
    e, dt = whole(cfg, "num_experts", 1), _dt_rank(cfg, "mamba_dt_rank", h)
    conv_bias, bias = bool(cfg.get("mamba_conv_bias")), bool(cfg.get("mamba_proj_bias"))
    out = []
    for i, role in enumerate(layer_roles(cfg) or []):
        layer = [Tensor(h, split=False), Tensor(h, split=False)]
        if role == ATTENTION:
            layer += attention(shape, tp, False, False, False)
        else:
            layer += mamba1(h, st, dt, conv_bias, bias, norms=True)
        out.append(layer + (moe(h, e, inter) if e > 1 and i % period == offset else mlp(h, inter, True)))
    return out


_NEMOTRON_MARKS = {"mamba": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}


def nemotron_moe(cfg: dict[str, Any], h: int, fp32_router: bool) -> list[Tensor] | None:
    """Nemotron-H's MoE block (NemotronHMoE): a sigmoid router with its float32 correction bias,
    ungated experts (up, down) over the hidden size or, with moe_latent_size, over a latent one that
    two replicated projections enter and leave, and ungated shared experts. The router computes in
    float32: its weight is stored so (GateLinear) except on Hopper and Blackwell, whose kernels read
    it in the model's dtype."""
    e, inter = whole(cfg, "n_routed_experts"), whole(cfg, "moe_intermediate_size")
    latent, shared = cfg.get("moe_latent_size"), whole(cfg, "moe_shared_expert_intermediate_size")
    if not e or not inter or (latent is not None and (isinstance(latent, bool) or not isinstance(latent, int))):
        return None
    m, bias = latent or h, bool(cfg.get("mlp_bias"))
    out = [Tensor(e * h, split=False, fp32=fp32_router), Tensor(e, split=False, fp32=True)]
    out += [weight(Role.EXPERT, (inter, m, e)), weight(Role.EXPERT, (m, inter, e))]
    if latent:
        out += [Tensor(latent * h, split=False), Tensor(h * latent, split=False)]
        out += [Tensor(latent, split=False), Tensor(h, split=False)] if bias else []
    width = shared * whole(cfg, "n_shared_experts", 1)
    return out + (mlp(h, width, False, bias, role=Role.SHARED_EXPERT) if shared else [])


def _nemotron_h(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """One norm and one block a layer: Mamba-2 (M), attention (*), an ungated MLP (-), its width
    the mlp_index-th of a listed intermediate_size, or experts (E)."""
    h, st, inter = shape.hidden_size or 0, shape.state, cfg.get("intermediate_size")
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        pattern = "".join(_NEMOTRON_MARKS.get(t, "?") for t in cfg.get("layers_block_type") or [])
    if not isinstance(st, Mamba2State) or not pattern or "?" in pattern:
        return None
    experts = nemotron_moe(cfg, h, fp32_router) if "E" in pattern else []
    if experts is None:
        return None
    out, mlp_i = [], -1
    for mark in pattern:
        layer = [Tensor(h, split=False)]
        if mark == "M":
            layer += mamba2(h, st, bool(cfg.get("use_conv_bias")), bool(cfg.get("use_bias")), tp)
        elif mark == "*":
            layer += attention(shape, tp, False, False, False)
        elif mark == "E":
            layer += experts
        else:
            mlp_i += 1
            width = inter[min(mlp_i, len(inter) - 1)] if isinstance(inter, list) and inter else inter
            if isinstance(width, bool) or not isinstance(width, int):
                return None
            layer += mlp(h, width, False, bool(cfg.get("mlp_bias")))
        out.append(layer)
    return out


def _granite4(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """Two norms, Mamba-2 or attention, then experts (num_local_experts) and a shared MLP."""
    h, st = shape.hidden_size or 0, shape.state
    if not isinstance(st, Mamba2State):
        return None
    e, shared = whole(cfg, "num_local_experts"), whole(cfg, "shared_intermediate_size")
    out = []
    for role in layer_roles(cfg) or []:
        layer = [Tensor(h, split=False), Tensor(h, split=False)]
        if role == ATTENTION:
            bias = bool(cfg.get("attention_bias"))
            layer += attention(shape, tp, bias, False, False)
        else:
            layer += mamba2(h, st, bool(cfg.get("mamba_conv_bias")), bool(cfg.get("mamba_proj_bias")), tp)
        layer += (moe(h, e, shape.intermediate_size or 0) if e else []) + (mlp(h, shared, True) if shared else [])
        out.append(layer)
    return out


def _qwen3_next(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """Two norms, Gated DeltaNet or gated attention (q doubled for the gate, q/k norms), then experts
    with a shared expert and its gate where decoder_sparse_step and mlp_only_layers say, else an MLP.
    Qwen3.5 builds these layers (Qwen3_5DecoderLayer), with two scales more where layer_scale asks."""
    h, st, shared = shape.hidden_size or 0, shape.state, shape.shared_expert_intermediate_size
    if not isinstance(st, GatedDeltaNetState):
        return None
    e, step, dense = whole(cfg, "num_experts"), whole(cfg, "decoder_sparse_step", 1), cfg.get("mlp_only_layers")
    if dense is not None and (not isinstance(dense, list) or not all(isinstance(i, int) for i in dense)):
        raise InputError(f"config.json: mlp_only_layers must list layer indices, got {dense!r:.40}")
    bias, gate = bool(cfg.get("qkv_bias")), bool(cfg.get("attn_output_gate", True))
    out = []
    for i, role in enumerate(layer_roles(cfg) or []):
        layer = [Tensor(h, split=False), Tensor(h, split=False)]
        if role == ATTENTION:
            layer += attention(shape, tp, bias, gate, True)
        else:
            layer += gated_delta_net(h, st, fused=shape.model_type == "qwen3_next")
        if e and step and i not in (dense or []) and (i + 1) % step == 0:
            layer += moe(h, e, shape.moe_intermediate_size or 0)  # the shared expert's gate: never quantized
            layer += mlp(h, shared, True, role=Role.SHARED_EXPERT) + [Tensor(h, split=False)] if shared else []
        else:
            layer += mlp(h, shape.intermediate_size or 0, True)
        out.append(layer + [Tensor(h, split=False)] * (2 if cfg.get("layer_scale") else 0))
    return out


def _lfm2(cfg: dict[str, Any], shape: ModelShape, tp: int, fp32_router: bool = False) -> Layers | None:
    """Two norms, a short convolution (its kernel, in_proj to 3 x conv_dim, out_proj) or attention
    with q/k norms, then Lfm2MLP, whose width vLLM adjusts: 2/3 of intermediate_size, times
    block_ffn_dim_multiplier, rounded up to block_multiple_of, where block_auto_adjust_ff_dim says.
    LFM2-MoE: an MLP of intermediate_size in the first num_dense_layers, then a router in the model's
    dtype (its GateLinear asks for no float32) with its float32 correction bias where
    use_expert_bias, and experts of moe_intermediate_size."""
    h, st, ff = shape.hidden_size or 0, shape.state, whole(cfg, "intermediate_size")
    if not isinstance(st, ShortConvState) or st.conv_dim != h:
        return None
    e, dense = whole(cfg, "num_experts"), whole(cfg, "num_dense_layers")
    correction = [Tensor(e, split=False, fp32=True)] if cfg.get("use_expert_bias") else []
    experts = [
        Tensor(e * h, split=False),  # the router: in the model's dtype (measured on the CPU too)
        *correction,
        *moe(h, e, whole(cfg, "moe_intermediate_size"))[1:],
    ]
    if shape.model_type != "lfm2_moe" and cfg.get("block_auto_adjust_ff_dim", True):
        ff = int(2 * ff / 3)
        mult = cfg.get("block_ffn_dim_multiplier")
        ff = int(mult * ff) if isinstance(mult, (int, float)) and not isinstance(mult, bool) else ff
        of = whole(cfg, "block_multiple_of", 256) or 1
        ff = of * cdiv(ff, of)
    bias, out = bool(cfg.get("conv_bias")), list[list[Tensor]]()
    for role in layer_roles(cfg) or []:
        layer = [Tensor(h, split=False), Tensor(h, split=False)]
        if role == ATTENTION:
            layer += attention(shape, tp, False, False, True)
        else:
            w = [weight(Role.MIXER, (h, h, 3))] + ([Tensor(3 * h)] if bias else [])  # in_proj: B, C, x
            layer += linear(h, st.conv_kernel, bias) + w + linear(h, h, bias, row=True, role=Role.MIXER)
        moe_layer = shape.model_type == "lfm2_moe" and len(out) >= dense
        out.append(layer + (experts if moe_layer else mlp(h, ff, True)))
    return out


FAMILIES = {
    "mamba": _pure,
    "mamba2": _pure,
    "jamba": _jamba,
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite4,
    "qwen3_next": _qwen3_next,
    "qwen3_5_text": _qwen3_next,
    "qwen3_5_moe_text": _qwen3_next,
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2,
}


# vLLM ties the LM head to the embeddings, where config.json asks, only for these families
TIES = ("mamba", "mamba2", "granitemoehybrid", "qwen3_5_text", "qwen3_5_moe_text", "lfm2", "lfm2_moe")
# Jamba's and Nemotron-H's attention has no rotary embedding
ROTARY = ("granitemoehybrid", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "lfm2", "lfm2_moe")
NESTED = ("qwen3_5", "qwen3_5_moe")  # Qwen3_5(Moe)ForConditionalGeneration: the text model in text_config


# the families whose every linear layer the count tags with its role (gated_delta_net, attention, mlp, moe)
QUANTIZED = (
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "mamba2",
    "nemotron_h",
    "granitemoehybrid",
    "lfm2",
    "lfm2_moe",
)


def quantized_family(model_type: str, fmt: QuantFormat | None) -> bool:
    """Whether a quantized checkpoint of this family is counted: a format kvgate reads (MXFP4 is
    gpt-oss's experts only) on a family whose linear layers carry their roles."""
    return model_type in QUANTIZED and fmt is not None and not isinstance(fmt, Mxfp4)


def count_hybrid(
    cfg: dict[str, Any], shape: ModelShape, dtype: str | None = None, tp: int = 1, fp32_router: bool = False
) -> WeightCount | None:
    """The bytes vLLM 0.32 allocates for a hybrid or state-space model, per layer; None where this
    family, a layer kind in it, or its quantization is not counted. `fp32_router`: a GPU before
    Hopper (or the CPU), where a router computing in float32 stores its weight so."""
    h, v, family = shape.hidden_size, shape.vocab_size, FAMILIES.get(shape.model_type)
    text = cfg.get("text_config")
    if cfg.get("model_type") in NESTED and isinstance(text, dict):
        cfg = {k: val for k, val in cfg.items() if k != "text_config"} | text
    if family is None or cfg.get("model_type") != shape.model_type or shape.state is None:
        return None
    fmt = shape.quant
    if h is None or v is None or (shape.quant_method or fmt) and not quantized_family(shape.model_type, fmt):
        return None
    if fmt is not None and cfg.get("moe_latent_size"):  # Nemotron-H's latent projections: roles not read
        return None
    layers = family(cfg, shape, tp, fp32_router)
    if layers is None:
        return None
    dt = DTYPE_BYTES[dtype or shape.dtype]
    tied = shape.tie_word_embeddings and shape.model_type in TIES
    rope = sum(n * d for n, d in shape.rope_tables) if shape.model_type in ROTARY else 0
    return lt.count_of_layers(
        layers,
        v,
        h,
        fmt,
        dt,
        tied,
        rope_cache=(rope + (shape.vision.rotary_table if shape.vision else 0)) * dt,
        vision=shape.vision.params * dt if shape.vision else 0,
        as_allocated=True,
    )
