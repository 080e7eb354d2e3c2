"""One loadgen run as the command line asked for it, typed (cli.py builds it; nothing else reads
argparse): the server, the load, the workload, the bounds, the scale-out, the result files."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.dataset_options import DatasetOptions
from loadgen.net import Pin


class UsageError(ValueError):
    """Bad input: one line naming the flag and the fix (exit 2)."""


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    """`vllm bench serve`'s result JSON: whether to write it, where, with what."""

    save: bool = False
    detailed: bool = False
    result_dir: str | None = None
    filename: str | None = None
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    percentiles: tuple[float, ...] = (99.0,)
    goodput: dict[str, float] | None = None
    metadata: dict[str, str] | None = None
    max_concurrency: int | None = None  # as vllm bench serve's --max-concurrency names it


@dataclass(frozen=True, kw_only=True)
class LoadRun:
    argv: tuple[str, ...]  # as given: each shard's command line is built from it
    url: str
    pin: Pin  # the URL's loopback addresses, resolved once
    model: str
    chat: bool = False
    concurrency: int | None = None  # closed loop
    rate: float | None = None  # open loop, requests per second
    burstiness: float = 1.0
    max_concurrency: int | None = None  # the open loop's cap
    requests: int | None = None
    duration: float | None = None
    ramp_up: float = 0.0
    warmup: int = 0
    seed: int = 0
    salt: str | None = None
    prompt_tokens: str = "256"
    output_tokens: str = "128"
    prefix_groups: int | None = None
    prefix_tokens: int | None = None
    turns: int | None = None
    dataset: DatasetOptions | None = None  # None: synthetic prompts
    api_key_env: str | None = None
    timeout: float = 300.0
    read_timeout: float = 60.0
    transport: str = "fast"  # loadgen.transport.fast.TRANSPORTS
    event_loop: str = "auto"  # loadgen.eventloop.LOOPS
    out: str | None = None
    quiet: bool = False
    max_memory: int = 1 << 30
    workers: int = 1
    ray: str | None = None
    shard: tuple[int, int] | None = None  # this process is shard i of k
    worker_start: float | None = None  # perf_counter instant at which a shard begins
    lifeline: bool = False
    bench: BenchResult = BenchResult()

    @property
    def scaled_out(self) -> bool:
        return self.workers > 1 or self.ray is not None
