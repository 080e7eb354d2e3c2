"""What a loadgen run leaves: summary.json next to records.jsonl, and `vllm bench serve`'s result
JSON when asked. One path for a single process and for merged workers."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from loadgen import benchjson
from loadgen.records import RequestRecord
from loadgen.redaction import redact_url
from loadgen.safefile import write_atomic
from loadgen.stats import summarize


def write_outputs(a, cfg, records: list[RequestRecord], started_at: float, ended_at: float, origin: float,
                  out: Path, **extra) -> dict:
    """Statistics from every record at once (never averaged across workers)."""
    summary = summarize(records, ended_at - started_at)
    summary.update(window=[started_at, ended_at], config={k: v for k, v in vars(cfg).items()}, url=redact_url(a.url),
                   model=a.model,
                   # records' times are relative to this instant of time.perf_counter() (machine-wide
                   # monotonic on Linux): what a stamped server log is compared against
                   clock_origin_perf_counter=origin, **extra)
    if a.save_result and not a.worker_shard:  # workers leave the result file to the merge
        backend = "openai-chat" if a.chat else "openai"
        date = time.strftime("%Y%m%d-%H%M%S")
        res = benchjson.result(
            records, ended_at - started_at, backend=backend, model_id=a.model,
            num_prompts=len([r for r in records if not r.warmup]), request_rate=cfg.rate,
            burstiness=a.burstiness, max_concurrency=a.max_concurrency if a.max_concurrency is not None
            else cfg.concurrency, percentile_metrics=a.percentile_metrics, percentiles=a.metric_percentiles,
            goodput=a.goodput, detailed=a.save_detailed, metadata=a.metadata, date=date)
        name = benchjson.file_name(backend=backend, model_id=a.model, request_rate=cfg.rate,
                                   max_concurrency=a.max_concurrency, date=date, result_filename=a.result_filename)
        summary["result_file"] = str(benchjson.write(res, a.result_dir, name))
    write_atomic(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def progress_printer(quiet: bool):
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(p: dict) -> None:
        if quiet:
            return
        line = (f"[{p['run']}] {p['elapsed']:7.1f}s  done {p['done']}  ok {p['ok']}  errors {p['errors']}  "
                f"in flight {p['in_flight']}  chunks {p['tokens']}")
        if tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif time.monotonic() - last[0] >= 5:  # CI logs: a plain line every 5 s
            last[0] = time.monotonic()
            print(line, file=sys.stderr, flush=True)
    return show
