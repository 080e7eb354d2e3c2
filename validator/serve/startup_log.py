"""What vLLM says while it starts: progress phases, KV-cache size and concurrency lines,
GPU memory lines, the fatal error; and the vllm:cache_config_info metric.

A GPU start-up log as real hosts write it (issue 27): lines may carry ANSI colour codes (a caller's
FORCE_COLOR or VLLM_LOGGING_COLOR; kvgate starts vLLM with colour off, but parses a coloured log
given to it), a timestamp or `[...]` in front (CI runners, docker compose's `vllm-1  | `), and a
process prefix that names the rank (`(Worker_PP2 pid=..)`, `(Worker_DP1_TP0_EP8 pid=..)`). Figures
are signed (a failed start-up logs `Available KV cache memory: -0.12 GiB`) and come in GiB or, before
0.7, "GB" (vLLM divided by 2**30 and wrote GB: the same number). Every memory figure is kept per
rank; the headline one is rank 0's, and the facts say which rank they are from."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from prometheus_client.parser import text_string_to_metric_families

from validator.rundir.startup import StartupFacts

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# `(Worker_TP0 pid=447)`, `(EngineCore_DP0 pid=738)`, `(VllmWorkerProcess pid=90)`
_PROC = re.compile(r"\((\w+) pid=\d+\)")
# vLLM's logger header: `INFO 08-14 14:07:22 [gpu_worker.py:563] ` (0.6: `INFO 11-18 18:07:17 file.py:175] `)
_HEADER = re.compile(
    r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?\s+\[?[\w./<>-]+:\d+\]\s?"
)
# what may stand before a raw line (a traceback printed without the logger): timestamps in brackets,
# `name  | ` of docker compose, a bare `| `, an ISO timestamp
_LEAD = re.compile(r"^(?:\s*\[[^\]]*\]|\s*[\w.-]+\s+\|(?=\s)|\s*\|(?=\s)|\s*\d{4}-\d\d-\d\dT[\d:.]+Z?)+\s?")

_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU)?\s*KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_EST_LEN = re.compile(r"estimated maximum model length is (\d+)")

_NUM = r"(-?\d+(?:\.\d+)?)\s*(GiB|GB|MiB)"  # signed; GB is what vLLM before 0.7 wrote for GiB

# each figure's wordings, 0.6 to 0.32, first match wins within a line
_FIGURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weights_gib", re.compile(r"(?:Model loading took|Loading model weights took) " + _NUM)),
    ("weights_gib", re.compile(r"model weights take " + _NUM)),  # 0.6's profile summary
    ("available_kv_gib", re.compile(r"Available KV cache memory: " + _NUM)),
    ("available_kv_gib", re.compile(r"the rest of the memory reserved for KV Cache is " + _NUM)),
    ("activation_peak_gib", re.compile(r"torch peak memory increase: " + _NUM)),
    ("activation_peak_gib", re.compile(r"PyTorch activation peak memory takes " + _NUM)),
    ("cudagraph_actual_gib", re.compile(r"CUDA graph pool memory: " + _NUM + r" \(actual\)")),
    ("cudagraph_actual_gib", re.compile(r"Graph capturing finished in [\d.]+ secs?, took " + _NUM)),
    ("kv_reserved_gib", re.compile(r"reserved " + _NUM + r" memory for KV Cache")),
    # vLLM >= 0.21, after CUDA-graph capture: at info level the only line that splits weights +
    # non-torch from the activation peak (the profile's own split is logged at debug level)
    ("consumed_gib", re.compile(r"Actual usage is " + _NUM + r" for consumed memory \(weights \+ non-torch\)")),
    ("usage_activation_gib", re.compile(r"for consumed memory .*?, " + _NUM + r" for peak activation")),
)
# printed only when the CUDA-graph estimate was taken off the KV budget (the 0.21 default): then the
# "peak activation" above holds that estimate too (gpu_worker.py: transient peak + estimate applied)
_CG_APPLIED = re.compile(r"CUDA graph memory profiling is enabled")
# a worker announces the V2 model runner before it loads the weights (gpu_worker.py); V1 is named only
# when V2 was the default and could not run ("Model Runner V2 requires Triton; using the V1 model runner
# instead.", "... does not yet support X; using the V1 model runner instead.")
_RUNNER_V2 = re.compile(r"Using V2 Model Runner")
_RUNNER_V1 = re.compile(r"using the V1 model runner")


# the CUDA-graph estimate: one wording a version, the pool line's "(estimated)" when it is the only one
class CgWording(str, Enum):
    """Which line gave the CUDA-graph estimate."""

    TOTAL = "total"  # Estimated CUDA graph memory: X GiB total (0.17+)
    MRV2_TOTAL = "mrv2_total"  # Estimated MRV2 CUDA graph memory: X GiB total (...)
    MRV2_ADDITIONAL = "mrv2_additional"  # Estimated MRV2 CUDA graph memory: X GiB additional (...)
    POOL_LINE = "pool_line"  # CUDA graph pool memory: A GiB (actual), E GiB (estimated)


_CG_ESTIMATES: tuple[tuple[CgWording, re.Pattern[str]], ...] = (
    (CgWording.TOTAL, re.compile(r"Estimated CUDA graph memory: " + _NUM + r" total")),
    (CgWording.MRV2_TOTAL, re.compile(r"Estimated MRV2 CUDA graph memory: " + _NUM + r" total")),
    (CgWording.MRV2_ADDITIONAL, re.compile(r"Estimated MRV2 CUDA graph memory: " + _NUM + r" additional")),
    (CgWording.POOL_LINE, re.compile(r"CUDA graph pool memory: .*?, " + _NUM + r" \(estimated\)")),
)

# an exception line: `ValueError: ...`, dotted names too (`torch.AcceleratorError: CUDA error: ...`,
# `pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig`)
_ERROR = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::\s*(.*))?$")
_VALUE_ERROR = re.compile(r"^\s*Value error, (.+?)(?:\s*\[type=value_error.*)?$")

# log fragments that mark start-up progress, in order
PHASES = (
    ("starting", re.compile(r"vLLM API server version|non-default args|Starting vLLM")),
    ("loading", re.compile(r"Loading weights|Starting to load model|Loading model")),
    ("loaded", re.compile(r"Model loading took|Loading weights took")),
    ("kv cache sized", _KV_TOKENS),
    ("ready", re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM server on")),
)

# errors that only wrap the root cause reported earlier in the log
_WRAPPERS = (
    "Engine core initialization failed",
    "EngineDeadError",
    "See root cause above",
    "EngineCore encountered an issue",
)


@dataclass(frozen=True)
class LogLine:
    """One log line taken apart: the rank its process prefix names (None: no worker prefix), the
    logger level (None: a raw line, as a traceback's), and the message."""

    rank: str | None
    level: str | None
    message: str

    @property
    def rank0(self) -> bool:
        """Rank 0 (or a line of no worker: the engine or a single process)."""
        return self.rank is None or not re.search(r"[1-9]", self.rank)


def split_line(raw: str) -> LogLine:
    line = _ANSI.sub("", raw).rstrip("\r\n")
    head = _HEADER.search(line)
    rest = line[: head.start()] if head else line
    name = None
    while True:  # peel what stands in front: timestamps, `name  | `, the process prefix
        peeled = _LEAD.sub("", rest).lstrip()
        if name is None and (m := _PROC.match(peeled)):
            name, peeled = m.group(1), peeled[m.end() :]
        if peeled == rest:
            break
        rest = peeled
    rank = None
    if name and name.startswith("Worker_"):
        rank = name[len("Worker_") :]
    elif name == "VllmWorkerProcess":  # vLLM 0.6's workers of rank > 0 (rank 0 is the driver)
        rank = "worker"
    if head:
        return LogLine(rank, head.group(1), line[head.end() :])
    return LogLine(rank, None, rest.strip())


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


def _gib(value: str, unit: str) -> float:
    v = float(value)
    return round(v / 1024, 4) if unit == "MiB" else v


def phase_of(line: str) -> int | None:
    """Index into PHASES of the latest phase this log line marks."""
    for i in range(len(PHASES) - 1, -1, -1):
        if PHASES[i][1].search(line):
            return i
    return None


def parse_log(text: str, facts: StartupFacts | None = None) -> StartupFacts:
    f = facts or StartupFacts()
    errors: list[str] = []
    per_rank: dict[str, dict[str, float]] = {}
    rank0: dict[str, float] = {}
    cg_wording: CgWording | None = None
    cg_applied = runner_v2 = runner_v1 = False
    lines = [split_line(x) for x in text.splitlines()]
    for i, ln in enumerate(lines):
        msg = ln.message
        if m := _KV_TOKENS.search(msg):
            f.kv_cache_tokens = _int(m.group(1))
        if m := _CONCURRENCY.search(msg):
            f.max_concurrency_at, f.max_concurrency_logged = _int(m.group(1)), float(m.group(2))
        if m := _EST_LEN.search(msg):
            f.refused_estimated_max_model_len = int(m.group(1))
        cg_applied = cg_applied or bool(_CG_APPLIED.search(msg))
        runner_v2 = runner_v2 or bool(_RUNNER_V2.search(msg))
        runner_v1 = runner_v1 or bool(_RUNNER_V1.search(msg))
        found: dict[str, float] = {}
        for attr, rx in _FIGURES:
            if attr not in found and (m := rx.search(msg)):
                found[attr] = _gib(m.group(1), m.group(2))
        for wording, rx in _CG_ESTIMATES:
            if m := rx.search(msg):
                if wording is CgWording.POOL_LINE and cg_wording not in (None, CgWording.POOL_LINE):
                    break  # the estimate's own line came first: the pool line only repeats it
                found["cudagraph_estimated_gib"] = _gib(m.group(1), m.group(2))
                cg_wording = cg_wording or wording
                break
        for attr, v in found.items():
            per_rank.setdefault(ln.rank or "0", {}).setdefault(attr, v)
            if ln.rank0:
                rank0.setdefault(attr, v)
        if m := _ERROR.match(msg.strip()):
            kind, said = m.group(1), m.group(2) or ""
            if "Warning" not in kind:
                errors.append(_with_reason(f"{kind}: {said}".rstrip(": "), lines, i)[:2000])
    for attr in ("weights_gib", "available_kv_gib", "activation_peak_gib", "cudagraph_estimated_gib",
                 "cudagraph_actual_gib", "kv_reserved_gib", "consumed_gib"):  # fmt: skip
        if getattr(f, attr) is not None:
            continue
        if attr in rank0:
            setattr(f, attr, rank0[attr])
        else:  # no rank-0 line of it: the first rank's, and the facts say which
            other = next((r for r, figs in per_rank.items() if attr in figs), None)
            if other is not None:
                setattr(f, attr, per_rank[other][attr])
                f.figures_rank = other
    if per_rank:
        f.per_rank = per_rank
        if f.figures_rank is None:
            f.figures_rank = next((r for r in per_rank if LogLine(r, None, "").rank0), None)
    f.cudagraph_wording = cg_wording.value if cg_wording else None
    if runner_v2:
        f.model_runner = "v2"
    elif runner_v1 or (f.weights_gib is not None and f.model_runner is None):  # or loaded without V2's line
        f.model_runner = "v1"
    usage = rank0 if "usage_activation_gib" in rank0 else None  # else the first rank that logged the line
    usage = usage or next((figs for figs in per_rank.values() if "usage_activation_gib" in figs), {})
    _split_usage(f, usage, cg_applied)
    if errors:
        roots = [e for e in errors if not any(w in e for w in _WRAPPERS)]
        f.fatal_error = roots[0] if roots else errors[-1]
    return f


def _split_usage(f: StartupFacts, figs: dict[str, float], cg_applied: bool) -> None:
    """The post-capture "Actual usage" line (vLLM >= 0.21) into the profile's terms: non-torch is the
    consumed memory less the weights, the activation peak its figure less the CUDA-graph estimate
    when that was applied (unknown estimate: not measured). The debug-level figures win."""
    if f.non_torch_gib is None and f.consumed_gib is not None and f.weights_gib is not None:
        f.non_torch_gib = round(f.consumed_gib - f.weights_gib, 2)
    peak = figs.get("usage_activation_gib")
    if f.activation_peak_gib is not None or peak is None:
        return
    if not cg_applied:
        f.activation_peak_gib = peak
    elif f.cudagraph_estimated_gib is not None:
        f.activation_peak_gib = round(peak - f.cudagraph_estimated_gib, 2)


def _with_reason(error: str, lines: list[LogLine], i: int) -> str:
    """A pydantic ValidationError says what failed on a line below it (`Value error, User-specified
    max_model_len ...`): the reason joins the exception's name."""
    if "ValidationError" not in error:
        return error
    for ln in lines[i + 1 : i + 6]:
        if m := _VALUE_ERROR.match(ln.message):
            return f"{error}: {m.group(1)}"
    return error


def parse_cache_config_info(metrics_text: str, facts: StartupFacts | None = None) -> StartupFacts:
    f = facts or StartupFacts()
    for fam in text_string_to_metric_families(metrics_text):
        if fam.name != "vllm:cache_config_info":
            continue
        f.engines = len({s.labels.get("engine") for s in fam.samples}) or None
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
            f.prefix_cache_retention_interval = lb.get("prefix_cache_retention_interval")
            f.prefix_match_unit = lb.get("prefix_match_unit")
            break
    return f
