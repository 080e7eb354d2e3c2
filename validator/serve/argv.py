"""How vLLM is launched for a plan: its flags and environment, what the plan and the
launcher own (refused in vllm.extra_args and vllm.env in every spelling), dev mode, the API key."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from loadgen import net
from validator.errors import InputError
from validator.inputs import check_cpu_host, cpu_flags
from validator.plan.kv_spec import MambaSpec
from validator.plan.mla_kernel import mla_kernel
from validator.plan.record import PlanRecord
from validator.plan.result import Plan
from validator.redact import redact_env, register, secret_name
from validator.serve.owned import validate_command, validate_env, validate_extra_args
from validator.units import GiB


def vllm_flags(plan: Plan) -> tuple[list[str], dict[str, str]]:
    """vLLM's flags and environment for the plan's limits: what kvgate owns."""
    inp = plan.inp
    args = [
        "--max-model-len",
        str(plan.max_model_len),
        "--max-num-seqs",
        str(plan.max_num_seqs),
        "--max-num-batched-tokens",
        str(plan.max_num_batched_tokens),
        "--block-size",
        str(plan.block_size),
        # each response's usage carries its prefix-cache hit (prompt_tokens_details.cached_tokens): the
        # judge compares it request by request (docs/datasets.md)
        "--enable-prompt-tokens-details",
        # and its engine-side timing (queued -> scheduled -> first token): client and server TTFT are
        # compared request by request (judge/servertiming.py)
        "--enable-per-request-metrics",
    ]
    env: dict[str, str] = {}
    if inp.dtype != "auto":
        args += ["--dtype", inp.dtype]
    if inp.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", inp.kv_cache_dtype]
    if not inp.enable_prefix_caching:
        args += ["--no-enable-prefix-caching"]
    if (
        inp.mamba_ssm_cache_dtype != "auto"
        and plan.layout.groups
        and any(isinstance(g.spec, MambaSpec) for g in plan.layout.groups)
    ):
        args += ["--mamba-ssm-cache-dtype", inp.mamba_ssm_cache_dtype]
    if plan.layout.block_size == 0:  # no attention layers: vLLM sizes the state's block itself
        i = args.index("--block-size")
        del args[i : i + 2]
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


def profile_words(profile) -> tuple[list[str], dict[str, str]]:
    """vllm.extra_args and vllm.env as the launch gives them to vLLM after the plan's flags, refused
    (exit 2) where they, or vllm.command, set what kvgate owns or does not model."""
    extra, env = list(profile.vllm.extra_args or []), dict(profile.vllm.env or {})
    validate_extra_args(extra)
    validate_command(profile.vllm.command or [])
    validate_env(env)
    return extra, env


def plan_record(plan: Plan, profile=None) -> PlanRecord:
    """The plan's record (plan/record.py) with the flags the launcher gives vLLM for it: the plan's,
    then the profile's (profile_words; values under secret names redacted), so the printed command
    line is the whole launch and the judge reads what vLLM was given (a speculative config or a
    retention interval set there changes what it caches)."""
    args, env = vllm_flags(plan)
    if profile is not None:
        extra, more = profile_words(profile)
        args, env = args + extra, {**env, **redact_env(more)}
    return PlanRecord.of(plan).with_flags(args, env)


def check_amx_mla(plan: Plan, extra: list[str], flags: set[str]) -> None:
    """An MLA plan for the CPU follows the kernel vllm-cpu will pick on the CPU that serves it (AMX tiles
    or not: hardware.cpu_amx, unset meaning this host); launched on a host that picks the other, vLLM
    would size and share its cache other than planned: refused before it starts."""
    if plan.inp.platform != "cpu" or plan.inp.shape.mla is None or not flags:  # nothing read: not Linux
        return
    here = mla_kernel(extra, "amx_tile" in flags)
    if here is not plan.inp.cpu_mla_kernel:
        raise InputError(
            f"hardware.cpu_amx: the plan is for vllm-cpu's {plan.inp.cpu_mla_kernel.value} kernel and this CPU "
            f"{'has' if 'amx_tile' in flags else 'has no'} AMX tiles, on which vLLM runs {here.value}; "
            "add [--attention-backend, CPU_MLA] to vllm.extra_args for the reference kernel on any CPU, leave "
            "hardware.cpu_amx unset to plan for this host, or use --plan-only to plan for another"
        )


def launch_spec(profile, plan: Plan) -> LaunchSpec:
    extra, env = profile_words(profile)
    dtype = plan.inp.kv_cache_dtype  # the quality A/B's candidate launch has its own
    cand = profile.quality.candidate_kv_cache_dtype  # (the reference's auto may be a ModelOpt checkpoint's fp8)
    field = "quality.candidate_kv_cache_dtype" if cand and dtype == cand else "cache.kv_cache_dtype"
    check_cpu_host(plan.inp.platform, dtype, field)  # vLLM starts on this CPU: what it cannot serve, refused first
    check_amx_mla(plan, extra, cpu_flags())
    api_key = api_key_of(profile)
    for k, v in env.items():
        if secret_name(k):
            register(v)
    dev = dev_mode_wanted(profile)
    host = bind_host(profile.vllm.host, dev)
    plan_args, plan_env = vllm_flags(plan)
    return LaunchSpec(
        model=profile.model.path,
        served_name=profile.model.served_name,
        vllm_args=plan_args,
        env={**plan_env, **({"VLLM_SERVER_DEV_MODE": "1"} if dev else {}), **env},
        extra_args=extra,
        python=profile.vllm.python,
        command=profile.vllm.command,
        host=host,
        port=profile.vllm.port,
        api_key=api_key,
        startup_timeout_s=profile.vllm.startup_timeout_s,
        nice=profile.vllm.nice,
        cpus=profile.vllm.cpus,
    )


def dev_mode_wanted(profile) -> bool:
    """Dev mode only when a feature needs it: freeze-frames (and with them the cache reset; without
    it the cold run is isolated by a fresh salt), and the quality A/B's cache reset between the
    reference and its repeat."""
    return bool(profile.observe.freezes) or bool(profile.quality.candidate_kv_cache_dtype)


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
            raise InputError(
                f"vllm.host: {host} is not a loopback address, and dev mode (freeze-frames, prefix-cache "
                "reset) opens routes vLLM's API key does not guard; use 127.0.0.1, or set observe.freezes: "
                "false"
            ) from None
        raise InputError(
            f"vllm.host: {host} is not a loopback address and kvgate sends load only to this machine; "
            "use 127.0.0.1, or 0.0.0.0 to listen on every interface (kvgate connects over "
            "127.0.0.1)"
        ) from None


def api_key_of(profile) -> str | None:
    key_env = profile.vllm.api_key_env
    if not key_env:
        return None
    key = os.environ.get(key_env)
    if not key:
        raise InputError(f"vllm.api_key_env: the environment variable {key_env} is empty or not set")
    register(key)  # never shown, whatever message or file it would end up in
    return key


API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def cpu_set(cpulist: str) -> set[int]:
    """ "0-3,6" -> {0, 1, 2, 3, 6} (the profile checked the form)."""
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
    cpus: str | None = None  # Linux CPU list vLLM runs on; kvgate keeps the rest

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
