"""Faults real vLLM cannot be made to produce, injected by the loopback stub
(benchmarks/stub_server.py): every one becomes a per-request error or a flagged count, the run
goes on, and nothing raises."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import aiohttp
import pytest

from benchmarks.stub_server import Stub, serve
from loadgen.schedule.runner import RunConfig, Runner
from loadgen.schedule.workload import Lengths, synthetic
from loadgen.transport.client import OpenAIStream, connector


@contextlib.asynccontextmanager
async def serving(stub: Stub):
    """The stub served in this event loop for the block; yields its base URL."""
    ports = []
    task = asyncio.create_task(serve(stub, ready=ports.append))
    while not ports:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{ports[0]}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def run_against(fault: str, every: int = 1, n: int = 6, read_timeout: float = 5.0, output: int = 8):
    stub = Stub(fault=fault, fault_every=every, itl_ms=1.0)
    async with serving(stub) as url, aiohttp.ClientSession() as s:
        t = OpenAIStream(s, url, "stub", read_timeout=read_timeout, request_timeout=read_timeout * 2)
        w = synthetic(n, Lengths.parse(16, "p"), Lengths.parse(output, "o"), seed=1)
        res = await Runner(t).run(w, RunConfig(concurrency=2, max_requests=n))
    return sorted(res.records, key=lambda r: int(r.id[1:]))


@pytest.mark.parametrize(
    "fault,expect",
    [
        ("5xx", "HTTP 503"),
        ("malformed", "malformed SSE data"),
        ("error-event", "server error event: stub: injected error"),
        ("cut", ("stream cut", "stream ended early")),
    ],
)
async def test_faults_become_request_errors(fault, expect):
    recs = await run_against(fault, every=2)
    bad = [r for r in recs if not r.ok]
    good = [r for r in recs if r.ok]
    assert len(bad) == 3 and len(good) == 3  # every 2nd request faulted, the others went through
    for r in bad:
        assert r.error.startswith(expect), r.error


async def test_slow_headers_time_out_within_the_read_timeout():
    import time

    t0 = time.monotonic()
    recs = await run_against("slow-headers", every=3, n=3, read_timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert [r.error is None for r in recs] == [True, True, False]
    assert recs[2].error.startswith("timeout")


@pytest.mark.parametrize("fault,served", [("more-tokens", 10), ("fewer-tokens", 6)])
async def test_wrong_token_counts_are_flagged(fault, served):
    recs = await run_against(fault, every=1, n=2)
    for r in recs:
        assert r.ok and r.output_tokens == served
        assert r.token_mismatch == f"output asked 8 served {served}"


async def test_nothing_listening_is_a_request_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with aiohttp.ClientSession() as s:
        w = synthetic(2, Lengths.parse(16, "p"), Lengths.parse(4, "o"))
        res = await Runner(OpenAIStream(s, f"http://127.0.0.1:{port}", "stub")).run(
            w, RunConfig(concurrency=1, max_requests=2)
        )
    assert all(r.error and r.error.startswith("ClientConnectorError") for r in res.records)


async def test_a_request_the_server_read_is_never_sent_twice():
    """The server reads every 2nd request and drops the connection without an answer: the client
    records an error and does not send it again (a retry would double the load the run applies)."""
    stub = Stub(fault="drop", fault_every=2, itl_ms=1.0)
    ports = []
    task = asyncio.create_task(serve(stub, ready=ports.append))
    while not ports:
        await asyncio.sleep(0.01)
    try:
        async with aiohttp.ClientSession(connector=connector()) as s:
            t = OpenAIStream(s, f"http://127.0.0.1:{ports[0]}", "stub", read_timeout=5, request_timeout=10)
            w = synthetic(8, Lengths.parse(16, "p"), Lengths.parse(8, "o"), seed=1)
            res = await Runner(t).run(w, RunConfig(concurrency=1, max_requests=8))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len(stub.seen) == 8  # 8 requests reached it, no more
    assert sorted(stub.seen) == sorted(r.id for r in res.records)  # each id exactly once
    bad = [r for r in res.records if not r.ok]
    assert len(bad) == 4 and all("Disconnected" in r.error or "reset" in r.error.lower() for r in bad), [
        r.error for r in bad
    ]


async def test_bodies_are_encoded_before_the_run_and_sent_as_encoded(monkeypatch):
    """prepare() encodes bodies before the clock starts, within its memory budget; what it encoded is
    what is sent (a doctored body shows up as a prompt-token mismatch); the rest are encoded at send."""
    import json

    from loadgen.transport import client

    monkeypatch.setattr(client, "PREPARE_BYTES", 1)  # the budget is spent after the first body
    async with serving(Stub(itl_ms=0.0)) as url, aiohttp.ClientSession() as s:
        t = OpenAIStream(s, url, "stub")
        w = synthetic(4, Lengths.parse(16, "p"), Lengths.parse(4, "o"), seed=1)
        t.prepare(w.items)
        assert list(t.prepared) == ["r0"]
        assert json.loads(t.prepared["r0"][1]) == t.payload(w.items[0])[1]
        url_, body = t.prepared["r0"]
        doctored = json.loads(body)
        doctored["prompt"] = doctored["prompt"][:15]
        t.prepared["r0"] = (url_, json.dumps(doctored).encode())
        runner = Runner(t)
        runner.transport.prepare = lambda specs: None  # keep the doctored body
        res = await runner.run(w, RunConfig(concurrency=2, max_requests=4))
    recs = sorted(res.records, key=lambda r: int(r.id[1:]))
    assert all(r.ok for r in recs)
    assert recs[0].token_mismatch == "prompt asked 16 served 15"
    assert [r.token_mismatch for r in recs[1:]] == [None, None, None]
