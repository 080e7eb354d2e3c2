"""`loadgen`: streaming load against any OpenAI-compatible server on this machine.

Writes OUT/records.jsonl (one line per finished request, as it finishes) and
OUT/summary.json, and prints the summary. Exit 0 done, 1 some requests failed,
2 bad input, 3 the server could not be reached at all, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from loadgen import __version__, benchjson, lifeline, memory, net
from loadgen.client import PREPARE_BYTES, OpenAIStream, connector
from loadgen.outputs import progress_printer, write_outputs
from loadgen.records import RecordWriter
from loadgen.redaction import redact_url
from loadgen.runner import RunConfig, Runner, tokenize_lengths
from loadgen.safefile import make_dirs, restrict_umask
from loadgen.stats import format_summary
from loadgen.workers import exit_code, last_error, merge, parse_shard, run_processes, shard_args, shard_config
from loadgen.workload import (
    Lengths,
    WorkloadError,
    from_dataset,
    multi_turn,
    shared_prefix,
    synthetic,
)


class UsageError(Exception):
    pass


USER_TOKENS = 32   # new user tokens a turn in --turns conversations


def require_loopback(url: str) -> net.Pin:
    """The loopback rule (loadgen.net): the host resolved once; the run connects to what was checked."""
    try:
        return net.pin(url)
    except net.NotLoopback as e:
        raise UsageError(str(e)) from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.exit(2, f"loadgen: error: {message} (see loadgen --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="loadgen", description=__doc__.splitlines()[0],
                 epilog="`vllm bench serve`'s flag names are accepted with their meanings (docs/loadgen.md).")
    ap.add_argument("--version", action="version", version=f"loadgen (kvgate) {__version__}")
    ap.add_argument("--url", "--base-url", dest="url", required=True,
                    help="server base URL, e.g. http://127.0.0.1:8000 (loopback only)")
    ap.add_argument("--endpoint", default="/v1/completions", choices=["/v1/completions", "/v1/chat/completions"],
                    help="API path (vllm bench serve's name); /v1/chat/completions is --chat")
    ap.add_argument("--model", required=True, help="model name the server answers to")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int, help="closed loop: requests in flight (default 1)")
    mode.add_argument("--rate", type=float, help="open loop: requests per second")
    ap.add_argument("--max-concurrency", type=int,
                    help="requests in flight at most (vllm bench serve): alone, a closed loop; with "
                         "--request-rate, the cap of the open loop")
    ap.add_argument("--request-rate", type=float,
                    help="requests per second (vllm bench serve); inf (its default) sends all at once")
    ap.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of arrivals; 1 = Poisson")
    ap.add_argument("--requests", "--num-prompts", dest="requests", type=int,
                    help="how many requests (default 100 unless --duration)")
    ap.add_argument("--duration", type=float, help="seconds during which requests start")
    ap.add_argument("--ramp-up", type=float, default=0.0, help="seconds to reach full concurrency or rate")
    ap.add_argument("--warmup", type=int, default=0, help="first N requests left out of the statistics")
    ap.add_argument("--num-warmups", type=int, default=0,
                    help="warm-up requests sent first and left out (vllm bench serve): added to --num-prompts")
    ap.add_argument("--prompt-tokens", default="256", help="N, uniform:LO:HI or normal:MEAN:STD[:LO:HI]")
    ap.add_argument("--output-tokens", default="128", help="as --prompt-tokens; served exactly (ignore_eos)")
    ap.add_argument("--random-input-len", type=int, help="prompt tokens (vllm bench serve); see --random-range-ratio")
    ap.add_argument("--random-output-len", type=int, help="output tokens (vllm bench serve), served exactly")
    ap.add_argument("--random-range-ratio", type=float, default=0.0,
                    help="lengths uniform in [N x (1 - r), N x (1 + r)] (vllm bench serve; default 0: fixed)")
    ap.add_argument("--prefix-groups", type=int, help="shared-prefix workload: number of prefixes")
    ap.add_argument("--prefix-tokens", type=int, help="shared-prefix length (the run salt included)")
    ap.add_argument("--turns", type=int, help="multi-turn: turns per conversation (prompt grows with history)")
    ap.add_argument("--dataset", help="replay a JSONL file of {prompt, output_tokens}")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions (text prompts)")
    ap.add_argument("--seed", type=int, default=0, help="random seed of prompts and arrivals")
    ap.add_argument("--salt", help="run salt (default: random, so a repeated run does not hit the prefix cache)")
    ap.add_argument("--api-key-env", help="environment variable holding the API key")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request in all")
    ap.add_argument("--read-timeout", type=float, default=60.0, help="seconds without a byte before a request fails")
    ap.add_argument("--out", help="directory for records.jsonl and summary.json (default: runs/loadgen-<time>)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    ap.add_argument("--max-memory", default="1GiB",
                    help="memory the run may hold (records, prompts in flight, encoded bodies; docs/loadgen.md): "
                         "a run that would hold more is refused before it starts (default 1GiB)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes, each with its own event loop and a shard of the schedule (records merged "
                         "exactly); closed loop: at most --concurrency")
    ap.add_argument("--ray", metavar="ADDRESS",
                    help="run the --workers shards as Ray actors on a running cluster: its head's HOST:PORT, or "
                         "auto (the cluster `ray start` started here); needs the ray extra")
    ap.add_argument("--worker-shard", help=argparse.SUPPRESS)  # set by --workers for each worker
    ap.add_argument("--worker-start", type=float, help=argparse.SUPPRESS)  # perf_counter instant to begin at
    # stdin is a lifeline from the process that started this one: end when it reads end-of-file
    ap.add_argument("--lifeline", action="store_true", help=argparse.SUPPRESS)
    bench = ap.add_argument_group("results in vllm bench serve's format")
    bench.add_argument("--save-result", action="store_true", help="write vllm bench serve's result JSON")
    bench.add_argument("--save-detailed", action="store_true",
                       help="add input_lens, output_lens, ttfts, itls (seconds) and errors to it")
    bench.add_argument("--result-dir", help="directory of the result JSON (default: the current one)")
    bench.add_argument("--result-filename", help="its name (default: {backend}-{rate}qps[-concurrencyN]-{model}-"
                                                 "{date}.json, as vLLM names it)")
    bench.add_argument("--percentile-metrics", default="ttft,tpot,itl",
                       help="which of ttft,tpot,itl,e2el get mean/median/std/percentiles (default ttft,tpot,itl)")
    bench.add_argument("--metric-percentiles", default="99", help="comma-separated percentiles (default 99)")
    bench.add_argument("--goodput", nargs="+", metavar="KEY:VALUE",
                       help="SLOs in ms for request_goodput, KEY one of ttft, tpot, e2el")
    bench.add_argument("--metadata", nargs="+", metavar="KEY=VALUE", help="extra keys written into the result JSON")
    return ap


# numeric flags and the smallest value each takes (the largest: what a run can bound in time)
_MINIMUM = {"requests": 1, "warmup": 0, "prefix_groups": 1, "prefix_tokens": 1, "turns": 2, "concurrency": 1,
            "max_concurrency": 1, "num_warmups": 0, "random_input_len": 1, "random_output_len": 1, "workers": 1}
DURATION_MAX_REQUESTS = 10_000_000   # a run bounded by --duration only: at most this many (and what fits)
_POSITIVE = ("timeout", "read_timeout", "rate", "duration", "burstiness")


def check_ranges(a) -> None:
    """Every numeric flag in range, or a one-line error naming it (exit 2)."""
    for name, low in _MINIMUM.items():
        v = getattr(a, name, None)
        if v is not None and not low <= v <= 10**9:
            raise UsageError(f"--{name.replace('_', '-')}: {v} is out of range; give a whole number from {low}")
    for name in _POSITIVE:
        v = getattr(a, name, None)
        if v is not None and not (math.isfinite(v) and 0 < v <= 10**9):
            raise UsageError(f"--{name.replace('_', '-')}: {v} is out of range; give a number above 0")
    if a.request_rate is not None and not (a.request_rate > 0 and (math.isinf(a.request_rate)
                                                                   or a.request_rate <= 10**9)):
        raise UsageError(f"--request-rate: {a.request_rate} is out of range; give requests per second above 0, "
                         "or inf")
    if not (math.isfinite(a.random_range_ratio) and 0 <= a.random_range_ratio < 1):
        raise UsageError(f"--random-range-ratio: {a.random_range_ratio} is out of range; give a number in [0, 1)")
    if not (math.isfinite(a.ramp_up) and 0 <= a.ramp_up <= 10**9):
        raise UsageError(f"--ramp-up: {a.ramp_up} is out of range; give seconds from 0")
    if a.requests is not None and a.warmup >= a.requests:
        raise UsageError(f"--warmup: {a.warmup} would leave none of the {a.requests} requests measured")


def make_workload(a):
    """The workload, after its memory is known to fit --max-memory (loadgen.memory): nothing is built
    for a run that would not fit. A run bounded by --duration alone gets a count bound that fits."""
    try:
        out = Lengths.parse(a.output_tokens, "--output-tokens")
        budget = memory.parse_size(a.max_memory)
        n = a.requests if a.requests is not None else (100 if a.duration is None else DURATION_MAX_REQUESTS)
        in_flight = (a.concurrency or 1) if a.rate is None else (a.max_concurrency or 4096)
        if a.dataset:
            size = os.stat(a.dataset).st_size if os.path.isfile(a.dataset) else 0
            memory.check(memory.Shape(requests=n, prompt_max=0, output_max=out.max, in_flight=in_flight,
                                      dataset_bytes=size), budget, PREPARE_BYTES)
            return from_dataset(a.dataset, default_output=out.sample(np.random.default_rng(a.seed)), limit=n)
        if a.chat:
            raise UsageError("--chat needs text prompts: use --dataset with text prompts")
        prompt = Lengths.parse(a.prompt_tokens, "--prompt-tokens")
        if (a.prefix_groups or a.prefix_tokens) and not (a.prefix_groups and a.prefix_tokens):
            raise UsageError("--prefix-groups and --prefix-tokens go together")
        shape = memory.Shape(requests=n, prompt_max=prompt.max + (a.prefix_tokens or 0) * (not a.turns),
                             output_max=out.max, in_flight=in_flight, turns=a.turns or 0,
                             user_max=USER_TOKENS if a.turns else 0,
                             prefix_groups=(a.prefix_groups or 0) * (not a.turns), prefix_tokens=a.prefix_tokens or 0)
        if a.requests is None and a.duration is not None:   # bounded by time: and by what fits
            n = min(n, memory.requests_within(budget, shape, PREPARE_BYTES))
            shape = replace(shape, requests=n)
            a.requests_bound = n
        memory.check(shape, budget, PREPARE_BYTES)
        if a.turns:
            if a.turns < 2:
                raise UsageError("--turns must be at least 2")
            convs = max(1, n // a.turns)
            return multi_turn(convs, a.turns, prompt, Lengths.parse(USER_TOKENS, "user"), out.max, seed=a.seed,
                              salt=a.salt)
        if a.prefix_groups:
            return shared_prefix(n, a.prefix_groups, a.prefix_tokens, prompt, out, seed=a.seed, salt=a.salt)
        return synthetic(n, prompt, out, seed=a.seed, salt=a.salt)
    except (WorkloadError, memory.BudgetError) as e:
        raise UsageError(str(e)) from None


async def _main(a, workload, cfg: RunConfig, out: Path) -> dict:
    """Run; write records.jsonl and summary.json to out, and vllm bench's result JSON when asked."""
    key = os.environ.get(a.api_key_env) if a.api_key_env else None
    async with net.session(connector=connector(a.pin)) as session:
        await tokenize_lengths(session, a.url, a.model, workload.items,
                               headers={"Authorization": f"Bearer {key}"} if key else None)
        transport = OpenAIStream(session, a.url, a.model, api_key=key, request_timeout=a.timeout,
                                 read_timeout=a.read_timeout)
        with RecordWriter(out / "records.jsonl") as w:
            runner = Runner(transport, w, name="loadgen", progress=progress_printer(a.quiet))
            if a.worker_start is not None:  # --workers: every shard begins at the same instant
                await asyncio.sleep(max(a.worker_start - time.perf_counter(), 0.0))
            result = await runner.run(workload, cfg)
    return write_outputs(a, cfg, result.records, result.started_at, result.ended_at, runner.t0, out,
                         interrupted=result.interrupted, workload=result.workload)


