"""What a loadgen run leaves: summary.json next to records.jsonl, and `vllm bench serve`'s result
JSON when asked. One path for a single process and for merged workers."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from loadgen.loadrun import LoadRun
from loadgen.redaction import redact_url
from loadgen.results import benchjson
from loadgen.results.records import RequestRecord
from loadgen.results.stats import summarize
from loadgen.safefile import write_atomic


def write_outputs(
    run: LoadRun,
    cfg,
    records: list[RequestRecord],
    started_at: float,
    ended_at: float,
    origin: float,
    out: Path,
    **extra,
) -> dict:
    """Statistics from every record at once (never averaged across workers)."""
    summary = summarize(records, ended_at - started_at)
    summary.update(
        window=[started_at, ended_at],
        config={k: v for k, v in vars(cfg).items()},
        url=redact_url(run.url),
        model=run.model,
        # records' times are relative to this instant of time.perf_counter() (machine-wide
        # monotonic on Linux): what a stamped server log is compared against
        clock_origin_perf_counter=origin,
        **extra,
    )
    b = run.bench
    if b.save and not run.shard:  # workers leave the result file to the merge
        backend = "openai-chat" if run.chat else "openai"
        date = time.strftime("%Y%m%d-%H%M%S")
        res = benchjson.result(
            records,
            ended_at - started_at,
            backend=backend,
            model_id=run.model,
            num_prompts=len([r for r in records if not r.warmup]),
            request_rate=cfg.rate,
            burstiness=run.burstiness,
            max_concurrency=b.max_concurrency if b.max_concurrency is not None else cfg.concurrency,
            percentile_metrics=b.percentile_metrics,
            percentiles=b.percentiles,
            goodput=b.goodput,
            detailed=b.detailed,
            metadata=b.metadata,
            date=date,
        )
        name = benchjson.file_name(
            backend=backend,
            model_id=run.model,
            request_rate=cfg.rate,
            max_concurrency=b.max_concurrency,
            date=date,
            result_filename=b.filename,
        )
        summary["result_file"] = str(benchjson.write(res, b.result_dir, name))
    write_atomic(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def progress_printer(quiet: bool):
    tty = sys.stderr.isatty()
    last = [0.0]

    def show(p: dict) -> None:
        if quiet:
            return
        line = (
            f"[{p['run']}] {p['elapsed']:7.1f}s  done {p['done']}  ok {p['ok']}  errors {p['errors']}  "
            f"in flight {p['in_flight']}  chunks {p['tokens']}"
        )
        if tty:
            print("\r" + line, end="", file=sys.stderr, flush=True)
        elif time.monotonic() - last[0] >= 5:  # CI logs: a plain line every 5 s
            last[0] = time.monotonic()
            print(line, file=sys.stderr, flush=True)

    return show


def exit_code(summary: dict) -> int:
    """loadgen's exit code for a finished run: 3 none succeeded, 1 some failed, 0 all done."""
    if summary["ok"] == 0 and summary["requests"] > 0:
        return 3
    return 1 if summary["failed"] else 0
