"""The planner's answer (plan.limits.make_plan): the KV layout, the blocks, the limits, the ledger,
whether it fits and, when not, the ways out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from validator.plan.capacity import KVLayout
from validator.plan.kv_spec import ChunkedLocalSpec, MambaSpec, SlidingWindowSpec
from validator.plan.ledger import PlanInput


@dataclass(kw_only=True)
class Plan:
    inp: PlanInput
    layout: KVLayout
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    usable_blocks: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    blocks_per_seq: int
    max_concurrency: float
    kv_cache_tokens: int
    kv_bytes_at_limits: int
    kv_payload_bytes_at_limits: int
    ledger: dict[str, Any]
    fits: bool
    reasons: list[str]
    ways_out: list[dict[str, Any]]
    notes: list[str]
    bandwidth: dict[str, Any] | None = None
    limits_source: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        s = self.inp.shape
        return {
            "model": {
                "architecture": s.architecture,
                "model_type": s.model_type,
                "num_layers": s.num_layers,
                "num_attention_heads": s.num_attention_heads,
                "num_kv_heads": s.num_kv_heads,
                "head_dim": s.head_dim,
                "head_dim_source": s.head_dim_source,
                "dtype": s.dtype,
                "layer_kinds": _runs(s.layer_kinds),
                "sliding_window": s.sliding_window,
                "max_position_embeddings": s.max_position_embeddings,
                "mla_latent_dim": s.mla.latent_dim if s.mla else None,
                # layers with their own attention shape (Gemma 4's full layers): index, head_dim, KV heads
                "own_layer_heads": [
                    [i, d, k] for i, (d, k) in enumerate(s.layer_heads) if (d, k) != (s.head_dim, s.num_kv_heads)
                ],
            },
            "platform": self.inp.platform,
            "vllm_version": self.inp.vllm_version,
            "pipeline_parallel_size": self.inp.pipeline_parallel_size,
            "kv_cache_dtype": self.inp.kv_cache_dtype,
            "tensor_parallel_size": self.inp.tensor_parallel_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "bytes_per_block": self.layout.bytes_per_block,
            "kv_groups": [
                {
                    "kind": type(g.spec).__name__,
                    "layers": g.num_layers,
                    "page_size_bytes": g.spec.page_size_bytes,
                    "block_size": g.spec.block_size,
                    # what one request may claim in this group (at max_model_len; a window or a chunk
                    # group: its window or chunk plus the in-flight tokens): vLLM's admission cap
                    "blocks_per_request": g.spec.blocks_per_request(
                        self.max_model_len, self.layout.max_concurrent_batches * self.max_num_batched_tokens
                    ),
                    **(
                        {"attention_chunk_size": g.spec.attention_chunk_size}
                        if isinstance(g.spec, ChunkedLocalSpec)
                        else {}
                    ),
                    **({"sliding_window": g.spec.sliding_window} if isinstance(g.spec, SlidingWindowSpec) else {}),
                    # how a request holds its state pages (the judge's freeze arithmetic, judge/layout.py)
                    **(
                        {"mamba_cache_mode": g.spec.cache_mode, "speculative_blocks": g.spec.speculative_blocks}
                        if isinstance(g.spec, MambaSpec)
                        else {}
                    ),
                }
                for g in self.layout.groups
            ],
            "blocks_per_seq": self.blocks_per_seq,
            "num_blocks": self.num_blocks,
            "usable_blocks": self.usable_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "enable_prefix_caching": self.inp.enable_prefix_caching,
            "limits_source": self.limits_source,
            "kv_bytes_at_limits": self.kv_bytes_at_limits,
            "kv_payload_bytes_at_limits": self.kv_payload_bytes_at_limits,
            "ledger": self.ledger,
            "fits": self.fits,
            "reasons": self.reasons,
            "ways_out": self.ways_out,
            "notes": self.notes,
            "bandwidth": self.bandwidth,
        }


def _runs(kinds: tuple[str, ...]) -> str:
    """Layer kinds compactly: 'full x36' or 'sliding x1, full x1'."""
    out: list[list[Any]] = []
    for k in kinds:
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    # a repeating pattern (gpt-oss: sliding, full, sliding, ...; Jamba: 3 Mamba, 1 attention)
    for period in range(1, len(out) // 2 + 1):
        unit = out[:period]
        if len(out) % period == 0 and period < len(out) and all(out[i] == unit[i % period] for i in range(len(out))):
            return f"({', '.join(f'{k} x{n}' for k, n in unit)}) x{len(out) // period}"
    return ", ".join(f"{k} x{n}" for k, n in out)
