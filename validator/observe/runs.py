"""Executing the runs against a live server: load, samples, freezes, counters settled, and a
watchdog that ends everything the moment a server kvgate started dies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import aiohttp

from loadgen import net
from loadgen.net import Pin
from loadgen.transport.client import connector
from loadgen.transport.fast import close_transport, make_transport
from validator.observe.onerun import FreezeState, ServerDied, one_run
from validator.observe.schedule import RunSpec
from validator.observe.scrape import Sampler
from validator.rundir.rundata import RunData


async def execute(
    specs: list[RunSpec],
    base_url: str,
    model: str,
    run_dir: Path,
    profile,
    say,
    api_key: str | None = None,
    alive=None,
    pin: Pin | None = None,
    more: Callable[[list[RunData]], list[RunSpec]] | None = None,
    memory: Callable[[], float | None] | None = None,
) -> list[RunData]:
    """Run the specs in order, then what `more` asks for after them (given every run so far; a sweep's
    bisection), until it asks for nothing. With `alive` (a server kvgate started), a watchdog polls it every
    0.1 s and cancels the runs the moment the process is gone: ServerDied within a fraction of a
    second, whatever the runs were doing (waiting on a request, a freeze, the counters)."""
    current: list[str] = ["start"]
    if alive is None:
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin, more, memory)
    died: list[bool] = []
    runs = asyncio.current_task()
    assert runs is not None  # called from a task (run_loop)

    async def watch() -> None:
        while alive():
            await asyncio.sleep(0.1)
        died.append(True)
        runs.cancel()  # the runs' own cleanup keeps what was recorded

    # the runs stay in this task, so an interrupt (Terminated, Ctrl-C) propagates as before
    watchdog = asyncio.ensure_future(watch())
    try:
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin, more, memory)
    except asyncio.CancelledError:
        if died:
            raise ServerDied(current[0]) from None
        raise
    finally:
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)  # collects an interrupt raised in it too


async def _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin, more, memory) -> list[RunData]:
    out: list[RunData] = []
    timeout = aiohttp.ClientTimeout(total=profile.observe.read_timeout_s + 5)
    # no ambient proxy, no redirect, only the addresses the loopback rule checked (loadgen.net)
    async with net.session(pin, timeout=timeout) as scrape_s, net.session(connector=connector(pin)) as load_s:
        sampler = Sampler(
            scrape_s,
            base_url,
            run_dir / "metrics.jsonl",
            interval=profile.observe.scrape_interval_s,
            timeout=profile.observe.read_timeout_s,
            memory=memory,
        )
        transport = make_transport(
            profile.observe.transport,
            load_s,
            base_url,
            model,
            pin=pin,
            api_key=api_key,
            request_timeout=profile.observe.request_timeout_s,
            read_timeout=profile.observe.read_timeout_s,
            token_counts=True,
        )
        freeze = FreezeState(profile.observe.freezes)
        # what a run sent by loadgen processes shares with the in-process transport
        load_args = [
            "--url",
            net.pinned_url(base_url, pin) if pin else base_url,
            "--model",
            model,
            "--timeout",
            str(profile.observe.request_timeout_s),
            "--read-timeout",
            str(profile.observe.read_timeout_s),
            "--transport",
            profile.observe.transport,
        ]
        if api_key:
            load_args += ["--api-key-env", profile.vllm.api_key_env]
        try:
            todo = list(specs)
            while todo:
                spec = todo.pop(0)
                current[0] = spec.name
                data = await one_run(
                    spec,
                    transport,
                    sampler,
                    base_url,
                    run_dir,
                    scrape_s,
                    say,
                    profile.observe.run_timeout_s,
                    freeze,
                    load_args,
                )
                out.append(data)
                if data.interrupted:
                    break
                if not todo and more is not None:
                    todo = more(out)
        finally:
            await close_transport(transport)
            await sampler.stop()
            sampler.close()
    return out
