"""`loadgen`: streaming load against any OpenAI-compatible server on this machine.

Writes OUT/records.jsonl (one line per finished request, as it finishes) and
OUT/summary.json, and prints the summary. Exit 0 done, 1 some requests failed,
2 bad input, 3 the server could not be reached at all, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import math
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import numpy as np

from loadgen import __version__, benchjson
from loadgen.client import OpenAIStream, connector
from loadgen.outputs import write_outputs
from loadgen.records import RecordWriter
from loadgen.runner import RunConfig, Runner, tokenize_lengths
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


def require_loopback(url: str) -> None:
    """Load goes only to this machine: every address the host resolves to must be loopback."""
    try:
        u = urlparse(url)
        port = u.port  # raises on a port out of range or not a number
    except ValueError as e:
        raise UsageError(f"--url: {url!r} is not a valid URL ({e}); write e.g. http://127.0.0.1:8000") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"--url: {url!r} is not an http(s) URL; write e.g. http://127.0.0.1:8000")
    try:
        infos = socket.getaddrinfo(u.hostname, port or 80, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise UsageError(f"--url: cannot resolve {u.hostname}: {e}") from None
    for info in infos:
        if not ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback:
            raise UsageError(f"--url: {u.hostname} is not a loopback address; load tests only target this "
                             "machine (127.0.0.0/8, ::1)")


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
    ap.add_argument("--workers", type=int, default=1,
                    help="processes, each with its own event loop and a shard of the schedule (records merged "
                         "exactly); closed loop: at most --concurrency")
    ap.add_argument("--ray", metavar="ADDRESS",
                    help="run the --workers shards as Ray actors on a running cluster: its head's HOST:PORT, or "
                         "auto (the cluster `ray start` started here); needs the ray extra")
    ap.add_argument("--worker-shard", help=argparse.SUPPRESS)  # set by --workers for each worker
    ap.add_argument("--worker-start", type=float, help=argparse.SUPPRESS)  # perf_counter instant to begin at
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
MAX_REQUESTS = 1_000_000          # prompts are built up front: split larger runs
MAX_PROMPT_TOKENS_IN_MEMORY = 200_000_000
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
    if a.requests is not None and a.requests > MAX_REQUESTS:
        raise UsageError(f"--requests: {a.requests} is over {MAX_REQUESTS:,} (prompts are built before the run); "
                         "split the run")


def make_workload(a):
    try:
        out = Lengths.parse(a.output_tokens, "--output-tokens")
        n = a.requests if a.requests is not None else (100 if a.duration is None else 1_000_000)
        if a.dataset:
            return from_dataset(a.dataset, default_output=out.sample(np.random.default_rng(a.seed)), limit=n)
        if a.chat:
            raise UsageError("--chat needs text prompts: use --dataset with text prompts")
        prompt = Lengths.parse(a.prompt_tokens, "--prompt-tokens")
        if n * prompt.max > MAX_PROMPT_TOKENS_IN_MEMORY:
            raise UsageError(f"--prompt-tokens: {n:,} prompts of up to {prompt.max:,} tokens would hold over "
                             f"{MAX_PROMPT_TOKENS_IN_MEMORY:,} token ids in memory; lower --requests or --prompt-tokens")
        if a.turns:
            if a.turns < 2:
                raise UsageError("--turns must be at least 2")
            convs = max(1, n // a.turns)
            return multi_turn(convs, a.turns, prompt, Lengths.parse(32, "user"), out.max, seed=a.seed, salt=a.salt)
        if a.prefix_groups or a.prefix_tokens:
            if not (a.prefix_groups and a.prefix_tokens):
                raise UsageError("--prefix-groups and --prefix-tokens go together")
            return shared_prefix(n, a.prefix_groups, a.prefix_tokens, prompt, out, seed=a.seed, salt=a.salt)
        return synthetic(n, prompt, out, seed=a.seed, salt=a.salt)
    except WorkloadError as e:
        raise UsageError(str(e)) from None


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


async def _main(a, workload, cfg: RunConfig, out: Path) -> dict:
    """Run; write records.jsonl and summary.json to out, and vllm bench's result JSON when asked."""
    key = os.environ.get(a.api_key_env) if a.api_key_env else None
    async with aiohttp.ClientSession(connector=connector()) as session:
        await tokenize_lengths(session, a.url, a.model, [s for s in workload.items if hasattr(s, "prompt")],
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
    require_loopback(a.url)
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
    cfg.check()
    if a.workers > 1 and cfg.concurrency is not None and cfg.concurrency < a.workers:
        raise UsageError(f"--workers: {a.workers} workers need at least as many requests in flight "
                         f"(--concurrency {cfg.concurrency})")
    if a.worker_shard:
        shard_config(cfg, *parse_shard(a.worker_shard))
    return a, workload, cfg


def main(argv: list[str] | None = None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    try:
        a, workload, cfg = prepare(argv)
    except (UsageError, ValueError) as e:
        print(f"loadgen: error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path("runs") / f"loadgen-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
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
