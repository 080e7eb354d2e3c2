"""Writes report.json, summary.md and report.html (atomically)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from loadgen.results import benchjson
from loadgen.safefile import make_dirs, real_dir_inside
from validator.report.html import report_html
from validator.report.markdown import summary_md
from validator.rundir.files import write_text
from validator.rundir.schedule import RUN_NAME, RunKind


def write_all(run_dir: Path, rep: dict, latency_values: dict | None = None) -> None:
    write_text(run_dir / "report.json", json.dumps(rep, indent=1, default=_json_default))
    write_text(run_dir / "summary.md", summary_md(rep))
    write_text(run_dir / "report.html", report_html(rep, latency_values or {}))


def write_bench_results(run_dir: Path, runs: list, model: str, goodput: dict[str, float] | None = None) -> None:
    """Each measured run also as `vllm bench serve`'s result JSON (runs/<run>/vllm-bench-result.json),
    for the scripts and dashboards built around it; detailed lists included. `goodput`: the SLOs as
    `vllm bench serve --goodput` takes them (ms), for request_goodput."""
    for r in runs:
        if not r.measured:
            continue
        res = benchjson.result(
            r.records,
            max(r.ended_at - r.started_at, 0.0),
            backend="openai",
            model_id=str(model),
            num_prompts=len([x for x in r.records if not x.warmup]),
            request_rate=None,
            burstiness=1.0,
            max_concurrency=(r.workload or {}).get("concurrency"),
            percentile_metrics=("ttft", "tpot", "itl", "e2el"),
            percentiles=(50.0, 90.0, 99.0),
            detailed=True,
            goodput=goodput or None,
            metadata={"kvgate_run": r.name, "cache": r.cache},
            date=time.strftime("%Y%m%d-%H%M%S", time.localtime(r.started_at)),
        )
        # the run's name is plan.json's (or, in an older directory, the directory's own), a plain name;
        # a symlink planted on the way is never written through
        if not RUN_NAME.fullmatch(r.name):
            continue
        try:
            d = real_dir_inside(run_dir, "runs", r.name)
        except OSError:
            continue
        if d.is_dir():
            write_text(d / "vllm-bench-result.json", json.dumps(res))
        n = (r.planned.concurrency if r.planned else None) if r.kind is RunKind.SWEEP else None
        if n is not None:  # the sweep as `vllm bench sweep` lays it out: `vllm bench sweep plot DIR/sweep` reads it
            try:
                make_dirs(real_dir_inside(run_dir, "sweep"))
                step = real_dir_inside(run_dir, "sweep", f"BENCH-max_concurrency={n}")
                make_dirs(step)
            except OSError:
                continue
            write_text(step / "summary.json", json.dumps([{**res, "run_number": 0, "max_concurrency": n}]))


def _json_default(o):
    if isinstance(o, float) and o != o:
        return None
    return str(o)
