"""What some routed-expert families hold beside their matrices, as vLLM 0.32's model classes build
it (read from their source, measured on tiny models: tests/test_routed_moe_weights.py): a router held in
float32 whatever the checkpoint's dtype, a float32 score-correction bias beside it, q/k norms per head
or across the heads, the norms a layer holds, a shared expert's gate, and ERNIE 4.5's placement of its
MoE layers (the norms measured in tests/test_norm_families.py)."""

from __future__ import annotations

from enum import Enum
from typing import Any

from validator.errors import InputError
from validator.plan.classic import classic_reads
from validator.plan.dbrx import dbrx_reads
from validator.plan.falcon import falcon_reads
from validator.plan.nemotron_nas import nas_reads
from validator.plan.step3p5 import step_reads

# GateLinear built with params_dtype float32 and no quantization: glm4_moe.py (GLM-4.5 to 4.7),
# glm4_moe_lite.py (GLM-4.7-Flash, MLA), minimax_m2.py (MiniMax-M2, M2.5), ernie45_moe.py (ERNIE 4.5)
FP32_ROUTER = ("glm4_moe", "glm4_moe_lite", "minimax_m2", "ernie4_5_moe")
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
ERNIE_MOE = "ernie4_5_moe"


class QkNorm(Enum):
    HEAD = "one RMSNorm of head_dim for q and one for k, whole on every rank (GLM-4.5, HunYuan, EXAONE 4, Apertus)"
    LAYER = "RMSNorms across all q heads and all KV heads, split by TP as the heads (MiniMax-M2's)"
    LAYER_WHOLE = "RMSNorms across all q heads and all KV heads, whole on every rank (OLMoE, OLMo 2 / 3, FlexOlmo)"


def router_bias(cfg: dict[str, Any], model_type: str) -> bool:
    """A float32 correction bias beside each router: GLM always; DeepSeek with noaux_tc; MiniMax-M2
    with use_routing_bias."""
    if model_type in DEEPSEEK:
        return cfg.get("topk_method") == "noaux_tc"
    if model_type == "minimax_m2":
        return cfg.get("use_routing_bias") is True
    return model_type in FP32_ROUTER


def qk_norm(cfg: dict[str, Any], model_type: str) -> QkNorm | None:
    """The family's q/k norms, where it has them."""
    if model_type.startswith(("qwen3", "gemma3")) or model_type == "glm4_moe" and cfg.get("use_qk_norm") is True:
        return QkNorm.HEAD
    if model_type in ("hunyuan_v1_dense", "hunyuan_v1_moe", "exaone4", "apertus", "dots1"):  # always built
        return QkNorm.HEAD
    if model_type == "persimmon" and cfg.get("qk_layernorm", True) is True:  # LayerNorms, a bias each
        return QkNorm.HEAD
    if model_type == "minimax_m2":  # built whatever config.json's use_qk_norm says
        return QkNorm.LAYER
    if model_type in ("olmoe", "olmo2", "olmo3", "flex_olmo"):  # OLMoE gathers q and k across the ranks to norm them
        return QkNorm.LAYER_WHOLE
    return None


def ernie_moe_layers(cfg: dict[str, Any], layers: int) -> tuple[int, ...]:
    """ERNIE 4.5's MoE layers (ernie45_moe.py): every moe_layer_interval-th from moe_layer_start_index
    to moe_layer_end_index (defaults 0, the last layer, 1), none where use_moe is false."""
    got = {}
    for key, default in (("moe_layer_start_index", 0), ("moe_layer_end_index", layers - 1), ("moe_layer_interval", 1)):
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f"config.json: {key} must be a non-negative integer for an ERNIE 4.5 model, got {v!r:.40}")
        got[key] = v
    start, end, step = got["moe_layer_start_index"], got["moe_layer_end_index"], got["moe_layer_interval"]
    if cfg.get("use_moe", True) is False or step == 0:
        return ()
    return tuple(i for i in range(layers) if start <= i <= end and (i + 1) % step == 0)


NO_NORM_WEIGHTS = ("olmo",)  # OLMo 1's LayerNorms hold no parameters (elementwise_affine off)


def layer_norms(model_type: str) -> int:
    """Hidden-size norms a decoder layer holds: Cohere and Phi-2 one before their attention and MLP
    side by side, Gemma 2 / 3 four (pre- and post-feedforward too), GLM-4 four (post-attention and
    post-MLP too)."""
    if model_type in NO_NORM_WEIGHTS:
        return 0
    if model_type in ("cohere", "cohere2", "phi"):
        return 1
    return 4 if model_type.startswith(("gemma2", "gemma3")) or model_type == "glm4" else 2


def shared_expert_gate(model_type: str) -> bool:
    """A one-row gate beside the shared expert, whole on every rank (Qwen2-MoE's)."""
    return model_type == "qwen2_moe"


def as_vllm_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    """config.json's keys as vLLM 0.32 reads them for families that name them their own way.

    HunYuan MoE (through the Transformers backend: transformers' modeling_hunyuan_v1_moe) holds its
    experts and one shared MLP of intermediate_size, whatever moe_intermediate_size and
    num_shared_expert say, and per-layer lists of moe_topk (Hunyuan-A13B's config.json) are read as
    their largest; its checkpoints store the router in float32, held in the dtype. Granite MoE's
    shared MLP is shared_intermediate_size wide (granitemoeshared.py; 0: none). Falcon: plan/falcon.py;
    Nemotron-NAS: plan/nemotron_nas.py; Step 3.5: plan/step3p5.py; DBRX: plan/dbrx.py; GPT-2,
    GPTBigCode, OPT, GPT-J, BLOOM: plan/classic.py."""
    cfg = classic_reads(step_reads(nas_reads(falcon_reads(dbrx_reads(cfg)))))
    model_type = cfg.get("model_type")
    if model_type == "jetmoe":  # JetMoeConfig: kv_channels a head, num_key_value_heads x top-k query heads
        kv, k = cfg.get("num_key_value_heads"), cfg.get("num_experts_per_tok", 2)
        heads = kv * k if all(isinstance(x, int) and not isinstance(x, bool) for x in (kv, k)) else None
        return cfg | {"head_dim": cfg.get("kv_channels", 128), "num_attention_heads": heads}
    if model_type == "granitemoeshared":
        return cfg | {"shared_expert_intermediate_size": cfg.get("shared_intermediate_size")}
    if model_type != "hunyuan_v1_moe":
        return cfg
    topk = cfg.get("moe_topk")
    if isinstance(topk, list) and topk and all(isinstance(k, int) and not isinstance(k, bool) for k in topk):
        topk = max(topk)
    out = {k: v for k, v in cfg.items() if k not in ("moe_intermediate_size", "num_shared_expert")}
    return out | {"moe_topk": topk, "shared_expert_intermediate_size": cfg.get("intermediate_size")}
