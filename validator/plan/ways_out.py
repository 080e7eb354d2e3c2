"""When limits do not fit: what would fit instead, each with the number it gives (a shorter
context, fewer sequences, an 8-bit KV cache, more GPUs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from validator.errors import InputError
from validator.plan.capacity import kv_dtype_bytes
from validator.plan.ledger import PlanInput
from validator.plan.result import Plan


def ways_out(inp: PlanInput, plan: Plan, replan: Callable[..., Plan]) -> list[dict[str, Any]]:
    """What would fit instead, each with the number it gives."""
    out = []
    mml, mns, usable = plan.max_model_len, plan.max_num_seqs, plan.usable_blocks
    layout, mnbt = plan.layout, plan.max_num_batched_tokens
    shorter = layout.largest_model_len(usable, mml, mnbt, num_seqs=mns)
    if shorter > 0:
        out.append(
            {
                "way": "shorter context",
                "max_model_len": shorter,
                "max_num_seqs": mns,
                "text": f"--max-model-len {shorter} keeps {mns} sequences",
            }
        )
    bpr = layout.blocks_per_request(mml, mnbt)
    fewer = usable // bpr if bpr else 0
    if fewer >= 1:
        out.append(
            {
                "way": "fewer sequences",
                "max_model_len": mml,
                "max_num_seqs": fewer,
                "text": f"--max-num-seqs {fewer} keeps {mml} tokens per sequence",
            }
        )
    if kv_dtype_bytes(inp.kv_cache_dtype, plan.inp.shape.dtype) > 1 and inp.shape.mla is None:
        alt = replan(replace(inp, kv_cache_dtype="fp8", max_model_len=mml, max_num_seqs=None), explore=False)
        out.append(
            {
                "way": "fp8 KV cache",
                "max_model_len": mml,
                "max_num_seqs": alt.max_num_seqs if alt.fits else 0,
                "fits": alt.max_num_seqs >= mns and alt.fits,
                "text": f"--kv-cache-dtype fp8 fits {alt.max_num_seqs if alt.fits else 0} sequences of {mml} "
                "tokens (check quality)",
            }
        )
    if inp.kv_cache_bytes is None and inp.num_gpu_blocks_override is None:
        for tp in (2, 4, 8):
            if tp <= inp.tensor_parallel_size:  # a size vLLM would refuse raises InputError (plan/parallel_fit.py)
                continue
            try:
                alt = replan(replace(inp, tensor_parallel_size=tp, max_model_len=mml, max_num_seqs=mns), explore=False)
            except InputError:
                continue
            if alt.fits:
                out.append(
                    {
                        "way": "more GPUs",
                        "tensor_parallel_size": tp,
                        "max_model_len": mml,
                        "max_num_seqs": mns,
                        "text": f"--tensor-parallel-size {tp} fits {mns} x {mml} tokens",
                    }
                )
                break
    return out
