"""How vLLM is launched for a plan: its flags and environment, what the plan and the
launcher own (refused in vllm.extra_args and vllm.env in every spelling), dev mode, the API key."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from validator.errors import InputError
from validator.plan.limits import Plan
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


def plan_record(plan: Plan) -> dict:
    """The plan as saved (plan.json) and printed: the planner's figures, then the flags."""
    args, env = vllm_flags(plan)
    return {**plan.to_json(), "vllm_args": args, "vllm_env": env}


def launch_spec(profile, plan: Plan) -> LaunchSpec:
    g = profile.get
    extra = g("vllm", "extra_args") or []
    validate_extra_args(extra)
    api_key = api_key_of(profile)
    env = g("vllm", "env") or {}
    validate_env(env)
    dev = dev_mode_wanted(profile)
    if dev and not _is_loopback_host(g("vllm", "host")):
        raise InputError(f"vllm.host: {g('vllm', 'host')} is not a loopback address, and dev mode (freeze-frames, "
                         "prefix-cache reset) opens routes vLLM's API key does not guard; use 127.0.0.1, or set "
                         "observe.freezes: false")
    plan_args, plan_env = vllm_flags(plan)
    return LaunchSpec(
        model=g("model", "path"), served_name=g("model", "served_name"), vllm_args=plan_args,
        env={**plan_env, **({"VLLM_SERVER_DEV_MODE": "1"} if dev else {}), **env},
        extra_args=extra, python=g("vllm", "python"), command=g("vllm", "command"), host=g("vllm", "host"),
        port=g("vllm", "port"), api_key=api_key, startup_timeout_s=g("vllm", "startup_timeout_s"),
        nice=g("vllm", "nice"), cpus=g("vllm", "cpus"))


def dev_mode_wanted(profile) -> bool:
    """Dev mode only when a feature needs it: freeze-frames (and with them the cache reset; without
    it the cold run is isolated by a fresh salt)."""
    return bool(profile.get("observe", "freezes"))


def _is_loopback_host(host: str) -> bool:
    """The same rule as the load generator's: every address the host resolves to is loopback."""
    from loadgen.cli import UsageError, require_loopback
    try:
        require_loopback(f"http://{'[' + host + ']' if ':' in host and not host.startswith('[') else host}:80")
        return True
    except UsageError:
        return False


def api_key_of(profile) -> str | None:
    key_env = profile.get("vllm", "api_key_env")
    if not key_env:
        return None
    key = os.environ.get(key_env)
    if not key:
        raise InputError(f"vllm.api_key_env: the environment variable {key_env} is empty or not set")
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


def launch_environment(inherited: dict[str, str], spec_env: dict[str, str]) -> dict[str, str]:
    """The server's environment: the caller's, minus owned variables it may carry by accident (a
    VLLM_SERVER_DEV_MODE=1 left in a shell would open unguarded routes), plus the launch's own."""
    env = {k: v for k, v in inherited.items() if k not in OWNED_ENV}
    env.update(spec_env)
    return env


def validate_extra_args(args: list[str]) -> None:
    """Extra flags may not silently change what the plan decided, nor smuggle in a shell. vLLM reads
    `_` and `-` alike and `--flag=value` as `--flag value`, so every spelling is caught; `--config`
    would load flags from a file kvgate cannot see."""
    for a in args:
        flag = a.split("=", 1)[0]
        norm = flag if not flag.startswith("--") else "--" + flag[2:].replace("_", "-")
        if norm in OWNED_FIELD:
            raise InputError(f"vllm.extra_args: {flag} is set by the plan or the launcher; "
                             f"change the profile field instead ({OWNED_FIELD[norm]})")
        if norm == "--config":
            raise InputError("vllm.extra_args: --config loads flags from a file kvgate cannot check against the "
                             "plan; list the flags in vllm.extra_args instead")
        if "\n" in a or "\x00" in a:
            raise InputError(f"vllm.extra_args: {a!r} contains a newline or NUL byte")
