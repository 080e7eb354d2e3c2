"""`loadgen`'s command line: argparse only. The flags (loadgen's own and `vllm bench serve`'s, which
describe the same run) are checked and turned into one typed LoadRun (loadrun.py); nothing past
this module reads the argparse Namespace.

Exit codes (loadgen/main.py): 0 done, 1 some requests failed, 2 bad input, 3 the server could not
be reached at all, 130 interrupted.
"""

from __future__ import annotations

import argparse
import math
from typing import NoReturn

from loadgen import __version__, net
from loadgen.cli_datasets import add_dataset_flags, dataset_options
from loadgen.eventloop import LOOPS
from loadgen.loadrun import BenchResult, LoadRun, UsageError
from loadgen.results import benchjson
from loadgen.schedule import memory
from loadgen.schedule.shards import parse_shard
from loadgen.transport.fast import TRANSPORTS

DESCRIPTION = "Streaming load against any OpenAI-compatible server on this machine."


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"loadgen: error: {message} (see loadgen --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="loadgen",
        description=DESCRIPTION,
        epilog="`vllm bench serve`'s flag names are accepted with their meanings (docs/loadgen.md).",
    )
    ap.add_argument("--version", action="version", version=f"loadgen (kvgate) {__version__}")
    ap.add_argument(
        "--url",
        "--base-url",
        dest="url",
        required=True,
        help="server base URL, e.g. http://127.0.0.1:8000 (loopback only)",
    )
    ap.add_argument(
        "--endpoint",
        default="/v1/completions",
        choices=["/v1/completions", "/v1/chat/completions"],
        help="API path (vllm bench serve's name); /v1/chat/completions is --chat",
    )
    ap.add_argument("--model", required=True, help="model name the server answers to")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=int, help="closed loop: requests in flight (default 1)")
    mode.add_argument("--rate", type=float, help="open loop: requests per second")
    ap.add_argument(
        "--max-concurrency",
        type=int,
        help="requests in flight at most (vllm bench serve): alone, a closed loop; with "
        "--request-rate, the cap of the open loop",
    )
    ap.add_argument(
        "--request-rate", type=float, help="requests per second (vllm bench serve); inf (its default) sends all at once"
    )
    ap.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of arrivals; 1 = Poisson")
    ap.add_argument(
        "--requests",
        "--num-prompts",
        dest="requests",
        type=int,
        help="how many requests (default 100 unless --duration)",
    )
    ap.add_argument("--duration", type=float, help="seconds during which requests start")
    ap.add_argument("--ramp-up", type=float, default=0.0, help="seconds to reach full concurrency or rate")
    ap.add_argument("--warmup", type=int, default=0, help="first N requests left out of the statistics")
    ap.add_argument(
        "--num-warmups",
        type=int,
        default=0,
        help="warm-up requests sent first and left out (vllm bench serve): added to --num-prompts",
    )
    ap.add_argument("--prompt-tokens", default="256", help="N, uniform:LO:HI or normal:MEAN:STD[:LO:HI]")
    ap.add_argument("--output-tokens", default="128", help="as --prompt-tokens; served exactly (ignore_eos)")
    ap.add_argument("--random-input-len", type=int, help="prompt tokens (vllm bench serve); see --random-range-ratio")
    ap.add_argument("--random-output-len", type=int, help="output tokens (vllm bench serve), served exactly")
    ap.add_argument(
        "--random-range-ratio",
        type=float,
        default=0.0,
        help="lengths uniform in [N x (1 - r), N x (1 + r)] (vllm bench serve; default 0: fixed)",
    )
    ap.add_argument("--prefix-groups", type=int, help="shared-prefix workload: number of prefixes")
    ap.add_argument("--prefix-tokens", type=int, help="shared-prefix length (the run salt included)")
    ap.add_argument("--turns", type=int, help="multi-turn: turns per conversation (prompt grows with history)")
    ap.add_argument("--dataset", help="replay a JSONL file of {prompt, output_tokens} (= --dataset-name custom)")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions (text prompts)")
    ap.add_argument("--seed", type=int, default=0, help="random seed of prompts and arrivals")
    ap.add_argument("--salt", help="run salt (default: random, so a repeated run does not hit the prefix cache)")
    ap.add_argument("--api-key-env", help="environment variable holding the API key")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per request in all")
    ap.add_argument("--read-timeout", type=float, default=60.0, help="seconds without a byte before a request fails")
    ap.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="fast",
        help="fast: pooled plain sockets, a request stamped when its bytes are written (http); aiohttp: the "
        "aiohttp client (https always uses it)",
    )
    ap.add_argument(
        "--event-loop",
        choices=LOOPS,
        default="auto",
        help="auto: uvloop when installed, else asyncio's own loop",
    )
    ap.add_argument("--out", help="directory for records.jsonl and summary.json (default: runs/loadgen-<time>)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")
    ap.add_argument(
        "--max-memory",
        default="1GiB",
        help="memory the run may hold (records, prompts in flight, encoded bodies; docs/loadgen.md): "
        "a run that would hold more is refused before it starts (default 1GiB)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes, each with its own event loop and a shard of the schedule (records merged "
        "exactly); closed loop: at most --concurrency",
    )
    ap.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the --workers shards as Ray actors on a running cluster: its head's HOST:PORT, or "
        "auto (the cluster `ray start` started here); needs the ray extra",
    )
    ap.add_argument("--worker-shard", help=argparse.SUPPRESS)  # set by --workers for each worker
    ap.add_argument("--worker-start", type=float, help=argparse.SUPPRESS)  # perf_counter instant to begin at
    # stdin is a lifeline from the process that started this one: end when it reads end-of-file
    ap.add_argument("--lifeline", action="store_true", help=argparse.SUPPRESS)
    add_dataset_flags(ap)
    bench = ap.add_argument_group("results in vllm bench serve's format")
    bench.add_argument("--save-result", action="store_true", help="write vllm bench serve's result JSON")
    bench.add_argument(
        "--save-detailed",
        action="store_true",
        help="add input_lens, output_lens, ttfts, itls (seconds) and errors to it",
    )
    bench.add_argument("--result-dir", help="directory of the result JSON (default: the current one)")
    bench.add_argument(
        "--result-filename",
        help="its name (default: {backend}-{rate}qps[-concurrencyN]-{model}-{date}.json, as vLLM names it)",
    )
    bench.add_argument(
        "--percentile-metrics",
        default="ttft,tpot,itl",
        help="which of ttft,tpot,itl,e2el get mean/median/std/percentiles (default ttft,tpot,itl)",
    )
    bench.add_argument("--metric-percentiles", default="99", help="comma-separated percentiles (default 99)")
    bench.add_argument(
        "--goodput", nargs="+", metavar="KEY:VALUE", help="SLOs in ms for request_goodput, KEY one of ttft, tpot, e2el"
    )
    bench.add_argument("--metadata", nargs="+", metavar="KEY=VALUE", help="extra keys written into the result JSON")
    return ap


