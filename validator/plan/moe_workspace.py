"""The fused-MoE kernels' workspace during vLLM's profile step (pure).

vLLM's Triton experts (model_executor/layers/fused_moe) take two scratch buffers for each chunk of
up to VLLM_FUSED_MOE_CHUNK_SIZE tokens: (tokens, top_k, max(N, K)) and (tokens, top_k, N / 2) in
the activation dtype, N the gate/up width of one rank (2 x intermediate / TP), K the hidden size.
They are still held when the sampler warms up, so on the V1 runner an MoE's peak is the sampler
plus this workspace: Qwen1.5-MoE 0.258 GiB (0.25 above its sampler in the log), DeepSeek-V2-Lite
0.387 (0.43), Mixtral-8x7B at TP 2 0.657 (with its sampler 1.13, 1.21 logged). MXFP4 experts
(gpt-oss) run other kernels and are left out.
"""

from __future__ import annotations

from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.quant import Mxfp4
from validator.units import cdiv

CHUNK_TOKENS = 16 * 1024  # VLLM_FUSED_MOE_CHUNK_SIZE's default


def workspace_bytes(shape: ModelShape, tokens: int, tp: int, dtype: str | None) -> int:
    """0 for a dense model, an unknown top-k, or MXFP4 experts."""
    inter = shape.mlp_width
    if not shape.num_experts or not shape.experts_per_token or inter is None or isinstance(shape.quant, Mxfp4):
        return 0
    m, n, k = min(tokens, CHUNK_TOKENS) * shape.experts_per_token, 2 * cdiv(inter, tp), shape.hidden_size or 0
    return m * (max(n, k) + n // 2) * DTYPE_BYTES[dtype or shape.dtype]
