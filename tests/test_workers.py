"""`loadgen --workers N`: N processes, one schedule, records merged exactly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.results.records import read_records
from loadgen.schedule.arrivals import arrival_times
from loadgen.schedule.runner import RunConfig, Runner
from loadgen.schedule.shards import share
from loadgen.schedule.workload import Lengths, synthetic

ROOT = Path(__file__).resolve().parents[1]


def loadgen(*args):
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_shards_together_are_the_one_schedule():
    w = synthetic(50, Lengths.parse(8, "p"), Lengths.parse(4, "o"), seed=3, salt="s")
    cfg = RunConfig(rate=20.0, burstiness=0.5, max_requests=50, seed=3)
    full = arrival_times(50, 20.0, 0.5, 0.0, 3)
    parts = []
    for i in range(3):
        items, times = Runner._schedule(w, RunConfig(**{**vars(cfg), "shard": (i, 3)}), 50)
        parts += list(zip((x.id for x in items), times))
    assert sorted(parts, key=lambda p: p[1]) == list(zip((x.id for x in w.items), full))
    assert [share(10, i, 3) for i in range(3)] == [4, 3, 3]


def assert_merged_exactly(out: Path, n: int = 60, output: int = 8):
    """Two workers' records merged: their sum, each id once, exact tokens, percentiles from all
    records at once (never averaged). Returns (merged records, summary)."""
    merged = read_records(out / "records.jsonl")
    parts = [read_records(out / f"worker-{i}" / "records.jsonl") for i in range(2)]
    assert len(merged) == sum(len(p) for p in parts) == n and [len(p) for p in parts] == [n // 2, n // 2]
    assert sorted(x.id for x in merged) == sorted(x.id for p in parts for x in p)  # each request once
    assert {x.worker for x in merged} == {0, 1}
    assert all(x.ok and x.token_mismatch is None and x.output_tokens == output for x in merged)  # exact tokens
    s = json.loads((out / "summary.json").read_text())
    ttft = np.asarray([x.ttft for x in merged]) * 1e3
    itl = np.asarray([g for x in merged for g in x.itl]) * 1e3
    assert s["ttft_ms"]["p99"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert s["itl_ms"]["p50"] == pytest.approx(float(np.percentile(itl, 50)))
    assert s["ok"] == n and s["workers"] == 2
    return merged, s


def test_two_workers_merge_exactly(stub_url, tmp_path):
    out = tmp_path / "lg"
    r = loadgen(
        "--url",
        stub_url,
        "--model",
        "M",
        "--requests",
        "60",
        "--concurrency",
        "6",
        "--workers",
        "2",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "8",
        "--seed",
        "5",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    merged, s = assert_merged_exactly(out)
    assert s["clocks"]["wall_minus_monotonic_spread_s"] < 0.05
    assert s["clocks"]["unreadable_lines"] == []
    # one clock: every merged send time falls inside the run
    assert all(0 <= x.sent <= s["window"][1] - s["window"][0] + 1 for x in merged)


def test_open_loop_workers_send_the_whole_arrival_process(stub_url, tmp_path):
    out = tmp_path / "lg"
    r = loadgen(
        "--url",
        stub_url,
        "--model",
        "M",
        "--requests",
        "40",
        "--rate",
        "200",
        "--workers",
        "2",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "4",
        "--seed",
        "7",
        "--out",
        str(out),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    merged = read_records(out / "records.jsonl")
    full = arrival_times(40, 200.0, 1.0, 0.0, 7)
    assert sorted(x.scheduled for x in merged) == pytest.approx(sorted(full), abs=0.05)


def test_workers_need_enough_concurrency(tmp_path):
    r = loadgen(
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "M",
        "--concurrency",
        "1",
        "--workers",
        "2",
        "--out",
        str(tmp_path / "x"),
    )
    assert r.returncode == 2 and "--workers" in r.stderr


def test_a_line_a_worker_wrote_that_cannot_be_read_is_named_in_the_merge(tmp_path):
    from loadgen.results.merge import merge
    from loadgen.results.records import RequestRecord

    for i in range(2):
        d = tmp_path / f"worker-{i}"
        d.mkdir()
        good = json.dumps(RequestRecord(id=f"r{i}", sent=0.0).to_json())
        (d / "records.jsonl").write_text(good + "\n" + ("{broken\n" + good + "\n" if i else ""))
        (d / "summary.json").write_text(
            json.dumps({"clock_origin_perf_counter": 10.0 + i, "window": [100.0 + i, 101.0 + i]})
        )
    records, started, ended, origin, clocks = merge([tmp_path / "worker-0", tmp_path / "worker-1"])
    assert len(records) == 3 and (started, ended, origin) == (100.0, 102.0, 10.0)
    assert clocks["unreadable_lines"] == ["records.jsonl line 2: JSONDecodeError"]
    assert sorted(r.sent for r in records) == [0.0, 1.0, 1.0]  # worker 1's clock started 1 s later


def test_validates_latency_run_is_the_workload_loadgen_rebuilds_from_its_flags():
    """validate hands the latency run to `loadgen --workers` as flags; loadgen must rebuild exactly the
    prompts validate saved (the tokens_exact check compares the served counts with them)."""
    from loadgen.main import prepare
    from loadgen.schedule.workload import flags_of
    from validator.errors import InputError
    from validator.observe.schedule import latency_run

    spec = latency_run(n=4, mml=512, margin=0, out=32, waves=6, seed=3, workers=2)
    w = spec.workload
    _, rebuilt, cfg = prepare(
        [
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "M",
            "--concurrency",
            "4",
            *flags_of(w),
        ]
    )
    assert [(x.id, x.prompt.tolist(), x.output_tokens) for x in rebuilt.items] == [
        (x.id, x.prompt.tolist(), x.output_tokens) for x in w.items
    ]
    assert len(w.items) == 24 and all(len(x.prompt) == 480 for x in w.items) and spec.workers == 2
    with pytest.raises(InputError, match="workload.workers"):
        latency_run(n=4, mml=512, margin=0, out=32, waves=6, seed=3, workers=5)
