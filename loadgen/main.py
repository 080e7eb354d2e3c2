"""`loadgen`'s entry point: parse the command line (cli.py), then run one shard here (shard.py) or
several in processes or Ray actors (scale/), merged exactly (results/merge.py), and print the
summary. Exit 0 done, 1 some requests failed, 2 bad input, 3 the server could not be reached at
all, 130 interrupted."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from loadgen import cli, eventloop, lifeline, shard
from loadgen.loadrun import LoadRun, UsageError
from loadgen.redaction import redact_url
from loadgen.results.merge import merge
from loadgen.results.outputs import exit_code, write_outputs
from loadgen.results.records import RecordWriter
from loadgen.results.stats import format_summary
from loadgen.safefile import make_dirs, restrict_umask
from loadgen.scale.processes import last_error, run_processes, shard_args
from loadgen.schedule.runner import RunConfig


def with_workers(run: LoadRun, cfg: RunConfig, out: Path) -> dict:
    from loadgen.schedule.workload import new_salt

    salt = run.salt or new_salt()  # one salt, so every worker builds the same workload
    bound = (run.duration or 24 * 3600) + run.timeout + 300
    offsets = clocks_extra = None
    if run.ray:
        from loadgen.scale import ray

        try:
            codes, clocks_extra = ray.run_actors(
                run.ray, [shard_args(list(run.argv), i, run.workers, salt) for i in range(run.workers)], out, bound
            )
        except ray.RayError as e:
            raise UsageError(str(e)) from None
        offsets = clocks_extra["offsets_s"]
    else:
        codes = run_processes(list(run.argv), run.workers, salt, out, bound)
    dirs = [out / f"worker-{i}" for i in range(run.workers)]
    bad = [
        f"worker {i} exited {c}" + (f" ({last_error(out, i)})" if last_error(out, i) else "")
        for i, c in enumerate(codes)
        if c not in (0, 1, 3)
    ]
    if bad or not all((d / "summary.json").exists() for d in dirs):
        raise UsageError("; ".join(bad) or "a worker wrote no summary") from None
    records, started, ended, origin, clocks = merge(dirs, offsets)
    clocks.update(clocks_extra or {})
    with RecordWriter(out / "records.jsonl") as w:
        for r in records:
            w.write(r)
    return write_outputs(run, cfg, records, started, ended, origin, out, clocks=clocks, workers=run.workers)


def prepare(argv: list[str]):
    """The command line checked and the run built: (LoadRun, Workload, RunConfig). Raises UsageError."""
    run = cli.parse(argv)
    workload, cfg = shard.build(run)
    return run, workload, cfg


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    restrict_umask()  # records and summaries: this user's only
    if "--lifeline" in argv:  # first: the parent may already be gone
        lifeline.watch_stdin()
    try:
        run, workload, cfg = prepare(argv)
    except UsageError as e:
        print(f"loadgen: error: {redact_url(str(e))}", file=sys.stderr)
        return 2
    out = Path(run.out) if run.out else Path("runs") / f"loadgen-{time.strftime('%Y%m%d-%H%M%S')}"
    make_dirs(out)
    try:
        if run.scaled_out:
            summary = with_workers(run, cfg, out)
        else:
            summary = eventloop.run(shard.run_shard(run, workload, cfg, out), run.event_loop)
    except UsageError as e:  # a worker could not run, or Ray could not be reached
        print(f"loadgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = out / ("worker-*" if run.scaled_out else "") / "records.jsonl"
        print(f"\nloadgen: interrupted; finished requests are in {where}", file=sys.stderr)
        return 130
    if not run.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    print(format_summary(summary))
    return exit_code(summary)
