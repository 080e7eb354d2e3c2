"""How vLLM is launched for a plan: its flags and environment, what the plan and the
launcher own (refused in vllm.extra_args and vllm.env in every spelling), dev mode, the API key."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from loadgen import net
from validator.errors import InputError
from validator.redact import register, secret_name
from validator.plan.limits import Plan
from validator.plan.record import PlanRecord
from validator.units import GiB


def vllm_flags(plan: Plan) -> tuple[list[str], dict[str, str]]:
    """vLLM's flags and environment for the plan's limits: what kvgate owns."""
    inp = plan.inp
    args = ["--max-model-len", str(plan.max_model_len), "--max-num-seqs", str(plan.max_num_seqs),
            "--max-num-batched-tokens", str(plan.max_num_batched_tokens), "--block-size", str(plan.block_size)]
    env: dict[str, str] = {}
    if inp.dtype != "auto":
        args += ["--dtype", inp.dtype]
    if inp.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", inp.kv_cache_dtype]
    if inp.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(inp.tensor_parallel_size)]
    if inp.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(inp.pipeline_parallel_size)]
    if inp.num_gpu_blocks_override is not None:
        args += ["--num-gpu-blocks-override", str(inp.num_gpu_blocks_override)]
    if inp.platform == "cpu":
        if inp.kv_cache_bytes is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(inp.kv_cache_bytes // GiB)
        return args, env
    if inp.kv_cache_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(inp.kv_cache_bytes)]
    elif plan.ledger.get("kv_pinned"):  # the planned budget, pinned: vLLM's blocks are the plan's
        args += ["--kv-cache-memory-bytes", str(plan.ledger["kv_cache_bytes"])]
    else:
        args += ["--gpu-memory-utilization", f"{inp.gpu_memory_utilization:g}"]
    if inp.async_scheduling is False:
        args += ["--no-async-scheduling"]
    return args, env


def plan_record(plan: Plan) -> PlanRecord:
    """The plan's record (plan/record.py) with the flags the launcher gives vLLM for it."""
    return PlanRecord.of(plan).with_flags(*vllm_flags(plan))


def launch_spec(profile, plan: Plan) -> LaunchSpec:
    extra = profile.vllm.extra_args or []
    validate_extra_args(extra)
    api_key = api_key_of(profile)
    env = profile.vllm.env or {}
    validate_env(env)
    for k, v in env.items():
        if secret_name(k):
            register(v)
    validate_command(profile.vllm.command or [])
    dev = dev_mode_wanted(profile)
    host = bind_host(profile.vllm.host, dev)
    plan_args, plan_env = vllm_flags(plan)
    return LaunchSpec(
        model=profile.model.path, served_name=profile.model.served_name, vllm_args=plan_args,
        env={**plan_env, **({"VLLM_SERVER_DEV_MODE": "1"} if dev else {}), **env},
        extra_args=extra, python=profile.vllm.python, command=profile.vllm.command, host=host,
        port=profile.vllm.port, api_key=api_key, startup_timeout_s=profile.vllm.startup_timeout_s,
        nice=profile.vllm.nice, cpus=profile.vllm.cpus)


def dev_mode_wanted(profile) -> bool:
    """Dev mode only when a feature needs it: freeze-frames (and with them the cache reset; without
    it the cold run is isolated by a fresh salt)."""
    return bool(profile.observe.freezes)


ALL_INTERFACES = ("0.0.0.0", "::")


def bind_host(host: str, dev: bool) -> str:
    """The address vLLM binds: a loopback address, resolved once here (vLLM gets the literal, so it
    binds what was checked), or every interface (kvgate then connects over loopback). Dev mode opens
    routes vLLM's API key does not guard: loopback only."""
    if host in ALL_INTERFACES and not dev:
        return host
    try:
        return net.pinned_host(host, "vllm.host")
    except net.NotLoopback:
        if dev:
            raise InputError(f"vllm.host: {host} is not a loopback address, and dev mode (freeze-frames, prefix-cache "
                             "reset) opens routes vLLM's API key does not guard; use 127.0.0.1, or set observe.freezes: "
                             "false") from None
        raise InputError(f"vllm.host: {host} is not a loopback address and kvgate sends load only to this machine; "
                         "use 127.0.0.1, or 0.0.0.0 to listen on every interface (kvgate connects over "
                         "127.0.0.1)") from None