def _with_workers(a, cfg: RunConfig, out: Path, argv: list[str]) -> dict:
    from loadgen.workload import new_salt
    salt = a.salt or new_salt()   # one salt, so every worker builds the same workload
    bound = (a.duration or 24 * 3600) + a.timeout + 300
    offsets = clocks_extra = None
    if a.ray:
        from loadgen import rayworkers
        try:
            codes, clocks_extra = rayworkers.run_actors(
                a.ray, [shard_args(argv, i, a.workers, salt) for i in range(a.workers)], out, bound)
        except rayworkers.RayError as e:
            raise UsageError(str(e)) from None
        offsets = clocks_extra["offsets_s"]
    else:
        codes = run_processes(argv, a.workers, salt, out, bound)
    dirs = [out / f"worker-{i}" for i in range(a.workers)]
    bad = [f"worker {i} exited {c}" + (f" ({last_error(out, i)})" if last_error(out, i) else "")
           for i, c in enumerate(codes) if c not in (0, 1, 3)]
    if bad or not all((d / "summary.json").exists() for d in dirs):
        raise UsageError("; ".join(bad) or "a worker wrote no summary") from None
    records, started, ended, origin, clocks = merge(dirs, offsets)
    clocks.update(clocks_extra or {})
    with RecordWriter(out / "records.jsonl") as w:
        for r in records:
            w.write(r)
    return write_outputs(a, cfg, records, started, ended, origin, out, clocks=clocks, workers=a.workers)


