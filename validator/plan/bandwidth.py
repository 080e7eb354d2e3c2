"""Decode bandwidth (seed 003): KV is stored once and read every step.

With prefix S, input P, H = S + P and G output tokens there are
n_d = G - 1 decode steps; step j reads H + j cached positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from validator.plan.model_shape import DTYPE_BYTES, ModelShape

if TYPE_CHECKING:  # capacity imports nothing of this module; the layout is only annotated here
    from validator.plan.capacity import KVLayout
from validator.units import cdiv


@dataclass(frozen=True)
class DecodeReads:
    token_reads: int  # sum over decode steps of cached positions read
    bytes_read: int
    bytes_added: int  # KV written during decode
    bytes_stored: int  # KV held at the end

    @property
    def read_to_stored(self) -> float | None:
        """None where nothing grows with the context (an attention-free model: its state is fixed)."""
        return self.bytes_read / self.bytes_stored if self.bytes_stored else None


def decode_reads(c_kv: int, prompt: int, output: int, prefix: int = 0) -> DecodeReads:
    h = prefix + prompt
    n_d = max(output - 1, 0)
    token_reads = n_d * h + n_d * (n_d - 1) // 2
    return DecodeReads(token_reads, c_kv * token_reads, c_kv * n_d, c_kv * (h + n_d))


def weight_read_bytes(weights: int, shape: ModelShape) -> int:
    """Weights read per step: all but an untied input embedding (looked up by row)."""
    emb = embedding_bytes(shape)
    if emb is None or shape.tie_word_embeddings:
        return weights
    return weights - emb


def crossover_batch(weight_reads: int, c_kv: int, context: int) -> int:
    """Smallest batch whose KV reads per step pass the weight reads: ceil(R_W / (c_KV * H))."""
    return math.ceil(weight_reads / (c_kv * context))


def step_floor_seconds(weight_reads: int, kv_reads: int, bandwidth_bytes_per_s: int) -> float:
    """A decode step cannot beat reading its weights and KV once at full bandwidth."""
    return (weight_reads + kv_reads) / bandwidth_bytes_per_s


def at_limits(
    shape: ModelShape,
    layout: KVLayout,
    max_model_len: int,
    max_num_seqs: int,
    weights: int | None,
    tp: int,
    bandwidth_bytes_per_s: int | None,
    request: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Per-rank figures at the planned limits (every sequence at full length), and for one
    (prompt, output) request when given."""
    kv_step = max_num_seqs * layout.payload_bytes(max_model_len)
    out: dict[str, Any] = {
        "kv_read_bytes_per_step": kv_step,
        "weight_read_bytes_per_step": None,
        "crossover_batch": None,
        "decode_step_floor_ms": None,
        "memory_bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "request": None,
    }
    if request is not None:
        r = decode_reads(layout.kv_bytes_per_token, prompt=request[0], output=request[1])
        out["request"] = {
            "prompt_tokens": request[0],
            "output_tokens": request[1],
            "decode_steps": max(request[1] - 1, 0),
            "token_reads": r.token_reads,
            "kv_bytes_read": r.bytes_read,
            "kv_bytes_added_in_decode": r.bytes_added,
            "kv_bytes_stored": r.bytes_stored,
            "read_to_stored": None if r.read_to_stored is None else round(r.read_to_stored, 1),
        }
    if weights is None:
        return out
    rw = cdiv(weight_read_bytes(weights, shape), tp)
    out["weight_read_bytes_per_step"] = rw
    payload = layout.payload_bytes(max_model_len)
    out["crossover_batch"] = math.ceil(rw / payload) if payload else None
    if bandwidth_bytes_per_s:
        out["decode_step_floor_ms"] = step_floor_seconds(rw, kv_step, bandwidth_bytes_per_s) * 1e3
    return out


def embedding_bytes(shape: ModelShape) -> int | None:
    """Bytes of the input embedding table (read by row, not whole, each step)."""
    if shape.hidden_size is None or shape.vocab_size is None:
        return None
    return shape.vocab_size * shape.hidden_size * DTYPE_BYTES[shape.dtype]
