"""Whether vLLM can split the model over the tensor-parallel ranks at all (pure): the checks vLLM
makes before any memory is profiled, so a plan it would refuse is refused here, naming the fix.

- ModelConfig.verify_with_parallel_config: the attention heads divide by the TP size;
- QKVParallelLinear: the KV heads divide by it, or it by them (each rank then holds a replica);
- fp8_utils.validate_fp8_block_shape(_moe), with FP8 weight blocks (weight_block_size, 128x128):
  a row-parallel split (o_proj's and down_proj's inputs) is whole blocks, in every version; before
  0.25 a column-parallel split (q/k/v, gate/up outputs) and an MoE's expert width split by TP were
  too (vLLM refused MiniMax-M2.7 at TP 8, 1536 / 8 = 192, on the main of July 2026,
  vllm-project/vllm#48173); 0.32 lets merged column splits cut blocks (linear.py) and refines an
  expert's blocks to the largest common divisor of at least 32 (fused_moe/oracle/fp8.py); versions
  between are not refused here (not known). --enable-expert-parallel keeps experts whole instead
  (Qwen3-235B-A22B FP8 on eight L40S, vLLM 0.10.2: tests/data/vllm-gpu-starts);
- expert parallelism needs experts (ModelConfig._verify_with_expert_parallelism).
"""

from __future__ import annotations

import math

from validator.errors import InputError
from validator.flags import flag_key
from validator.plan.model_shape import ModelShape
from validator.plan.quant import Fp8

FIELD = "hardware.tensor_parallel_size"
EP_FLAGS = frozenset({"--enable-expert-parallel", "-ep"})  # vLLM's flag and its short form


def expert_parallel(argv: list[str]) -> bool:
    """Whether vLLM's argv turns expert parallelism on, in any spelling its parser reads (flags.flag_key)."""
    return any(flag_key(w) in EP_FLAGS for w in argv)


def _sizes_that_divide(n: int) -> str:
    ok = [t for t in (1, 2, 4, 8, 16) if n % t == 0]
    return ", ".join(map(str, ok))


BLOCKS_WHOLE_BEFORE = (0, 25)  # column and expert splits refused (vllm-project/vllm#48173, July 2026)
BLOCKS_REFINED_FROM = (0, 32)  # experts' blocks refined to a divisor >= 32; merged column splits allowed


def _fp8_splits(
    shape: ModelShape, tp: int, expert_parallel: bool, version: tuple[int, int, int]
) -> list[tuple[str, int, int, bool]]:
    """(what, the size a rank holds, the block it must be a multiple of, an expert's) for each split
    the version requires whole blocks of."""
    fmt = shape.quant
    if tp == 1 or not isinstance(fmt, Fp8) or fmt.block is None or shape.mla is not None:
        return []
    bn, bk = fmt.block
    q, hd = shape.num_attention_heads * shape.head_dim, shape.head_dim
    dense = shape.dense_intermediate_size or (None if shape.num_experts else shape.intermediate_size)
    splits = [("the o_proj inputs", q // tp, bk, False)]
    splits += [("the down_proj inputs", dense // tp, bk, False)] if dense else []
    if version[:2] < BLOCKS_WHOLE_BEFORE:
        splits.append(("the q_proj outputs", q // tp, bn, False))
        if shape.num_kv_heads >= tp:
            splits.append(("the k/v_proj outputs", shape.num_kv_heads // tp * hd, bn, False))
        splits += [("the gate/up_proj outputs", dense // tp, bn, False)] if dense else []
    w = shape.moe_intermediate_size // tp if shape.num_experts and shape.moe_intermediate_size else 0
    if w and not expert_parallel:
        if version[:2] < BLOCKS_WHOLE_BEFORE:
            splits += [("each expert's gate/up outputs", w, bn, True), ("each expert's down inputs", w, bk, True)]
        elif version[:2] >= BLOCKS_REFINED_FROM and math.gcd(bn, bk, w, shape.hidden_size or 0) < 32:
            splits.append(("each expert's width, whose blocks vLLM refines only to 32 or more", w, bn, True))
    return splits


def check(
    shape: ModelShape, tp: int, expert_parallel: bool = False, version: tuple[int, int, int] = (0, 32, 0)
) -> None:
    """Raise InputError (exit 2) where vLLM would refuse this split, with the fix."""
    heads, kv = shape.num_attention_heads, shape.num_kv_heads
    if expert_parallel and not shape.num_experts:
        raise InputError("vllm.extra_args: --enable-expert-parallel needs a mixture-of-experts model; drop it")
    if heads % tp:
        raise InputError(
            f"{FIELD}: vLLM needs the {heads} attention heads to divide by it, not {tp}; "
            f"use {_sizes_that_divide(heads)}"
        )
    if shape.mla is None and kv and (kv % tp if kv >= tp else tp % kv):  # kv 0: no attention layers
        raise InputError(
            f"{FIELD}: vLLM splits the {kv} KV heads evenly (or replicates each to whole ranks), not over {tp}; "
            f"use {_sizes_that_divide(kv) if kv >= tp else 'a multiple of ' + str(kv)}"
        )
    for what, size, block, expert in _fp8_splits(shape, tp, expert_parallel, version):
        if size % block:
            fix = (
                "add --enable-expert-parallel to vllm.extra_args (each rank holds whole experts) or use a smaller size"
                if expert
                else "use a smaller size"
            )
            raise InputError(
                f"{FIELD}: at {tp} a rank holds {size} of {what}, not a multiple of the checkpoint's "
                f"{block}-wide FP8 weight blocks, which vLLM refuses; {fix}"
            )
