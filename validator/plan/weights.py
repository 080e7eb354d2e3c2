"""Weight bytes of a decoder from its config.json, per GPU rank (pure; no checkpoint needed).

Counts what vLLM loads: the embedding table, per layer the attention projections (q, k, v, o,
plus Qwen3's q/k norms), the MLP (dense gate/up/down, or routed experts + router + shared
experts for MoE layers), the two norms, the final norm and an untied LM head. Quantized
linear weights (config.json's quantization_config) take their bits; embeddings, norms and the
LM head stay in the checkpoint dtype.

Split: tensor parallelism divides every layer and the vocabulary; pipeline parallelism gives
each stage num_layers / pp layers, the embeddings to the first stage and the final norm and
LM head to the last (rank 0 is the first stage, the one vLLM logs).
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.plan.model_shape import DTYPE_BYTES, LINEAR, ModelShape
from validator.units import cdiv

# bits per linear weight by quant_method when the config gives no `bits`
_QUANT_BITS = {
    "fp8": 8,
    "fbgemm_fp8": 8,
    "compressed-tensors": 8,
    "awq": 4,
    "gptq": 4,
    "gptq_marlin": 4,
    "awq_marlin": 4,
    "bitsandbytes": 4,
    "mxfp4": 4,
}


@dataclass(frozen=True, kw_only=True)
class WeightCount:
    """Parameters by where they live (whole model)."""

    embedding: int  # input embedding table
    lm_head: int  # 0 when tied to the embeddings
    per_layer_linear: tuple[int, ...]  # quantizable matrices, one entry per decoder layer
    per_layer_other: int  # norms and biases per layer (checkpoint dtype)
    final_norm: int
    linear_bits: int  # bits per linear weight
    dtype_bytes: int  # checkpoint dtype bytes

    def rank_bytes(self, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
        """Bytes held by one GPU: tensor rank of pipeline stage `stage`."""
        layers = len(self.per_layer_linear)
        per_stage = cdiv(layers, pp)
        lo, hi = stage * per_stage, min((stage + 1) * per_stage, layers)
        linear = sum(self.per_layer_linear[lo:hi])
        b = linear * self.linear_bits // 8 + (hi - lo) * self.per_layer_other * self.dtype_bytes
        b = cdiv(b, tp)
        if stage == 0:
            b += cdiv(self.embedding * self.dtype_bytes, tp)
        if stage == pp - 1:
            b += cdiv(self.lm_head * self.dtype_bytes, tp) + self.final_norm * self.dtype_bytes
        return b

    @property
    def total_bytes(self) -> int:
        return self.rank_bytes()


def count_weights(shape: ModelShape, dtype: str | None = None) -> WeightCount | None:
    """The parameter count of a Llama/Qwen/Mistral-style decoder, dense or MoE; None for shapes it does
    not describe (MLA, linear-attention hybrids, missing sizes)."""
    h, v = shape.hidden_size, shape.vocab_size
    if shape.mla or LINEAR in shape.layer_kinds or h is None or v is None:
        return None
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_kv_heads * shape.head_dim
    attn = h * q + 2 * h * kv + q * h
    other = 2 * h + (2 * shape.head_dim if shape.model_type.startswith("qwen3") else 0)
    per_layer = []
    for i in range(shape.num_layers):
        if shape.num_experts and i >= shape.first_dense_layers:
            inter = shape.moe_intermediate_size or shape.intermediate_size
            if inter is None:
                return None
            mlp = shape.num_experts * 3 * h * inter + h * shape.num_experts  # experts + router
            mlp += 3 * h * shape.shared_expert_intermediate_size
        else:
            if shape.intermediate_size is None:
                return None
            mlp = 3 * h * shape.intermediate_size
        per_layer.append(attn + mlp)
    dt = DTYPE_BYTES[dtype or shape.dtype]
    bits = shape.quant_bits or _QUANT_BITS.get(shape.quant_method or "", dt * 8)
    return WeightCount(
        embedding=v * h,
        lm_head=0 if shape.tie_word_embeddings else v * h,
        per_layer_linear=tuple(per_layer),
        per_layer_other=other,
        final_norm=h,
        linear_bits=bits,
        dtype_bytes=dt,
    )
