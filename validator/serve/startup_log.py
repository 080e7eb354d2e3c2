"""What vLLM says while it starts: progress phases, KV-cache size and concurrency lines,
GPU memory lines, the fatal error; and the vllm:cache_config_info metric."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from validator.rundir.startup import StartupFacts

_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU)?\s*KV cache size: ([\d,]+) tokens")


_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


_EST_LEN = re.compile(r"estimated maximum model length is (\d+)")


# vLLM's GPU start-up memory lines (0.15-0.32 wordings)
_GIB = r"([\d.]+)\s*GiB"


_LOADING = re.compile(r"Model loading took " + _GIB)


_AVAILABLE = re.compile(r"Available KV cache memory: " + _GIB)


_CG_EST = re.compile(r"Estimated CUDA graph memory: " + _GIB)


_CG_ACTUAL = re.compile(r"CUDA graph pool memory: " + _GIB + r" \(actual\)")


_TORCH_PEAK = re.compile(r"torch peak memory increase: " + _GIB)


_RESERVED = re.compile(r"reserved ([\d.]+) GiB memory for KV Cache")


_ERROR = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:ERROR [^\]]*\] )?(\w*(?:Error|Exception)): (.+)$")


# log fragments that mark start-up progress, in order
PHASES = (
    ("starting", re.compile(r"vLLM API server version|non-default args|Starting vLLM")),
    ("loading", re.compile(r"Loading weights|Starting to load model|Loading model")),
    ("loaded", re.compile(r"Model loading took|Loading weights took")),
    ("kv cache sized", _KV_TOKENS),
    ("ready", re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM server on")),
)


def _int(s: str | None) -> int | None:
    try:
        return int(s.replace(",", "")) if s not in (None, "", "None") else None
    except ValueError:
        return None


def _float(s: str | None) -> float | None:
    try:
        return float(s) if s not in (None, "", "None") else None
    except ValueError:
        return None


def phase_of(line: str) -> int | None:
    """Index into PHASES of the latest phase this log line marks."""
    for i in range(len(PHASES) - 1, -1, -1):
        if PHASES[i][1].search(line):
            return i
    return None


# errors that only wrap the root cause reported earlier in the log
_WRAPPERS = (
    "Engine core initialization failed",
    "EngineDeadError",
    "See root cause above",
    "EngineCore encountered an issue",
)


def parse_log(text: str, facts: StartupFacts | None = None) -> StartupFacts:
    f = facts or StartupFacts()
    errors: list[str] = []
    for line in text.splitlines():
        if m := _KV_TOKENS.search(line):
            f.kv_cache_tokens = _int(m.group(1))
        if m := _CONCURRENCY.search(line):
            f.max_concurrency_at, f.max_concurrency_logged = _int(m.group(1)), float(m.group(2))
        if m := _EST_LEN.search(line):
            f.refused_estimated_max_model_len = int(m.group(1))
        for rx, attr in (
            (_LOADING, "weights_gib"),
            (_AVAILABLE, "available_kv_gib"),
            (_TORCH_PEAK, "activation_peak_gib"),
            (_CG_EST, "cudagraph_estimated_gib"),
            (_CG_ACTUAL, "cudagraph_actual_gib"),
            (_RESERVED, "kv_reserved_gib"),
        ):
            if getattr(f, attr) is None and (m := rx.search(line)):
                setattr(f, attr, _float(m.group(1)))
        if m := _ERROR.match(line.strip()):
            kind, msg = m.groups()
            if kind and "Warning" not in kind:
                errors.append(f"{kind}: {msg}"[:2000])
    if errors:
        roots = [e for e in errors if not any(w in e for w in _WRAPPERS)]
        f.fatal_error = roots[0] if roots else errors[-1]
    return f


def parse_cache_config_info(metrics_text: str, facts: StartupFacts | None = None) -> StartupFacts:
    f = facts or StartupFacts()
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name != "vllm:cache_config_info":
            continue
        for s in fam.samples:
            lb = s.labels
            f.num_gpu_blocks = _int(lb.get("num_gpu_blocks"))
            f.block_size = _int(lb.get("block_size"))
            f.kv_cache_size_tokens = _int(lb.get("kv_cache_size_tokens"))
            f.kv_cache_max_concurrency = _float(lb.get("kv_cache_max_concurrency"))
            f.kv_cache_memory_bytes = _int(lb.get("kv_cache_memory_bytes"))
            f.cache_dtype = lb.get("cache_dtype")
            if "enable_prefix_caching" in lb:
                f.enable_prefix_caching = lb["enable_prefix_caching"] == "True"
            break
    return f