def api_key_of(profile) -> str | None:
    key_env = profile.vllm.api_key_env
    if not key_env:
        return None
    key = os.environ.get(key_env)
    if not key:
        raise InputError(f"vllm.api_key_env: the environment variable {key_env} is empty or not set")
    register(key)   # never shown, whatever message or file it would end up in
    return key


API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def cpu_set(cpulist: str) -> set[int]:
    """"0-3,6" -> {0, 1, 2, 3, 6} (the profile checked the form)."""
    out: set[int] = set()
    for part in cpulist.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


@dataclass
class LaunchSpec:
    model: str
    served_name: str | None
    vllm_args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    python: str | None = None
    command: list[str] | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    api_key: str | None = None
    startup_timeout_s: float = 600.0
    nice: int = 0
    cpus: str | None = None     # Linux CPU list vLLM runs on; kvgate keeps the rest

    def argv(self, port: int) -> list[str]:
        if self.command:
            base = [*self.command, self.model]  # e.g. vllm serve MODEL
        else:
            # works with the official build and with vllm-cpu, whose console script fails
            base = [self.python or sys.executable, "-m", API_SERVER_MODULE, "--model", self.model]
        argv = [*base, "--host", self.host, "--port", str(port), *self.vllm_args]
        if self.served_name:
            argv += ["--served-model-name", self.served_name]
        if self.nice and shutil.which("nice"):
            argv = ["nice", "-n", str(self.nice), *argv]  # nice execs the server: same pid, same group
        return argv + list(self.extra_args)


# flags that decide capacity or where the server listens (the plan and the launcher own them), and
# the profile field to change instead
OWNED_FIELD = {
    "--max-model-len": "limits.max_model_len", "--max-num-seqs": "limits.max_num_seqs",
    "--max-num-batched-tokens": "limits.max_num_batched_tokens", "--block-size": "cache.block_size",
    "--kv-cache-dtype": "cache.kv_cache_dtype", "--gpu-memory-utilization": "hardware.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "cache.kv_cache_bytes", "--num-gpu-blocks-override": "cache.num_gpu_blocks_override",
    "--tensor-parallel-size": "hardware.tensor_parallel_size", "-tp": "hardware.tensor_parallel_size",
    "--pipeline-parallel-size": "hardware.pipeline_parallel_size", "-pp": "hardware.pipeline_parallel_size",
    "--dtype": "model.dtype", "--host": "vllm.host", "--port": "vllm.port", "--model": "model.path",
    "--api-key": "vllm.api_key_env", "--served-model-name": "model.served_name",
    "--async-scheduling": "vllm.async_scheduling", "--no-async-scheduling": "vllm.async_scheduling",
    "--device-memory-utilization": "hardware.gpu_memory_utilization",   # vLLM's alias of the above
}


# environment variables that set what the plan or the launcher owns, and the profile field to use
OWNED_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "cache.kv_cache_bytes", "VLLM_SERVER_DEV_MODE": "observe.freezes",
    "VLLM_API_KEY": "vllm.api_key_env", "VLLM_CPU_OMP_THREADS_BIND": "vllm.cpus",
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "(none: kvgate's client relies on vLLM's 5 s keep-alive)",
}


def validate_env(env: dict[str, str]) -> None:
    """A variable in vllm.env may not set what a profile field owns (the plan would not see it)."""
    for k in env:
        if k in OWNED_ENV:
            raise InputError(f"vllm.env: {k} sets what kvgate owns and would not be checked against the plan "
                             f"(or would be written into the run's profile); use {OWNED_ENV[k]} instead")


