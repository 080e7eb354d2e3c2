"""One shard of a run in one event loop: the workload built (after its memory is known to fit), the
run's bounds, and the run itself, writing records.jsonl and summary.json. A single process is the
one shard of its run; `--workers` processes and `--ray` actors each run one."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

from loadgen import net
from loadgen.dataset_options import DatasetName, DatasetOptions
from loadgen.loadrun import LoadRun, UsageError
from loadgen.results.outputs import progress_printer, write_outputs
from loadgen.results.records import RecordWriter
from loadgen.schedule import memory
from loadgen.schedule.runner import RunConfig, Runner
from loadgen.schedule.shards import shard_config
from loadgen.schedule.workload import (
    Conversation,
    Lengths,
    Workload,
    WorkloadError,
    multi_turn,
    shared_prefix,
    synthetic,
)
from loadgen.sources.entries import DatasetError
from loadgen.sources.read import Pending, read_dataset
from loadgen.sources.resolve import resolve
from loadgen.transport.client import PREPARE_BYTES, connector
from loadgen.transport.fast import close_transport, make_transport
from loadgen.transport.tokenize import ServerTokenizer

DURATION_MAX_REQUESTS = 10_000_000  # a run bounded by --duration only: at most this many (and what fits)
USER_TOKENS = 32  # new user tokens a turn in --turns conversations


def make_workload(run: LoadRun) -> tuple[Workload | Pending, int | None]:
    """The workload, after its memory is known to fit --max-memory (schedule/memory.py): nothing is
    built for a run that would not fit. A run bounded by --duration alone gets a count bound that
    fits: (workload, that bound, or None)."""
    try:
        out = Lengths.parse(run.output_tokens, "--output-tokens")
        budget = run.max_memory
        bound = None
        n = run.requests if run.requests is not None else (100 if run.duration is None else DURATION_MAX_REQUESTS)
        in_flight = (run.concurrency or 1) if run.rate is None else (run.max_concurrency or 4096)
        if run.dataset is not None and run.dataset.name is not DatasetName.PREFIX_REPETITION:
            return _dataset(run, run.dataset, out, n if run.requests is not None else None, in_flight), None
        if run.chat:
            raise UsageError("--chat needs text prompts: use --dataset with text prompts")
        prompt = Lengths.parse(run.prompt_tokens, "--prompt-tokens")
        if run.dataset is not None:  # prefix_repetition: vLLM's names for the shared-prefix workload
            d = run.dataset
            prompt, out = Lengths.parse(d.suffix_len, "suffix"), Lengths.parse(d.prefix_output_len, "output")
            run = replace(run, prefix_groups=d.num_prefixes, prefix_tokens=d.prefix_len)
        if (run.prefix_groups or run.prefix_tokens) and not (run.prefix_groups and run.prefix_tokens):
            raise UsageError("--prefix-groups and --prefix-tokens go together")
        shape = memory.Shape(
            requests=n,
            prompt_max=prompt.max + (run.prefix_tokens or 0) * (not run.turns),
            output_max=out.max,
            in_flight=in_flight,
            turns=run.turns or 0,
            user_max=USER_TOKENS if run.turns else 0,
            prefix_groups=(run.prefix_groups or 0) * (not run.turns),
            prefix_tokens=run.prefix_tokens or 0,
        )
        if run.requests is None and run.duration is not None:  # bounded by time: and by what fits
            n = min(n, memory.requests_within(budget, shape, PREPARE_BYTES))
            shape = replace(shape, requests=n)
            bound = n
        memory.check(shape, budget, PREPARE_BYTES)
        if run.turns:
            if run.turns < 2:
                raise UsageError("--turns must be at least 2")
            convs = max(1, n // run.turns)
            return multi_turn(
                convs, run.turns, prompt, Lengths.parse(USER_TOKENS, "user"), out.max, seed=run.seed, salt=run.salt
            ), bound
        if run.prefix_groups and run.prefix_tokens:
            return shared_prefix(
                n, run.prefix_groups, run.prefix_tokens, prompt, out, seed=run.seed, salt=run.salt
            ), bound
        return synthetic(n, prompt, out, seed=run.seed, salt=run.salt), bound
    except (WorkloadError, memory.BudgetError) as e:
        raise UsageError(str(e)) from None


def _dataset(run: LoadRun, d: DatasetOptions, out: Lengths, limit: int | None, in_flight: int) -> Workload | Pending:
    size = os.stat(d.path).st_size if d.path and os.path.isfile(d.path) else 0
    memory.check(
        memory.Shape(requests=limit or 1, prompt_max=0, output_max=out.max, in_flight=in_flight, dataset_bytes=size),
        run.max_memory,
        PREPARE_BYTES,
    )
    try:
        return read_dataset(d, limit=limit, salt=run.salt, chat=run.chat)
    except DatasetError as e:
        raise UsageError(str(e)) from None


def build(run: LoadRun) -> tuple[Workload | Pending, RunConfig]:
    """The workload and the runner's bounds of this run (of this shard, for a --workers shard)."""
    workload, bound = make_workload(run)
    cfg = RunConfig(
        concurrency=run.concurrency if run.rate is None else None,
        rate=run.rate,
        burstiness=run.burstiness,
        max_requests=run.requests,
        duration=run.duration,
        ramp_up=run.ramp_up,
        warmup=run.warmup,
        seed=run.seed,
        max_in_flight=run.max_concurrency if run.rate is not None and run.max_concurrency else 4096,
    )
    timed = isinstance(workload, Workload) and workload.times is not None
    if timed and cfg.rate is None and cfg.concurrency is None:  # a trace: at its own timestamps
        cfg.timed = True
        cfg.max_in_flight = run.max_concurrency or 4096
    elif cfg.rate is None and cfg.concurrency is None:
        cfg.concurrency = 1
    if cfg.max_requests is None and run.dataset is not None and run.dataset.name is not DatasetName.PREFIX_REPETITION:
        cfg.max_requests = len(workload.entries if isinstance(workload, Pending) else workload.items)
    if cfg.max_requests is None and cfg.duration is None:
        cfg.max_requests = 100
    if cfg.max_requests is None:  # a --duration run: the count bound that fits --max-memory
        cfg.max_requests = bound
    try:
        cfg.check()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if run.workers > 1 and cfg.concurrency is not None and cfg.concurrency < run.workers:
        raise UsageError(
            f"--workers: {run.workers} workers need at least as many requests in flight "
            f"(--concurrency {cfg.concurrency})"
        )
    if run.shard:
        shard_config(cfg, *run.shard)
    return workload, cfg


