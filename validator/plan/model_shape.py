"""A model's shape as far as KV-cache planning needs it, from config.json's contents.

Pure: inputs.py reads the files (config.json, safetensors headers, never tensor data); no torch, transformers or vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validator.errors import InputError
from validator.plan import router_norms as family
from validator.plan.biases import UNGATED_MLP, XIELU_SCALARS, Biases, biases
from validator.plan.classic import ClassicEdges, classic_edges
from validator.plan.layer_heads import own_attention
from validator.plan.layer_kinds import CHUNKED, FULL, LINEAR, LLAMA4_TYPES, NO_CACHE, SLIDING, layer_kinds
from validator.plan.quant import QuantFormat
from validator.plan.quant_config import format_from_config
from validator.plan.refusals import refuse_unmodelled
from validator.plan.rope import context_limits, model_rope_tables
from validator.plan.ssm_state import (
    ATTENTION,
    HYBRID_MODEL_TYPES,
    STATE,
    LayerState,
    hybrid_defaults,
    layer_roles,
    layer_state,
    mtp_layers_from_config,
)
from validator.plan.ssm_state import ssm_dtype_from_config as _ssm_dtype
from validator.plan.vision import VisionTower, vision_tower

DTYPE_BYTES = {
    **dict.fromkeys(("float32", "float", "fp32"), 4),
    **dict.fromkeys(("float16", "half", "fp16", "bfloat16", "bf16"), 2),
    **dict.fromkeys(("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "int8", "uint8"), 1),
}
# transformers' defaults for keys official configs leave out (gemma-3-4b-it names 6 of its text keys)
TRANSFORMERS_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
        rope_theta=1_000_000.0, rope_local_base_freq=10_000.0, sliding_window=4096, tie_word_embeddings=True),
    "glm4_moe": dict(partial_rotary_factor=0.5),  # vLLM's glm4_moe.py sets it where config.json does not
}  # fmt: skip


@dataclass(frozen=True)
class MLAShape:
    kv_lora_rank: int
    qk_rope_head_dim: int
    q_lora_rank: int | None = None  # None: a full q projection (DeepSeek-V2-Lite)
    qk_nope_head_dim: int | None = None  # these two size the projections (weights), not the KV
    v_head_dim: int | None = None

    @property
    def latent_dim(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    architecture: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    head_dim_source: str  # "head_dim" or "hidden_size / num_attention_heads"
    dtype: str  # the checkpoint's dtype name, e.g. "bfloat16"
    layer_kinds: tuple[str, ...]  # one per decoder layer
    sliding_window: int | None
    max_position_embeddings: int | None
    mla: MLAShape | None = None
    attention_chunk_size: int | None = None  # the chunk of the CHUNKED layers (Llama 4)
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    moe: bool = False
    kv_shared_layers: int = 0
    num_experts: int = 0  # routed experts per MoE layer (0: dense)
    experts_per_token: int = 0  # routed experts each token goes to (num_experts_per_tok)
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0  # leading dense layers of an MoE model (DeepSeek's first_k_dense_replace)
    moe_layers: tuple[int, ...] | None = None  # the MoE layers when dense ones interleave (Llama 4)
    dense_intermediate_size: int | None = None  # those dense layers' MLP width, when not intermediate_size
    quant_method: str | None = None  # config.json quantization_config.quant_method
    quant_bits: int | None = None  # bits per quantized linear weight, when the config says
    quant: QuantFormat | None = None  # the linear weights' format (config.json quantization_config)
    biases: Biases = Biases()  # which layers carry biases, LayerNorms (plan/biases.py)
    act_scalars: int = 0  # a layer's learned activation scalars, held in bfloat16 (Apertus' xIELU)
    gated_mlp: bool = True  # gate and up projections (SwiGLU); False: up and down only
    state: LayerState | None = None  # the per-request state of the LINEAR layers (hybrids, SSMs)
    ssm_dtype: str | None = None  # the recurrent state's dtype when the model fixes it
    mtp_layers: int = 0  # full-attention draft layers MTP speculative decoding adds (0: not modelled)
    router_bias: bool = False  # a float32 score-correction bias beside each router (DeepSeek-V3's noaux_tc)
    router_fp32: bool = False  # the router held in float32 whatever the dtype (plan/router_norms.py FP32_ROUTER)
    qk_norm: family.QkNorm | None = None  # the family's q/k norms, per head or across the heads (plan/router_norms.py)
    rope_tables: tuple[tuple[int, int], ...] = ()  # (positions, rotary dims) of each cos/sin table vLLM builds
    context_limits: tuple[int | None, int | None] = (None, None)  # vLLM's longest max_model_len: < 0.30, >= 0.30
    multimodal: bool = False  # config.json has a vision_config
    vision: VisionTower | None = None  # its tower, where counted (plan/vision.py)
    edges: ClassicEdges | None = None  # learned positions, OPT's projections and final norm (plan/classic.py)
    layer_heads: tuple[tuple[int, int], ...] = ()  # each layer's (head_dim, KV heads) where they differ (Gemma 4)

    @property
    def mlp_width(self) -> int | None:
        """The intermediate size of one MLP: an expert's in an MoE."""
        return (self.moe_intermediate_size or self.intermediate_size) if self.num_experts else self.intermediate_size