# what of the caller's environment reaches vLLM (docs/launcher.md): what it needs to find its
# libraries, devices, caches and model files, and its own settings. Not LD_PRELOAD, PYTHONPATH,
# PYTHONSTARTUP, colour forcing or anything else: give those in vllm.env when they are meant.
ENV_ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
               "LD_LIBRARY_PATH", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
               "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR", "VIRTUAL_ENV", "CONDA_PREFIX"}
ENV_ALLOWED_PREFIXES = ("LC_", "VLLM_", "CUDA_", "NVIDIA_", "NCCL_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_",
                        "TORCH", "PYTORCH_", "TRITON_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "XDG_", "HIP_", "ROCM_",
                        "ROCR_", "GLOO_", "UCX_", "RAY_")
# set for every server kvgate starts: no usage statistics sent from an acceptance run, logs without
# colour codes (kvgate parses them)
ENV_FIXED = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "NO_COLOR": "1", "VLLM_LOGGING_COLOR": "0"}


def launch_environment(inherited: dict[str, str], spec_env: dict[str, str]) -> dict[str, str]:
    """The server's environment: the allowed part of the caller's, minus owned variables it may carry
    by accident (a VLLM_SERVER_DEV_MODE=1 left in a shell would open unguarded routes), then kvgate's
    fixed settings, then the launch's own (the plan's and vllm.env)."""
    env = {k: v for k, v in inherited.items()
           if k not in OWNED_ENV and (k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES))}
    env.update(ENV_FIXED)
    env.update(spec_env)
    return env


def _flag_key(word: str) -> str | None:
    """A word as vLLM's parser reads it as an option (None: a value). vLLM (FlexibleArgumentParser)
    reads `_` as `-` and `--flag=value` as `--flag value`, and takes `--flag.key value` as a key of
    a JSON flag; argparse then accepts any unambiguous prefix of a flag."""
    if not word.startswith("-") or word == "-" or word[1:2].isdigit() or word.startswith("-."):
        return None
    if word.startswith("--"):
        key = word[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
        return "--" + key
    return word.split("=", 1)[0]


def _owned_by(key: str) -> list[str]:
    """The owned flags this option spelling would set: itself, or every owned flag it abbreviates."""
    if key in OWNED_FIELD:
        return [key]
    return [f for f in OWNED_FIELD if f.startswith(key) and f[:2] == key[:2] and len(key) > 1]


def validate_extra_args(args: list[str], field: str = "vllm.extra_args") -> None:
    """Extra flags may not silently change what the plan decided, nor where the server listens, nor
    smuggle in a shell. Caught as vLLM's parser reads them: `_` for `-`, `=` forms, JSON keys, and
    every abbreviation argparse would accept (`--hos` is `--host`); `--config` would load flags from
    a file kvgate cannot see, and a bare `--` would pass what follows as positional arguments."""
    for a in args:
        if "\n" in a or "\x00" in a:
            raise InputError(f"{field}: {a[:40]!r} contains a newline or NUL byte")
        key = _flag_key(a)
        if key is None:
            continue
        if key == "--":
            raise InputError(f"{field}: a bare -- would pass what follows to vLLM as positional arguments; remove it")
        owned = _owned_by(key)
        if owned:
            what = key if owned == [key] else f"{key} (an abbreviation of {', '.join(owned)})"
            raise InputError(f"{field}: {what} is set by the plan or the launcher; change the profile field "
                             f"instead ({', '.join(dict.fromkeys(OWNED_FIELD[o] for o in owned))})")
        if "--config".startswith(key) and len(key) > 2:
            raise InputError(f"{field}: {key} loads flags from a file kvgate cannot check against the plan; list "
                             "the flags in vllm.extra_args instead")


def validate_command(command: list[str]) -> None:
    """vllm.command (e.g. [vllm, serve]): the program, then words checked like vllm.extra_args."""
    validate_extra_args(command[1:], "vllm.command")
