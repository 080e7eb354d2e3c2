"""What vLLM says about itself at start-up, and how it compares with the plan.

Pure functions over log text and /metrics text, so they are tested on
recorded output and reused for servers kvgate did not start (``--url``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from prometheus_client.parser import text_string_to_metric_families

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


@dataclass
class StartupFacts:
    kv_cache_tokens: int | None = None
    max_concurrency_logged: float | None = None   # the log rounds to 2 decimals
    max_concurrency_at: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_size_tokens: int | None = None        # from vllm:cache_config_info
    kv_cache_max_concurrency: float | None = None  # from vllm:cache_config_info (full precision)
    kv_cache_memory_bytes: int | None = None
    cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    max_model_len: int | None = None               # from /v1/models
    served_model: str | None = None                # from /v1/models
    models_error: str | None = None                # why /v1/models could not be read
    refused_estimated_max_model_len: int | None = None
    fatal_error: str | None = None
    # GPU start-up memory as logged (GiB, 2 decimals), rank 0's first line of each
    weights_gib: float | None = None
    available_kv_gib: float | None = None
    activation_peak_gib: float | None = None
    cudagraph_estimated_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    kv_reserved_gib: float | None = None        # --kv-cache-memory-bytes as vLLM took it

    def to_json(self) -> dict:
        return asdict(self)


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
_WRAPPERS = ("Engine core initialization failed", "EngineDeadError", "See root cause above",
             "EngineCore encountered an issue")


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
        for rx, attr in ((_LOADING, "weights_gib"), (_AVAILABLE, "available_kv_gib"), (_TORCH_PEAK,
                         "activation_peak_gib"), (_CG_EST, "cudagraph_estimated_gib"),
                         (_CG_ACTUAL, "cudagraph_actual_gib"), (_RESERVED, "kv_reserved_gib")):
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


@dataclass
class Check:
    """One comparison. passed None is "not measured" (a required check without its evidence:
    the verdict cannot be pass) unless judged is False: a check this platform or profile does not
    judge, said with its reason (for example an SLO that was not set)."""

    name: str
    expected: object
    observed: object
    passed: bool | None          # None: not measured, or not judged
    tolerance: str = "exact"
    explanation: str = ""
    judged: bool = True

    @property
    def status(self) -> str:
        if self.passed is True:
            return "pass"
        if self.passed is False:
            return "fail"
        return "not_measured" if self.judged else "not_judged"

    def to_json(self) -> dict:
        d = asdict(self)
        d["status"] = self.status
        return d


def cross_check(plan: dict, facts: StartupFacts, started_here: bool = True) -> list[Check]:
    """Predicted vs reported, exact: blocks, block size, KV tokens, max concurrency, max_model_len.
    The log line is judged only for a server kvgate started (it has no log of any other)."""
    def check(name: str, expected, observed, explanation: str, tol: str = "exact", judged: bool = True) -> Check:
        if observed is None:
            return Check(name, expected, None, None, tol, "not reported by the server: " + explanation, judged=judged)
        ok = expected == observed if tol == "exact" else abs(expected - observed) <= 0.005
        return Check(name, expected, observed, ok, tol, explanation)

    conc_logged = round(plan["max_concurrency"], 2)
    return gpu_memory_checks(plan, facts, started_here) + [
        check("startup.num_gpu_blocks", plan["num_blocks"], facts.num_gpu_blocks,
              "floor(KV bytes / bytes per pool block), or the override"),
        check("startup.block_size", plan["block_size"], facts.block_size, "tokens per block"),
        check("startup.kv_cache_tokens", plan["kv_cache_tokens"],
              facts.kv_cache_size_tokens if facts.kv_cache_size_tokens is not None else facts.kv_cache_tokens,
              "int(max concurrency x max_model_len), as vLLM reports it"),
        check("startup.max_concurrency", plan["max_concurrency"],
              facts.kv_cache_max_concurrency, "num_gpu_blocks / blocks per request at max_model_len"),
        check("startup.max_concurrency_logged", conc_logged, facts.max_concurrency_logged,
              "the start-up log line (2 decimals)", tol="0.005",
              judged=started_here),
        check("startup.max_model_len", plan["max_model_len"], facts.max_model_len,
              "from /v1/models" + (f" ({facts.models_error})" if facts.models_error else "")),
    ]


# tolerances of the start-up memory checks: the model's error on 25 logged start-ups is at most
# 0.4 % (docs/kv-accounting.md); the CUDA-graph figure is a constant estimate (0.49-1.82 GiB seen)
MEMORY_REL_TOL = 0.03
CUDAGRAPH_ABS_TOL_GIB = 0.5


def gpu_memory_checks(plan: dict, facts: StartupFacts, started_here: bool = True) -> list[Check]:
    """The ledger's GPU memory terms against vLLM's start-up log lines (GPU runs kvgate launched)."""
    if plan.get("platform") != "gpu":
        return []
    L = plan.get("ledger") or {}
    gib = 1024 ** 3
    judged = started_here  # no log of a server kvgate did not start

    def rel(name, key, logged, what):
        exp = L.get(key)
        if exp is None:
            return Check(name, None, logged, None, "3 %", f"{what}: the plan has no such term (given directly)",
                         judged=False)
        exp_g = round(exp / gib, 2)
        if logged is None:
            return Check(name, exp_g, None, None, "3 %", f"{what}: not in vLLM's log", judged=judged)
        return Check(name, exp_g, logged, abs(logged - exp_g) <= MEMORY_REL_TOL * max(exp_g, 0.01), "3 %",
                     f"{what} (GiB): the ledger vs vLLM's start-up log")

    out = [rel("startup.weights_gib", "weights_bytes", facts.weights_gib, "Model loading took")]
    if L.get("kv_pinned") or L.get("mode") == "kv_cache_bytes given":
        # vLLM took the budget as given and skipped its memory profile: it logs the reservation
        exp = round(L["kv_cache_bytes"] / gib, 2) if L.get("kv_cache_bytes") is not None else None
        got = facts.kv_reserved_gib
        out.append(Check("startup.kv_reserved_gib", exp, got, None if got is None or exp is None else
                         abs(got - exp) <= 0.01, "0.01 GiB", "--kv-cache-memory-bytes as vLLM reserved it "
                         "(its log rounds to 2 decimals)", judged=judged))
        out.append(Check("startup.available_kv_gib", exp, None, None, "3 %", "not judged: the KV budget is pinned "
                         "(--kv-cache-memory-bytes), so vLLM skips the memory profile that would log it",
                         judged=False))
    else:
        out.append(rel("startup.available_kv_gib", "kv_cache_bytes", facts.available_kv_gib,
                       "Available KV cache memory"))
    cg = L.get("cudagraph_bytes")
    logged = facts.cudagraph_estimated_gib
    if cg is None or logged is None:
        out.append(Check("startup.cudagraph_estimate_gib", None if cg is None else round(cg / gib, 2), logged,
                         None, f"+/- {CUDAGRAPH_ABS_TOL_GIB} GiB", "Estimated CUDA graph memory: not logged "
                         "(--enforce-eager, or a version that does not estimate it)", judged=False))
    else:
        exp = round(cg / gib, 2)
        out.append(Check("startup.cudagraph_estimate_gib", exp, logged, abs(logged - exp) <= CUDAGRAPH_ABS_TOL_GIB,
                         f"+/- {CUDAGRAPH_ABS_TOL_GIB} GiB", "the plan's CUDA-graph estimate vs vLLM's"))
    return out