async def run_shard(run: LoadRun, workload: Workload | Pending, cfg: RunConfig, out: Path) -> dict:
    """Run; write records.jsonl and summary.json to out, and vllm bench's result JSON when asked."""
    key = os.environ.get(run.api_key_env) if run.api_key_env else None
    async with net.session(connector=connector(run.pin)) as session:
        if isinstance(workload, Pending):  # a dataset: every prompt's ids from the server's own tokenizer
            tok = ServerTokenizer(session, run.url, run.model, {"Authorization": f"Bearer {key}"} if key else None)
            workload, drops = await resolve(workload.entries, tok, workload.opts, workload.source)
            if not workload.items:
                raise UsageError(f"--dataset-path: no request is left to send ({drops.line()})")
            # every request of what is left (a conversation is one request a turn; --requests was applied when reading)
            cfg.max_requests = sum(len(x.user_turns) + 1 if isinstance(x, Conversation) else 1 for x in workload.items)
        transport = make_transport(
            run.transport,
            session,
            run.url,
            run.model,
            pin=run.pin,
            api_key=key,
            request_timeout=run.timeout,
            read_timeout=run.read_timeout,
        )
        try:
            with RecordWriter(out / "records.jsonl") as w:
                runner = Runner(transport, w, name="loadgen", progress=progress_printer(run.quiet))
                if run.worker_start is not None:  # --workers: every shard begins at the same instant
                    await asyncio.sleep(max(run.worker_start - time.perf_counter(), 0.0))
                result = await runner.run(workload, cfg)
        finally:
            await close_transport(transport)
    return write_outputs(
        run,
        cfg,
        result.records,
        result.started_at,
        result.ended_at,
        runner.t0,
        out,
        interrupted=result.interrupted,
        workload=result.workload,
    )