def prepare(argv: list[str]):
    """The flags checked and the workload built: (args, workload, RunConfig). Raises UsageError."""
    a = build_parser().parse_args(argv)
    a.pin = require_loopback(a.url)
    check_ranges(a)                  # the flags as given: the error names what the user wrote
    benchjson.apply_bench_flags(a)
    a.percentile_metrics = benchjson.parse_percentile_metrics(a.percentile_metrics)
    a.metric_percentiles = benchjson.parse_percentiles(a.metric_percentiles)
    a.goodput = benchjson.parse_goodput(a.goodput)
    a.metadata = benchjson.parse_metadata(a.metadata)
    check_ranges(a)                  # again: --num-warmups has added to --requests and --warmup
    workload = make_workload(a)
    cfg = RunConfig(concurrency=a.concurrency if a.rate is None else None, rate=a.rate,
                    burstiness=a.burstiness, max_requests=a.requests, duration=a.duration,
                    ramp_up=a.ramp_up, warmup=a.warmup, seed=a.seed,
                    max_in_flight=a.max_concurrency if a.rate is not None and a.max_concurrency else 4096)
    if cfg.rate is None and cfg.concurrency is None:
        cfg.concurrency = 1
    if cfg.max_requests is None and cfg.duration is None:
        cfg.max_requests = 100
    if cfg.max_requests is None:   # a --duration run: the count bound that fits --max-memory
        cfg.max_requests = getattr(a, "requests_bound", None)
    cfg.check()
    if a.workers > 1 and cfg.concurrency is not None and cfg.concurrency < a.workers:
        raise UsageError(f"--workers: {a.workers} workers need at least as many requests in flight "
                         f"(--concurrency {cfg.concurrency})")
    if a.worker_shard:
        shard_config(cfg, *parse_shard(a.worker_shard))
    return a, workload, cfg


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    restrict_umask()   # records and summaries: this user's only
    if "--lifeline" in argv:   # first: the parent may already be gone
        lifeline.watch_stdin()
    try:
        a, workload, cfg = prepare(argv)
    except (UsageError, ValueError) as e:
        print(f"loadgen: error: {redact_url(str(e))}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path("runs") / f"loadgen-{time.strftime('%Y%m%d-%H%M%S')}"
    make_dirs(out)
    try:
        if a.workers > 1 or a.ray:
            summary = _with_workers(a, cfg, out, argv)
        else:
            summary = asyncio.run(_main(a, workload, cfg, out))
    except UsageError as e:   # a worker could not run, or Ray could not be reached
        print(f"loadgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = out / ("worker-*" if a.workers > 1 or a.ray else "") / "records.jsonl"
        print(f"\nloadgen: interrupted; finished requests are in {where}", file=sys.stderr)
        return 130
    if not a.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    print(format_summary(summary))
    return exit_code(summary)