# numeric flags and the smallest value each takes (the largest: what a run can bound in time)
_MINIMUM = {
    "requests": 1,
    "warmup": 0,
    "prefix_groups": 1,
    "prefix_tokens": 1,
    "turns": 2,
    "concurrency": 1,
    "max_concurrency": 1,
    "num_warmups": 0,
    "random_input_len": 1,
    "random_output_len": 1,
    "workers": 1,
}
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
    if a.request_rate is not None and not (
        a.request_rate > 0 and (math.isinf(a.request_rate) or a.request_rate <= 10**9)
    ):
        raise UsageError(f"--request-rate: {a.request_rate} is out of range; give requests per second above 0, or inf")
    if not (math.isfinite(a.random_range_ratio) and 0 <= a.random_range_ratio < 1):
        raise UsageError(f"--random-range-ratio: {a.random_range_ratio} is out of range; give a number in [0, 1)")
    if not (math.isfinite(a.ramp_up) and 0 <= a.ramp_up <= 10**9):
        raise UsageError(f"--ramp-up: {a.ramp_up} is out of range; give seconds from 0")
    if a.seed < 0:  # numpy's generators take none below 0 (any size above: no upper bound here)
        raise UsageError(f"--seed: {a.seed} is out of range; give a whole number from 0")
    if a.requests is not None and a.warmup >= a.requests:
        raise UsageError(f"--warmup: {a.warmup} would leave none of the {a.requests} requests measured")


