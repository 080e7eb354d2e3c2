"""A /metrics sample: vLLM's Prometheus text parsed into the figures kvgate uses, and
saved one JSON line each in metrics.jsonl (failed scrapes as {t, error} lines)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from loadgen.results.records import read_jsonl

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


# not a vLLM metric: the server's memory when the sample was taken (GPU used, or engine RSS), bytes
MEMORY = "kvgate_server_memory_bytes"


@dataclass
class Histogram:
    buckets: list[tuple[float, float]]  # (upper bound, cumulative count), sorted; +Inf last
    count: float
    sum: float

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        prev = dict(before.buckets)
        return Histogram(
            [(le, c - prev.get(le, 0.0)) for le, c in self.buckets], self.count - before.count, self.sum - before.sum
        )

    def drop_top(self, k: int) -> Histogram:
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
        return {
            "buckets": [[le if le != float("inf") else "+Inf", c] for le, c in self.buckets],
            "count": self.count,
            "sum": self.sum,
        }

    @classmethod
    def from_json(cls, d: dict) -> Histogram:
        return cls([(float("inf") if le == "+Inf" else float(le), c) for le, c in d["buckets"]], d["count"], d["sum"])


@dataclass
class Sample:
    t: float  # wall clock (time.time) when the scrape returned
    values: dict[str, float | None]  # gauges and counters
    by_reason: dict[str, float] = field(default_factory=dict)  # request_success by finished_reason
    histograms: dict[str, Histogram] = field(default_factory=dict)
    t_sent: float | None = None  # when the scrape was sent: the value is from [t_sent, t]

    def to_json(self) -> dict:
        return {
            "t": self.t,
            "t_sent": self.t_sent,
            "values": self.values,
            "by_reason": self.by_reason,
            "histograms": {k: h.to_json() for k, h in self.histograms.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> Sample:
        return cls(
            d["t"],
            d["values"],
            d.get("by_reason", {}),
            {k: Histogram.from_json(h) for k, h in d.get("histograms", {}).items()},
            d.get("t_sent"),
        )


def parse_metrics(text: str, t: float | None = None, with_histograms: bool = True) -> Sample:
    fams: dict[str, Any] = {}
    for parsed in text_string_to_metric_families(text):
        if not parsed.samples:  # a TYPE line whose samples the parser filed under another family name
            continue
        fams[parsed.name] = parsed
        if parsed.name.endswith("_total"):  # exporters differ on whether the family keeps the suffix
            fams.setdefault(parsed.name[:-6], parsed)
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


def read_samples(path: str | Path, problems: list[str] | None = None, errors: list[dict] | None = None) -> list[Sample]:
    """Samples saved by a Sampler; its failed scrapes (lines with "error") go to `errors`."""

    def parse(d: dict):
        if isinstance(d, dict) and "error" in d:
            if errors is not None:
                errors.append(d)
            return None
        return Sample.from_json(d)

    return [s for s in read_jsonl(path, parse, problems) if s is not None]
