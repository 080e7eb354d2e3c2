"""vLLM's /metrics: Prometheus text -> flat samples, and a sampler that keeps a time series.

Parsed with prometheus_client's parser. Current and older vLLM names are
accepted; a metric the server does not export is None (with a warning once),
never 0. Series with several label sets (engines, models) are summed.
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from loadgen.records import read_jsonl

# our name -> vLLM family names, newest first
GAUGES = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
}
COUNTERS = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "num_preemptions": ("vllm:num_preemptions", "vllm:num_preemptions_total"),
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "request_success": ("vllm:request_success",),
}
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
}


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]   # (upper bound, cumulative count), sorted; +Inf last
    count: float
    sum: float

    def minus(self, before: "Histogram | None") -> "Histogram":
        if before is None:
            return self
        prev = dict(before.buckets)
        return Histogram([(le, c - prev.get(le, 0.0)) for le, c in self.buckets],
                         self.count - before.count, self.sum - before.sum)

    def drop_top(self, k: int) -> "Histogram":
        """Without its k largest samples (those that span a freeze). Their sum is not known: each
        is taken at its bucket's lower bound."""
        if k <= 0:
            return self
        keep = max(self.count - k, 0.0)
        buckets, removed_sum, lower, prev = [], 0.0, 0.0, 0.0
        for le, c in self.buckets:
            new = min(c, keep)
            removed_sum += ((c - prev) - (new - min(prev, keep))) * lower
            buckets.append((le, new))
            prev, lower = c, le
        return Histogram(buckets, keep, max(self.sum - removed_sum, 0.0))

    def to_json(self) -> dict:
        return {"buckets": [[le if le != float("inf") else "+Inf", c] for le, c in self.buckets],
                "count": self.count, "sum": self.sum}

    @classmethod
    def from_json(cls, d: dict) -> "Histogram":
        return cls([(float("inf") if le == "+Inf" else float(le), c) for le, c in d["buckets"]],
                   d["count"], d["sum"])


