"""Arrivals: closed-loop concurrency or open-loop rate, bounded by count and time.

The runner hands back records and the run's wall-clock window, so the metrics
side can line server samples up with client requests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from loadgen.results.records import RecordWriter, RequestRecord, prompt_digest
from loadgen.schedule.arrivals import arrival_times
from loadgen.schedule.workload import Conversation, Workload
from loadgen.transport.client import RequestSpec, Transport

MAX_DURATION_S = 24 * 3600.0  # every loop is bounded in time, whatever the caller asks


@dataclass
class RunConfig:
    concurrency: int | None = None  # closed loop: this many requests in flight
    rate: float | None = None  # open loop: requests per second
    burstiness: float = 1.0  # gamma shape of inter-arrival times; 1 = Poisson
    max_requests: int | None = None
    duration: float | None = None  # seconds during which new requests start
    ramp_up: float = 0.0  # seconds to reach full concurrency / rate
    warmup: int = 0  # first N requests are marked and left out of statistics
    drain_timeout: float = 120.0  # after `duration`, how long in-flight requests may finish
    max_in_flight: int = 4096  # open-loop ceiling
    seed: int = 0
    shard: tuple[int, int] | None = None  # (i, k): this process sends items i, i+k, ... of the whole schedule
    timed: bool = False  # open loop at the workload's own start times (a trace's timestamps)

    def check(self) -> None:
        if self.timed:
            if self.concurrency is not None or self.rate is not None:
                raise ValueError("a timed trace is replayed at its timestamps: no --concurrency or --rate")
        elif (self.concurrency is None) == (self.rate is None):
            raise ValueError("give exactly one of --concurrency and --rate")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        if self.rate is not None and not self.rate > 0:
            raise ValueError("--rate must be above 0")
        if not self.burstiness > 0:
            raise ValueError("--burstiness must be above 0")
        if self.max_requests is None and self.duration is None:
            raise ValueError("bound the run: give --requests or --duration")
        if self.duration is not None and not 0 < self.duration <= MAX_DURATION_S:
            raise ValueError(f"--duration must be in (0, {MAX_DURATION_S:g}] seconds")


@dataclass
class RunResult:
    name: str
    records: list[RequestRecord]
    started_at: float  # wall clock (time.time) at the run's start
    ended_at: float
    interrupted: bool = False
    workload: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    @property
    def window(self) -> tuple[float, float]:
        return self.started_at, self.ended_at


def _done(sem: asyncio.Semaphore, tasks: set[asyncio.Task[None]], task: asyncio.Task[None]) -> None:
    """An open-loop request ended: its place in flight is free again."""
    sem.release()
    tasks.discard(task)


class Runner:
    def __init__(
        self,
        transport: Transport,
        writer: RecordWriter | None = None,
        name: str = "run",
        progress: Callable[[dict], None] | None = None,
        progress_every: float = 1.0,
    ):
        self.transport = transport
        self.writer = writer
        self.name = name
        self.progress = progress
        self.progress_every = progress_every
        self.records: list[RequestRecord] = []
        self.issued = 0
        self.in_flight = 0
        self.live: dict[str, RequestRecord] = {}  # requests in flight, filled as tokens arrive
        self._stop_at = float("inf")
        self._gate = asyncio.Event()  # closed: no new request is sent (an observer holds it)
        self._gate.set()

    def hold(self) -> None:
        """Send no new request until release(): an observer wants a still set of requests."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    async def run(self, workload: Workload, cfg: RunConfig) -> RunResult:
        cfg.check()
        self.cfg = cfg
        limit = cfg.max_requests if cfg.max_requests is not None else 1 << 62
        mine, times = self._schedule(workload, cfg, limit)
        self.transport.prepare(mine)  # before the clock starts
        self.t0 = time.perf_counter()
        started = time.time()
        duration = min(cfg.duration or MAX_DURATION_S, MAX_DURATION_S)
        self._stop_at = self.t0 + duration
        self.limit = len(mine) if cfg.shard else limit
        ticker = asyncio.create_task(self._tick()) if self.progress else None
        tasks: set[asyncio.Task[None]] = set()
        interrupted = False
        try:
            if cfg.concurrency is not None:
                items = iter(mine)
                tasks |= {asyncio.create_task(self._worker(k, items)) for k in range(cfg.concurrency)}
                await self._wait(tasks, duration + cfg.drain_timeout)
            else:
                await self._open_loop(mine, times or [], cfg, tasks, duration)
        except asyncio.CancelledError:
            interrupted = True
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            if ticker:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
                self._report()
        return RunResult(
            self.name,
            self.records,
            started,
            time.time(),
            interrupted,
            workload={
                "description": workload.description,
                "salt": workload.salt,
                "seed": workload.seed,
                **workload.info,
            },
            config={k: v for k, v in vars(cfg).items()},
        )

    async def _wait(self, tasks: set, timeout: float) -> None:
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for t in done:
            if t.exception() is not None and not isinstance(t.exception(), asyncio.CancelledError):
                raise t.exception()

    def _can_issue(self) -> bool:
        return self.issued < self.limit and time.perf_counter() < self._stop_at

    async def _worker(self, k: int, items) -> None:
        if self.cfg.ramp_up > 0 and self.cfg.concurrency:
            await asyncio.sleep(self.cfg.ramp_up * k / self.cfg.concurrency)
        while self._can_issue():
            item = next(items, None)
            if item is None:
                return
            await self._execute(item, None)

    @staticmethod
    def _schedule(workload: Workload, cfg: RunConfig, limit: int) -> tuple[Sequence[Any], list[float] | None]:
        """The items this runner sends and, open loop, when: with a shard (i, k), items i, i+k, ...
        of the whole schedule and their arrival times in it, so k processes together send exactly
        the arrival process one would."""
        n = min(len(workload.items), limit)
        if cfg.timed:
            if workload.times is None:
                raise ValueError("this workload has no start times: give --concurrency or --rate")
            times: list[float] | None = workload.times[:n]
        else:
            times = arrival_times(n, cfg.rate, cfg.burstiness, cfg.ramp_up, cfg.seed) if cfg.rate else None
        if cfg.shard is None:
            return workload.items, times
        i, k = cfg.shard
        return workload.items[:n][i::k], (times[i::k] if times is not None else None)

    async def _open_loop(
        self, items: Sequence[Any], times: list[float], cfg: RunConfig, tasks: set[asyncio.Task[None]], duration: float
    ) -> None:
        sem = asyncio.Semaphore(cfg.max_in_flight)
        for item, at in zip(items, times):
            if at > duration or not self._can_issue():
                break
            # never before its time: uvloop's timers keep milliseconds and may wake up to 1 ms early
            while (delay := self.t0 + at - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            await sem.acquire()
            task = asyncio.create_task(self._execute(item, at))
            tasks.add(task)
            task.add_done_callback(partial(_done, sem, tasks))
        if tasks:
            await self._wait(set(tasks), max(self._stop_at - time.perf_counter(), 0) + cfg.drain_timeout)

    async def _execute(self, item, scheduled: float | None) -> None:
        if isinstance(item, Conversation):
            await self._conversation(item, scheduled)
        else:
            await self._one(item, scheduled)

    async def _one(self, spec: RequestSpec, scheduled: float | None) -> tuple[RequestRecord, list[int] | None]:
        while not self._gate.is_set():  # a release wakes us, but a hold may close the gate again first
            await self._gate.wait()
        self.issued += 1
        warm = self.issued <= self.cfg.warmup
        rec = RequestRecord(
            id=spec.id,
            run=self.name,
            asked_prompt_tokens=spec.prompt_tokens,
            asked_output_tokens=spec.output_tokens,
            warmup=warm or spec.warmup,
            group=spec.group,
            turn=spec.turn,
            prompt_digest=prompt_digest(spec.prompt, spec.token_ids),
        )
        rec.scheduled = scheduled if scheduled is not None else time.perf_counter() - self.t0
        self.in_flight += 1
        self.live[spec.id] = rec
        try:
            ids = await self.transport.send(spec, rec, self.t0)
        finally:
            self.in_flight -= 1
            self.live.pop(spec.id, None)
            self.records.append(rec)
            if self.writer:
                self.writer.write(rec)
        return rec, ids

    async def _conversation(self, conv: Conversation, scheduled: float | None) -> None:
        prompt = conv.first_prompt
        turns = len(conv.user_turns) + 1
        for t in range(turns):
            if not self._can_issue():
                return
            spec = RequestSpec(
                id=f"{conv.id}t{t}",
                prompt=prompt,
                prompt_tokens=len(prompt),
                output_tokens=conv.output_tokens,
                group=conv.group,
                turn=t,
                want_token_ids=t < turns - 1,
            )
            rec, ids = await self._one(spec, scheduled if t == 0 else None)
            if not rec.ok:
                return
            if not ids or len(ids) != conv.output_tokens:
                # the server did not return token ids: keep the length, lose the exact reuse
                ids = prompt[(np.arange(conv.output_tokens) * 7) % len(prompt)]
            if t < turns - 1:
                prompt = np.concatenate([prompt, np.asarray(ids, dtype=np.int32), conv.user_turns[t]])

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.progress_every)
            self._report()

    def _report(self) -> None:
        if self.progress is None:
            return
        done = len(self.records)
        ok = sum(1 for r in self.records if r.ok)
        self.progress(
            {
                "run": self.name,
                "elapsed": time.perf_counter() - self.t0,
                "done": done,
                "ok": ok,
                "errors": done - ok,
                "in_flight": self.in_flight,
                "tokens": sum(len(r.chunk_times) for r in self.records),
            }
        )
