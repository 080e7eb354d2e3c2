"""What kvgate owns in vLLM's command line and environment (the plan's limits, where the server
listens, dev mode, the key), refused in every spelling vLLM's parser accepts; and the environment
vLLM gets (an allow-list of the caller's, usage statistics off)."""

from __future__ import annotations

from validator.errors import InputError
from validator.flags import flag_key

# flags that decide capacity or where the server listens (the plan and the launcher own them), and
# the profile field to change instead
OWNED_FIELD = {
    "--max-model-len": "limits.max_model_len",
    "--max-num-seqs": "limits.max_num_seqs",
    "--max-num-batched-tokens": "limits.max_num_batched_tokens",
    "--block-size": "cache.block_size",
    "--kv-cache-dtype": "cache.kv_cache_dtype",
    "--gpu-memory-utilization": "hardware.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "cache.kv_cache_bytes",
    "--num-gpu-blocks-override": "cache.num_gpu_blocks_override",
    "--tensor-parallel-size": "hardware.tensor_parallel_size",
    "-tp": "hardware.tensor_parallel_size",
    "--pipeline-parallel-size": "hardware.pipeline_parallel_size",
    "-pp": "hardware.pipeline_parallel_size",
    "--dtype": "model.dtype",
    "--host": "vllm.host",
    "--port": "vllm.port",
    "--model": "model.path",
    "--api-key": "vllm.api_key_env",
    "--served-model-name": "model.served_name",
    "--async-scheduling": "vllm.async_scheduling",
    "--no-async-scheduling": "vllm.async_scheduling",
    "--device-memory-utilization": "hardware.gpu_memory_utilization",  # vLLM's alias of the above
}


# environment variables that set what the plan or the launcher owns, and the profile field to use
OWNED_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "cache.kv_cache_bytes",
    "VLLM_SERVER_DEV_MODE": "observe.freezes",
    "VLLM_API_KEY": "vllm.api_key_env",
    "VLLM_CPU_OMP_THREADS_BIND": "vllm.cpus",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "(none: kvgate's client relies on vLLM's 5 s keep-alive)",
}


def validate_env(env: dict[str, str]) -> None:
    """A variable in vllm.env may not set what a profile field owns (the plan would not see it)."""
    for k in env:
        if k in OWNED_ENV:
            raise InputError(
                f"vllm.env: {k} sets what kvgate owns and would not be checked against the plan "
                f"(or would be written into the run's profile); use {OWNED_ENV[k]} instead"
            )


# what of the caller's environment reaches vLLM (docs/launcher.md): what it needs to find its
# libraries, devices, caches and model files, and its own settings. Not LD_PRELOAD, PYTHONPATH,
# PYTHONSTARTUP, colour forcing or anything else: give those in vllm.env when they are meant.
ENV_ALLOWED = {
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "LD_LIBRARY_PATH",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
}
ENV_ALLOWED_PREFIXES = (
    "LC_",
    "VLLM_",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TORCH",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "XDG_",
    "HIP_",
    "ROCM_",
    "ROCR_",
    "GLOO_",
    "UCX_",
    "RAY_",
)
# set for every server kvgate starts: no usage statistics sent from an acceptance run, logs without
# colour codes (kvgate parses them)
ENV_FIXED = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "NO_COLOR": "1", "VLLM_LOGGING_COLOR": "0"}


def launch_environment(inherited: dict[str, str], spec_env: dict[str, str]) -> dict[str, str]:
    """The server's environment: the allowed part of the caller's, minus owned variables it may carry
    by accident (a VLLM_SERVER_DEV_MODE=1 left in a shell would open unguarded routes), then kvgate's
    fixed settings, then the launch's own (the plan's and vllm.env)."""
    env = {
        k: v
        for k, v in inherited.items()
        if k not in OWNED_ENV and (k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES))
    }
    env.update(ENV_FIXED)
    env.update(spec_env)
    return env


def _owned_by(key: str) -> list[str]:
    """The owned flags this option spelling would set: itself, or every owned flag it abbreviates."""
    if key in OWNED_FIELD:
        return [key]
    return [f for f in OWNED_FIELD if f.startswith(key) and f[:2] == key[:2] and len(key) > 1]


# sizes above 1 that kvgate does not model: data parallelism starts one engine per rank, each with its
# own KV cache, max_num_seqs and /metrics series (engine="0", "1", ...); context parallelism shards
# each request's KV cache over ranks (vLLM multiplies the block size by them)
_ENGINES = "engines, each with its own KV cache and max_num_seqs"
_SHARDED = "ranks' KV caches, each holding a slice of every request"
UNMODELLED_SIZES = {
    "--data-parallel-size": _ENGINES,
    "-dp": _ENGINES,
    "--data-parallel-size-local": _ENGINES,
    "-dpl": _ENGINES,
    "--decode-context-parallel-size": _SHARDED,
    "-dcp": _SHARDED,
    "--prefill-context-parallel-size": _SHARDED,
    "-pcp": _SHARDED,
}


def _refuse_unmodelled_sizes(args: list[str], field: str) -> None:
    for i, a in enumerate(args):
        what = UNMODELLED_SIZES.get(flag_key(a) or "")
        if what is None:
            continue
        value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
        if value.strip().isdigit() and int(value) > 1:
            raise InputError(
                f"{field}: {a.split('=', 1)[0]} {int(value)} spreads the model over {int(value)} {what}; "
                "kvgate plans and judges one engine holding whole requests: drop it"
            )


def validate_extra_args(args: list[str], field: str = "vllm.extra_args") -> None:
    """Extra flags may not silently change what the plan decided, nor where the server listens, nor
    smuggle in a shell. Caught as vLLM's parser reads them: `_` for `-`, `=` forms, JSON keys, and
    every abbreviation argparse would accept (`--hos` is `--host`); `--config` would load flags from
    a file kvgate cannot see, and a bare `--` would pass what follows as positional arguments."""
    _refuse_unmodelled_sizes(args, field)
    for a in args:
        if "\n" in a or "\x00" in a:
            raise InputError(f"{field}: {a[:40]!r} contains a newline or NUL byte")
        key = flag_key(a)
        if key is None:
            continue
        if key == "--":
            raise InputError(f"{field}: a bare -- would pass what follows to vLLM as positional arguments; remove it")
        owned = _owned_by(key)
        if owned:
            what = key if owned == [key] else f"{key} (an abbreviation of {', '.join(owned)})"
            raise InputError(
                f"{field}: {what} is set by the plan or the launcher; change the profile field "
                f"instead ({', '.join(dict.fromkeys(OWNED_FIELD[o] for o in owned))})"
            )
        if "--config".startswith(key) and len(key) > 2:
            raise InputError(
                f"{field}: {key} loads flags from a file kvgate cannot check against the plan; list "
                "the flags in vllm.extra_args instead"
            )


def validate_command(command: list[str]) -> None:
    """vllm.command (e.g. [vllm, serve]): the program, then words checked like vllm.extra_args."""
    validate_extra_args(command[1:], "vllm.command")