Config = dict[str, Any]  # a config.json as read


def _first(cfg: Config, *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


MAX_LAYERS = 4096
MAX_DIM = 1 << 24


def _optional_int(cfg: Config, field: str, *names: str, maximum: int = MAX_DIM) -> int | None:
    """A positive integer under one of `names` (the first set), or None when none is set."""
    v = _first(cfg, *names)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise InputError(f"config.json: {field} must be a positive integer, got {brief_value(v)}")
    if v > maximum:
        raise InputError(f"config.json: {field} = {v} is beyond any real model (at most {maximum}); check the file")
    return v


def _required_int(cfg: Config, field: str, *names: str, maximum: int = MAX_DIM) -> int:
    v = _optional_int(cfg, field, *names, maximum=maximum)
    if v is None:
        raise InputError(f"config.json: missing {names[0]}; the planner needs it to size the KV cache")
    return v


def brief_value(v: object) -> str:
    text = repr(v) if not isinstance(v, (list, dict)) else f"a {type(v).__name__}"
    return text[:60]


def shape_from_config(cfg: Config) -> ModelShape:
    """Derive the KV-relevant shape; nested ``text_config`` wins for multimodal models."""
    top, text = cfg, cfg.get("text_config")
    if isinstance(text, dict):
        cfg = {k: v for k, v in cfg.items() if k != "text_config"} | text
    cfg = family.as_vllm_reads(TRANSFORMERS_DEFAULTS.get(str(cfg.get("model_type")), {}) | cfg)
    roles = layer_roles(cfg) if cfg.get("model_type") in HYBRID_MODEL_TYPES else None
    state = layer_state(cfg) if roles is not None and STATE in roles else None
    if roles is not None:
        cfg = hybrid_defaults(cfg, roles)
    archs = cfg.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "unknown"
    model_type = str(cfg.get("model_type", "unknown"))
    refuse_unmodelled(cfg, model_type)
    layers = _required_int(
        cfg, "num_hidden_layers", "num_hidden_layers", "n_layer", "num_layers", "n_layers", maximum=MAX_LAYERS
    )
    heads = _required_int(cfg, "num_attention_heads", "num_attention_heads", "n_head", "num_heads")
    hidden = _optional_int(cfg, "hidden_size", "hidden_size", "n_embd", "d_model")

    if cfg.get("num_key_value_heads") is not None:
        kv_heads = _required_int(cfg, "num_key_value_heads", "num_key_value_heads")
    elif cfg.get("num_kv_heads") is not None:
        kv_heads = _required_int(cfg, "num_kv_heads", "num_kv_heads")
    elif cfg.get("multi_query_attention") and cfg.get("multi_query_group_num") is not None:
        kv_heads = _required_int(cfg, "multi_query_group_num", "multi_query_group_num")
    elif cfg.get("multi_query") is True:
        kv_heads = 1
    else:
        kv_heads = heads
    if kv_heads > heads or heads % kv_heads:  # noqa: SIM114
        raise InputError(f"config.json: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})")

    if cfg.get("head_dim") is not None:
        head_dim = _required_int(cfg, "head_dim", "head_dim")
        head_dim_source = "head_dim"
    else:
        if hidden is None:
            raise InputError("config.json: neither head_dim nor hidden_size is set; the planner needs one")
        if hidden % heads:
            raise InputError(f"config.json: hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})")
        head_dim = hidden // heads
        head_dim_source = "hidden_size / num_attention_heads"

    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    if not isinstance(dtype, str) or dtype.replace("torch.", "") not in DTYPE_BYTES:
        raise InputError(f"config.json: unknown torch_dtype {dtype!r}; set model.dtype in the profile")
    dtype = dtype.replace("torch.", "")

    mla = None
    if cfg.get("kv_lora_rank") is not None:
        mla = MLAShape(
            kv_lora_rank=_required_int(cfg, "kv_lora_rank", "kv_lora_rank"),
            qk_rope_head_dim=_required_int(cfg, "qk_rope_head_dim", "qk_rope_head_dim"),
            **{k: _optional_int(cfg, k, k) for k in ("q_lora_rank", "qk_nope_head_dim", "v_head_dim")},
        )

    sliding_window = cfg.get("sliding_window") or None  # vLLM reads 0 as no window (config/model.py)
    if sliding_window is not None and (
        isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or not 0 < sliding_window <= 1 << 40
    ):
        raise InputError(f"config.json: sliding_window must be a positive integer or null, got {sliding_window!r}")
    if model_type in ("cohere2", "cohere2_moe") and sliding_window:  # vLLM 0.32: a token sees the window + itself
        sliding_window += 1
    if roles is not None:
        kinds = [FULL if r == ATTENTION else LINEAR if r == STATE else NO_CACHE for r in roles]
    else:
        kinds = layer_kinds(cfg, layers, sliding_window)
    if SLIDING not in kinds:
        sliding_window = None
    elif sliding_window is None:
        raise InputError("config.json: layer_types names sliding_attention layers but sliding_window is not set")
    chunk = _optional_int(cfg, "attention_chunk_size", "attention_chunk_size", maximum=1 << 40)
    if chunk is None:  # vLLM builds chunked local attention only with a chunk size
        kinds = [FULL if k == CHUNKED else k for k in kinds]
    elif CHUNKED not in kinds:
        chunk = None

    max_pos = _optional_int(
        cfg,
        "max_position_embeddings",
        "max_position_embeddings",
        "n_positions",
        "max_sequence_length",
        "seq_length",
        maximum=1 << 40,
    )
    moe = any(cfg.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"))
    experts = _first(cfg, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", default=0)
    experts = experts if isinstance(experts, int) and not isinstance(experts, bool) and 0 < experts <= 1 << 16 else 0
    moe_inter = _optional_int(cfg, "moe_intermediate_size", "moe_intermediate_size")
    shared_inter = _first(cfg, "shared_expert_intermediate_size", default=0)
    n_shared = _first(cfg, "n_shared_experts", "moe_num_shared_experts")  # ERNIE 4.5's
    if not shared_inter and isinstance(n_shared, int) and n_shared > 0 and moe_inter:
        shared_inter = n_shared * moe_inter
    dense_first = cfg.get("first_k_dense_replace") or 0
    moe_layers, dense_inter = None, None
    if model_type in LLAMA4_TYPES and experts:
        # vLLM's llama4.py: an MoE block (routed experts and one shared expert, both of
        # intermediate_size) on every interleave_moe_layer_step-th layer, a dense MLP of
        # intermediate_size_mlp on the others
        step = cfg.get("interleave_moe_layer_step", 1)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InputError(f"config.json: interleave_moe_layer_step must be a whole number, got {step!r:.60}")
        moe_layers = tuple(i for i in range(layers) if step > 0 and (i + 1) % step == 0)
        dense_inter = _optional_int(cfg, "intermediate_size_mlp", "intermediate_size_mlp")
        moe_inter = _optional_int(cfg, "intermediate_size", "intermediate_size")
        shared_inter = moe_inter or 0
    if model_type == family.ERNIE_MOE and experts:
        moe_layers = family.ernie_moe_layers(cfg, layers)
    quant = cfg.get("quantization_config")
    quant = quant if isinstance(quant, dict) else {}
    qmethod = quant.get("quant_method") if isinstance(quant.get("quant_method"), str) else None
    bits = quant.get("bits")
    qbits = bits if isinstance(bits, int) and not isinstance(bits, bool) and 1 <= bits <= 16 else None
    shared = cfg.get("num_kv_shared_layers") or 0
    kinds, shared, own_heads = own_attention(cfg, model_type, kinds, shared, head_dim, kv_heads)
    for key in ("intermediate_size", "vocab_size"):  # optional, but never of the wrong type
        if cfg.get(key) is not None:
            _required_int(cfg, key, key, maximum=1 << 32)
    return ModelShape(
        model_type=model_type,
        architecture=arch,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        head_dim_source=head_dim_source,
        dtype=dtype,
        layer_kinds=tuple(kinds),
        sliding_window=sliding_window,
        max_position_embeddings=max_pos,
        mla=mla,
        attention_chunk_size=chunk,
        hidden_size=hidden,
        intermediate_size=_optional_int(cfg, "intermediate_size", "intermediate_size"),
        vocab_size=_optional_int(cfg, "vocab_size", "vocab_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        moe=bool(moe),
        kv_shared_layers=int(shared) if isinstance(shared, int) else 0,
        num_experts=experts,
        experts_per_token=_optional_int(
            cfg, "num_experts_per_tok", "num_experts_per_tok", "moe_topk", "top_k_experts", "moe_k"
        )
        or 0,
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared_inter if isinstance(shared_inter, int) and shared_inter > 0 else 0,
        first_dense_layers=dense_first if isinstance(dense_first, int) and 0 <= dense_first <= layers else 0,
        moe_layers=moe_layers,
        dense_intermediate_size=dense_inter,
        quant_method=qmethod,
        quant_bits=qbits,
        quant=format_from_config(quant) if quant else None,
        biases=biases(cfg, model_type),
        act_scalars=XIELU_SCALARS.get(model_type, 0),
        gated_mlp=model_type not in UNGATED_MLP,
        state=state,
        ssm_dtype=_ssm_dtype(cfg),
        mtp_layers=mtp_layers_from_config(cfg),
        router_bias=family.router_bias(cfg, model_type),
        router_fp32=model_type in family.FP32_ROUTER,
        qk_norm=family.qk_norm(cfg, model_type),
        rope_tables=model_rope_tables(cfg, model_type, own_heads, mla.qk_rope_head_dim if mla else head_dim, max_pos),
        context_limits=context_limits(cfg, model_type, max_pos),
        multimodal=isinstance(top.get("vision_config"), dict),
        vision=vision_tower(top, hidden),
        layer_heads=own_heads,
        edges=classic_edges(cfg),
    )
