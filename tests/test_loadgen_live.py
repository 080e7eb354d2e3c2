"""The load generator against real vLLM (CPU): exact token counts, closed-loop concurrency seen by
the server, prefix-cache hits only when a workload repeats with the same salt."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import aiohttp
import pytest

from loadgen.client import OpenAIStream
from loadgen.runner import RunConfig, Runner
from loadgen.workload import Lengths, shared_prefix, synthetic
from validator.scrape import Sampler, parse_metrics

pytestmark = pytest.mark.vllm


async def counters(session, url):
    async with session.get(url + "/metrics") as r:
        return parse_metrics(await r.text(), with_histograms=False).values


async def settled(session, url, before, sent_prompt_tokens, timeout=15.0):
    """Counters lag the responses: wait until prompt_tokens has grown by what was sent."""
    deadline = time.monotonic() + timeout
    while True:
        now = await counters(session, url)
        if now["prompt_tokens"] - before["prompt_tokens"] >= sent_prompt_tokens or time.monotonic() > deadline:
            return now
        await asyncio.sleep(0.1)


async def run_once(server, workload, cfg, sampler_interval=None):
    async with aiohttp.ClientSession() as session:
        before = await counters(session, server.url)
        sampler = None
        if sampler_interval:
            sampler = Sampler(session, server.url, interval=sampler_interval)
            sampler.start()
        runner = Runner(OpenAIStream(session, server.url, "tiny"), name="t")
        result = await runner.run(workload, cfg)
        if sampler:
            await sampler.stop()
        sent = sum(r.prompt_tokens or 0 for r in result.records)
        after = await settled(session, server.url, before, sent)
        return result, before, after, sampler


async def reset_prefix_cache(server):
    async with aiohttp.ClientSession() as s:
        async with s.post(server.url + "/reset_prefix_cache") as r:
            assert r.status == 200


async def test_asked_and_served_token_counts_are_equal(tiny_server):
    w = synthetic(24, Lengths.parse("uniform:100:400", "p"), Lengths.parse("uniform:16:64", "o"), seed=3)
    result, before, after, _ = await run_once(tiny_server, w, RunConfig(concurrency=4, max_requests=24))
    recs = result.records
    assert len(recs) == 24 and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    for r, spec in zip(sorted(recs, key=lambda r: int(r.id[1:])), w.items):
        assert r.prompt_tokens == spec.prompt_tokens == len(spec.prompt)
        assert r.output_tokens == spec.output_tokens
        assert r.token_mismatch is None
        assert len(r.chunk_times) <= r.output_tokens  # one event per token or fewer
    assert after["generation_tokens"] - before["generation_tokens"] == sum(s.output_tokens for s in w.items)


async def test_closed_loop_concurrency_is_seen_by_the_server(tiny_server):
    # long decodes (600 tokens, seconds on this CPU) so the sampler sees the plateau despite stalls
    w = synthetic(8, Lengths.parse(100, "p"), Lengths.parse(600, "o"), seed=4)
    result, *_ , sampler = await run_once(tiny_server, w, RunConfig(concurrency=4, max_requests=8),
                                          sampler_interval=0.1)
    running = [s.values["num_requests_running"] for s in sampler.samples]
    assert max(running) == 4, running
    assert all(r.ok for r in result.records)


async def test_shared_prefix_hits_only_when_the_workload_repeats(tiny_server):
    await reset_prefix_cache(tiny_server)
    def workload(salt):
        # 4 groups, one request each: no sharing inside the run
        return shared_prefix(4, groups=4, prefix_tokens=256, suffix=Lengths.parse(128, "s"),
                             output=Lengths.parse(8, "o"), seed=5, salt=salt)
    cfg = RunConfig(concurrency=4, max_requests=4)
    hits = []
    for salt in ("same", "same", "other"):
        result, before, after, _ = await run_once(tiny_server, workload(salt), cfg)
        assert all(r.ok for r in result.records)
        assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == 4 * 384
        hits.append(after["prefix_cache_hits"] - before["prefix_cache_hits"])
    # second run: every full block but the last token's, 4 x floor(383 / 32) x 32 = 1408 (DESIGN.md §3)
    assert hits == [0, 1408, 0]


def test_loadgen_cli_against_vllm(tiny_server, tmp_path):
    r = subprocess.run([sys.executable, "-m", "loadgen",
                        "--url", tiny_server.url, "--model", "tiny", "--concurrency", "2", "--requests", "6",
                        "--prompt-tokens", "64", "--output-tokens", "16", "--warmup", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["requests"], summary["ok"], summary["warmup_requests"]) == (4, 4, 2)
    assert summary["output_tokens"] == 4 * 16
    assert "TTFT" in r.stdout
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 6
