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
  (Qwen3-235B-A22B FP8 on eight L40S, vLLM 0.10.2: tests/data/vllm-gpu-starts). With a
  --moe-backend other than auto (and triton, whose kernels take a refined block), 0.32 pads each
  rank's share of an expert up to whole blocks instead (pad_tp_shard_to_weight_blocks): the split is
  not refused, each rank holds more (`expert_split`), and vLLM refuses it only where the experts'
  width or the hidden size is not whole blocks. A compressed-tensors checkpoint's experts are
  neither refined nor padded: whole blocks a rank, in every version (its MoE method validates them);
- expert parallelism needs experts (ModelConfig._verify_with_expert_parallelism).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from validator.errors import InputError
from validator.flags import flag_key, value
from validator.plan.classic import FAILS_AT_TP
from validator.plan.model_shape import ModelShape
from validator.plan.quant import Fp8

FIELD = "hardware.tensor_parallel_size"
EP_FLAGS = frozenset({"--enable-expert-parallel", "-ep"})  # vLLM's flag and its short form


def expert_parallel(argv: list[str]) -> bool:
    """Whether vLLM's argv turns expert parallelism on, in any spelling its parser reads (flags.flag_key)."""
    return any(flag_key(w) in EP_FLAGS for w in argv)


BLOCKS_WHOLE_BEFORE = (0, 25)  # column and expert splits refused (vllm-project/vllm#48173, July 2026)
BLOCKS_REFINED_FROM = (0, 32)  # experts' blocks refined to a divisor >= 32; merged column splits allowed


MOE_BACKEND = "--moe-backend"
REFINING_BACKENDS = frozenset({"auto", "triton"})  # the FP8 MoE kernels that take a refined block shape
# the --moe-backend values vLLM 0.32 runs block-FP8 experts with (fused_moe/oracle/fp8.py map_fp8_backend)
FP8_MOE_BACKENDS: tuple[str, ...] = ("triton", "deep_gemm", "cutlass", "flashinfer_trtllm", "flashinfer_cutlass")
FP8_MOE_BACKENDS += ("marlin", "humming", "aiter", "hpc")


@dataclass(frozen=True)
class ExpertSplit:
    """How each rank holds the routed experts: a TP slice of each (the default), whole experts
    (`ep`), or a slice padded to whole FP8 blocks (`width` > 0: each expert's width on a rank)."""

    ep: bool = False
    width: int = 0
    block: int = 0
    backend: str = "auto"

    def source(self, expert_width: int, tp: int) -> str:
        """The weights source's words for a padded split ("" otherwise)."""
        if not self.width:
            return ""
        return (
            f"each expert's {expert_width // tp} of {expert_width} padded to {self.width} on every rank (whole "
            f"{self.block}-wide FP8 blocks for --moe-backend {self.backend}), "
        )


def _padded_width(shape: ModelShape, tp: int, backend: str, version: tuple[int, int, int]) -> int | None:
    """vLLM 0.32's resolve_fp8_moe_weight_block_shape for a non-auto --moe-backend (fused_moe/oracle/
    fp8.py): where a rank's share of an expert is not whole blocks and the backend cannot take the
    refined block (only Triton's kernels can, at a common divisor of at least 32), the share is
    padded up to whole blocks. 0: not padded; None: padded, but vLLM refuses the model's sizes."""
    fmt, w, h = shape.quant, shape.mlp_width, shape.hidden_size or 0
    if backend in ("auto", "") or version[:2] < BLOCKS_REFINED_FROM or tp == 1 or not shape.num_experts:
        return 0
    if not isinstance(fmt, Fp8) or fmt.block is None or fmt.experts_whole_blocks or not w:
        return 0
    bn, bk = fmt.block
    share = w // tp
    if share % bn == 0 and share % bk == 0:
        return 0
    if backend in REFINING_BACKENDS and math.gcd(bn, bk, share, h) >= 32:
        return 0  # refined, not padded
    if bn != bk:
        return 0  # vLLM does not pad non-square blocks: the refinement rule (check) decides
    if w % bn or h % bn:
        return None
    return math.ceil(share / bn) * bn


def expert_split(shape: ModelShape, tp: int, argv: list[str], version: tuple[int, int, int]) -> ExpertSplit:
    """How rank 0 holds the experts at this TP size under these launch flags (never raises: `check`
    refuses what vLLM refuses)."""
    if expert_parallel(argv):
        return ExpertSplit(ep=True)
    backend = (value(argv, MOE_BACKEND) or "auto").strip()
    width = _padded_width(shape, tp, backend, version)
    block = shape.quant.block[0] if isinstance(shape.quant, Fp8) and shape.quant.block else 0
    return ExpertSplit(width=width or 0, block=block if width else 0, backend=backend)


def _sizes_that_divide(n: int) -> str:
    ok = [t for t in (1, 2, 4, 8, 16) if n % t == 0]
    return ", ".join(map(str, ok))


def _fp8_splits(
    shape: ModelShape, tp: int, expert_parallel: bool, version: tuple[int, int, int], padded: bool = False
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
    w = (shape.mlp_width or 0) // tp if shape.num_experts else 0
    if w and not expert_parallel and not padded:
        if version[:2] < BLOCKS_WHOLE_BEFORE or fmt.experts_whole_blocks:
            splits += [("each expert's gate/up outputs", w, bn, True), ("each expert's down inputs", w, bk, True)]
        elif version[:2] >= BLOCKS_REFINED_FROM and math.gcd(bn, bk, w, shape.hidden_size or 0) < 32:
            splits.append(("each expert's width, whose blocks vLLM refines only to 32 or more", w, bn, True))
    return splits


def check(
    shape: ModelShape,
    tp: int,
    expert_parallel: bool = False,
    version: tuple[int, int, int] = (0, 32, 0),
    backend: str = "auto",
) -> None:
    """Raise InputError (exit 2) where vLLM would refuse this split, with the fix."""
    heads, kv = shape.num_attention_heads, shape.num_kv_heads
    if tp > 1 and shape.model_type in FAILS_AT_TP and version >= (0, 32, 0):
        raise InputError(
            f"{FIELD}: vLLM {'.'.join(map(str, version))} serves {shape.model_type} through its Transformers backend, "
            f"which splits only part of each layer over {tp} ranks: the server starts, then its first forward pass "
            "fails (measured on 0.32); use 1"
        )
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
    fmt = shape.quant
    block_experts = isinstance(fmt, Fp8) and fmt.block is not None and not fmt.experts_whole_blocks
    if block_experts and shape.num_experts and backend not in ("auto", *FP8_MOE_BACKENDS):
        if version[:2] >= BLOCKS_REFINED_FROM:  # earlier versions' lists are not read here
            raise InputError(
                f"vllm.extra_args: --moe-backend {backend} does not run block-FP8 experts in vLLM "
                f"{'.'.join(map(str, version))}; use auto or one of {', '.join(FP8_MOE_BACKENDS)}"
            )
    width = 0 if expert_parallel else _padded_width(shape, tp, backend, version)
    if width is None:
        raise InputError(
            f"{FIELD}: at {tp} vLLM pads each rank's share of an expert to whole FP8 blocks for --moe-backend "
            f"{backend}, which needs the experts' width ({shape.mlp_width}) and the hidden size "
            f"({shape.hidden_size}) to be whole blocks; they are not: add --enable-expert-parallel to "
            "vllm.extra_args (each rank holds whole experts)"
        )
    for what, size, block, expert in _fp8_splits(shape, tp, expert_parallel, version, padded=width > 0):
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