def _ranged(n: int, ratio: float) -> str:
    """vllm bench serve's random lengths: uniform in [N x (1 - r), N x (1 + r)]."""
    if not ratio:
        return str(n)
    return f"uniform:{max(int(n * (1 - ratio)), 1)}:{max(int(n * (1 + ratio)), 1)}"


def apply_bench_flags(a) -> None:
    """`vllm bench serve`'s flags onto loadgen's own: the two vocabularies describe the same run."""
    if a.endpoint == "/v1/chat/completions":
        a.chat = True
    if a.random_input_len is not None:
        a.prompt_tokens = _ranged(a.random_input_len, a.random_range_ratio)
    if a.random_output_len is not None:
        a.output_tokens = _ranged(a.random_output_len, a.random_range_ratio)
    if a.max_concurrency is not None and a.concurrency is not None and a.max_concurrency != a.concurrency:
        raise UsageError(f"--max-concurrency {a.max_concurrency} and --concurrency {a.concurrency} disagree; give one")
    if a.request_rate is not None and a.rate is not None:
        raise UsageError("--request-rate and --rate are the same thing; give one")
    if a.request_rate is not None and math.isfinite(a.request_rate):
        if a.concurrency is not None:
            raise UsageError("--request-rate with --concurrency: use --max-concurrency to cap an open loop")
        a.rate = a.request_rate
    if a.rate is None and a.concurrency is None:
        if a.max_concurrency is not None:
            a.concurrency = a.max_concurrency
        elif a.request_rate is not None:  # inf: every request at once, as vllm bench serve sends them
            a.concurrency = a.requests if a.requests is not None else 100
    if a.num_warmups:
        a.requests = (a.requests if a.requests is not None else 100) + a.num_warmups
        a.warmup += a.num_warmups


def parse(argv: list[str]) -> LoadRun:
    """The command line checked and typed. Raises UsageError (one line naming the flag)."""
    a = build_parser().parse_args(argv)
    try:
        pin = net.pin(a.url)  # the loopback rule: resolved once, the run connects to what was checked
    except net.NotLoopback as e:
        raise UsageError(str(e)) from None
    check_ranges(a)  # the flags as given: the error names what the user wrote
    apply_bench_flags(a)
    try:
        bench = BenchResult(
            save=a.save_result,
            detailed=a.save_detailed,
            result_dir=a.result_dir,
            filename=a.result_filename,
            percentile_metrics=benchjson.parse_percentile_metrics(a.percentile_metrics),
            percentiles=benchjson.parse_percentiles(a.metric_percentiles),
            goodput=benchjson.parse_goodput(a.goodput),
            metadata=benchjson.parse_metadata(a.metadata),
            max_concurrency=a.max_concurrency,
        )
        budget = memory.parse_size(a.max_memory)
        shard = parse_shard(a.worker_shard) if a.worker_shard else None
        data = dataset_options(a)
    except (benchjson.BenchArgError, memory.BudgetError, ValueError) as e:
        raise UsageError(str(e)) from None
    check_ranges(a)  # again: --num-warmups has added to --requests and --warmup
    return LoadRun(
        argv=tuple(argv),
        url=a.url,
        pin=pin,
        model=a.model,
        chat=a.chat,
        concurrency=a.concurrency,
        rate=a.rate,
        burstiness=a.burstiness,
        max_concurrency=a.max_concurrency,
        requests=a.requests,
        duration=a.duration,
        ramp_up=a.ramp_up,
        warmup=a.warmup,
        seed=a.seed,
        salt=a.salt,
        prompt_tokens=a.prompt_tokens,
        output_tokens=a.output_tokens,
        prefix_groups=a.prefix_groups,
        prefix_tokens=a.prefix_tokens,
        turns=a.turns,
        dataset=data,
        api_key_env=a.api_key_env,
        timeout=a.timeout,
        read_timeout=a.read_timeout,
        transport=a.transport,
        event_loop=a.event_loop,
        out=a.out,
        quiet=a.quiet,
        max_memory=budget,
        workers=a.workers,
        ray=a.ray or None,
        shard=shard,
        worker_start=a.worker_start,
        lifeline=a.lifeline,
        bench=bench,
    )
