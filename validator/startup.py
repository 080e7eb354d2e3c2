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
    refused_estimated_max_model_len: int | None = None
    fatal_error: str | None = None

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
    return [
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
        check("startup.max_model_len", plan["max_model_len"], facts.max_model_len, "from /v1/models"),
    ]