@dataclass
class Sample:
    t: float                                   # wall clock (time.time) when the scrape returned
    values: dict[str, float | None]            # gauges and counters
    by_reason: dict[str, float] = field(default_factory=dict)  # request_success by finished_reason
    histograms: dict[str, Histogram] = field(default_factory=dict)
    t_sent: float | None = None                # when the scrape was sent: the value is from [t_sent, t]

    def to_json(self) -> dict:
        return {"t": self.t, "t_sent": self.t_sent, "values": self.values, "by_reason": self.by_reason,
                "histograms": {k: h.to_json() for k, h in self.histograms.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Sample":
        return cls(d["t"], d["values"], d.get("by_reason", {}),
                   {k: Histogram.from_json(h) for k, h in d.get("histograms", {}).items()}, d.get("t_sent"))


def parse_metrics(text: str, t: float | None = None, with_histograms: bool = True) -> Sample:
    fams = {}
    for fam in text_string_to_metric_families(text):
        if not fam.samples:  # a TYPE line whose samples the parser filed under another family name
            continue
        fams[fam.name] = fam
        if fam.name.endswith("_total"):  # exporters differ on whether the family keeps the suffix
            fams.setdefault(fam.name[:-6], fam)
    values: dict[str, float | None] = {}
    by_reason: dict[str, float] = {}
    for ours, names in {**GAUGES, **COUNTERS}.items():
        fam = next((fams[n] for n in names if n in fams), None)
        if fam is None:
            values[ours] = None
            continue
        total = 0.0
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            total += s.value
            if ours == "request_success":
                r = s.labels.get("finished_reason", "?")
                by_reason[r] = by_reason.get(r, 0.0) + s.value
        values[ours] = total
    hists = {}
    if with_histograms:
        for ours, names in HISTOGRAMS.items():
            fam = next((fams[n] for n in names if n in fams), None)
            if fam is None:
                continue
            buckets: dict[float, float] = {}
            count = total = 0.0
            for s in fam.samples:
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
                elif s.name.endswith("_count"):
                    count += s.value
                elif s.name.endswith("_sum"):
                    total += s.value
            hists[ours] = Histogram(sorted(buckets.items()), count, total)
    return Sample(t if t is not None else time.time(), values, by_reason, hists)


_WANTED = tuple(n for names in (*GAUGES.values(), *COUNTERS.values()) for n in names)
_WANTED_H = tuple(n for names in HISTOGRAMS.values() for n in names)


def wanted_lines(text: str, with_histograms: bool) -> str:
    """Only the families kvgate reads (vLLM exports hundreds of lines; parsing them all would
    steal time from the load generator sharing this event loop)."""
    names = _WANTED + _WANTED_H if with_histograms else _WANTED
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) > 2 and parts[2].startswith(names):
                keep.append(line)
        elif line.startswith(names):
            keep.append(line)
    return "\n".join(keep) + "\n"


def missing(sample: Sample) -> list[str]:
    return [k for k, v in sample.values.items() if v is None]


class Sampler:
    """Scrapes /metrics every `interval` seconds into memory and a JSONL file, until stopped.

    Light samples (gauges and counters) every interval; histograms only on
    `snapshot()` calls, which the caller makes at run boundaries.
    """

    def __init__(self, session, base_url: str, path: Path | None = None, interval: float = 0.25,
                 timeout: float = 5.0):
        self.session = session
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval = interval
        self.timeout = timeout
        self.samples: list[Sample] = []
        self.errors: list[dict] = []   # failed scrapes: {t, error}
        self._file = open(path, "a", encoding="utf-8") if path else None
        self._task: asyncio.Task | None = None
        self._warned: set[str] = set()
        self.last_ok: float | None = None

    async def scrape(self, with_histograms: bool = False) -> Sample | None:
        import aiohttp
        t_sent = time.time()
        try:
            async with self.session.get(self.url, timeout=aiohttp.ClientTimeout(total=self.timeout)) as r:
                text = await r.text()
                if r.status != 200:
                    raise aiohttp.ClientError(f"HTTP {r.status}")
        except (asyncio.TimeoutError, OSError, Exception) as e:  # noqa: BLE001 - any failure is a missed sample
            if isinstance(e, asyncio.CancelledError):
                raise
            err = {"t": time.time(), "error": f"{type(e).__name__}: {e}"[:300]}
            self.errors.append(err)
            if self._file:  # saved next to the samples: the judge counts the gaps
                self._file.write(json.dumps(err) + "\n")
                self._file.flush()
            return None
        t_done = time.time()
        s = parse_metrics(wanted_lines(text, with_histograms), t=t_done, with_histograms=with_histograms)
        s.t_sent = t_sent
        self.last_ok = s.t
        for m in missing(s):
            if m not in self._warned:
                self._warned.add(m)
                warnings.warn(f"/metrics has no {m}; it is reported as not measured", stacklevel=2)
        self.samples.append(s)
        if self._file:
            self._file.write(json.dumps(s.to_json(), separators=(",", ":")) + "\n")
            self._file.flush()
        return s

    async def snapshot(self) -> Sample | None:
        return await self.scrape(with_histograms=True)

    async def _loop(self) -> None:
        while True:
            t = time.monotonic()
            await self.scrape()
            await asyncio.sleep(max(self.interval - (time.monotonic() - t), 0.0))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._file:
            self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None


def read_samples(path: str | Path, problems: list[str] | None = None,
                 errors: list[dict] | None = None) -> list[Sample]:
    """Samples saved by a Sampler; its failed scrapes (lines with "error") go to `errors`."""
    def parse(d: dict):
        if isinstance(d, dict) and "error" in d:
            if errors is not None:
                errors.append(d)
            return None
        return Sample.from_json(d)
    return [s for s in read_jsonl(path, parse, problems) if s is not None]
