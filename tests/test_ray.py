"""`loadgen --ray`: the shards as Ray actors on a Ray cluster the test starts on this machine.

The load goes to the loopback stub only. Ray's own servers listen on the node's address (Ray 2.60
maps a loopback node address to the machine's; its token authentication is on by default): this
test starts the cluster itself, and stops every process of it at the end."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadgen.results.merge import merge
from loadgen.results.records import RequestRecord, read_records
from tests.test_workers import assert_merged_exactly

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A Ray head with 2 CPUs, started for this module; yields its HOST:PORT."""
    port = _free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    log = tmp_path_factory.mktemp("ray") / "head.log"
    with open(log, "w") as f:
        head = subprocess.Popen(
            [
                str(RAY),
                "start",
                "--head",
                "--block",
                "--port",
                str(port),
                "--num-cpus",
                "2",
                "--include-dashboard",
                "false",
                "--object-store-memory",
                str(100 * 2**20),
                "--ray-client-server-port",
                str(_free_port()),
                "--dashboard-agent-listen-port",
                str(_free_port()),
                "--disable-usage-stats",
            ],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        for p in [psutil.Process(head.pid), *psutil.Process(head.pid).children(recursive=True)]:
            seen[p.pid] = p
        head.terminate()
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
        _, alive = psutil.wait_procs(list(seen.values()), timeout=20)
        for p in alive:
            p.kill()
        assert not alive, f"Ray processes outlived the head: {[p.pid for p in alive]}"


def loadgen(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )


def test_two_ray_actors_merge_exactly(ray_head, stub_url, tmp_path):
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
        "--ray",
        ray_head,
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
    assert r.returncode == 0, r.stderr[-3000:]
    merged, s = assert_merged_exactly(out)
    c = s["clocks"]
    assert len(c["hosts"]) == 2 and c["unreadable_lines"] == []
    # one machine: the true offset between the actors' clocks and the driver's is 0, so each measured
    # offset must lie within its own uncertainty (the half round trip)
    assert all(abs(o) <= u + 1e-4 for o, u in zip(c["offsets_s"], c["offset_uncertainty_s"])), c
    assert all(u < 0.05 for u in c["offset_uncertainty_s"])
    # the shards started together: both workers' first sends within 0.5 s on the merged clock
    firsts = [min(x.sent for x in merged if x.worker == i) for i in range(2)]
    assert max(firsts) - min(firsts) < 0.5, firsts


def test_an_absent_cluster_is_a_clear_error_at_once(tmp_path):
    t = time.monotonic()
    r = loadgen(
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "M",
        "--workers",
        "2",
        "--concurrency",
        "2",
        "--ray",
        f"127.0.0.1:{_free_port()}",
        "--out",
        str(tmp_path / "x"),
        timeout=60,
    )
    assert r.returncode == 2 and "--ray" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert time.monotonic() - t < 30  # Ray's own join would retry for minutes


def test_wall_clock_offsets_place_each_worker(tmp_path):
    """Two workers whose wall clocks differ by 5 s (measured offsets 0 and 5): the merge puts their
    sends side by side; without the offsets they would sit 5 s apart."""
    for i in range(2):
        d = tmp_path / f"worker-{i}"
        d.mkdir()
        (d / "records.jsonl").write_text(json.dumps(RequestRecord(id=f"r{i}", sent=0.25).to_json()) + "\n")
        # both started at the same instant; worker 1's wall clock reads 5 s ahead, its monotonic clock
        # (another machine) has nothing in common with worker 0's
        (d / "summary.json").write_text(
            json.dumps({"clock_origin_perf_counter": [50.0, 7000.0][i], "window": [1000.0 + 5 * i, 1010.0 + 5 * i]})
        )
    dirs = [tmp_path / "worker-0", tmp_path / "worker-1"]
    records, started, ended, _, clocks = merge(dirs, offsets=[0.0, 5.0])
    assert [r.sent for r in records] == [0.25, 0.25] and (started, ended) == (1000.0, 1010.0)
    assert clocks["offset_spread_s"] == 5.0
    records, started, ended, _, _ = merge(dirs, offsets=[0.0, 0.0])  # offsets not applied: 5 s apart
    assert sorted(r.sent for r in records) == [0.25, 5.25] and ended == 1015.0


def _wait_for_requests(url: str, n: int, deadline: float) -> None:
    """Until the stub has streamed the tokens of n requests of 8 output tokens (its /metrics)."""
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
    while time.monotonic() < deadline:
        with direct.open(url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        made = next(float(x.split()[-1]) for x in text.splitlines() if x.startswith("vllm:generation_tokens_total"))
        if made >= 8 * n:
            return
        time.sleep(0.2)
    raise AssertionError(f"the stub saw fewer than {n} requests before the deadline")


def test_ctrl_c_stops_the_actors_and_keeps_what_they_recorded(ray_head, stub_url, tmp_path):
    import signal

    out = tmp_path / "lg"
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from loadgen.main import main; sys.exit(main())"
    )  # Ctrl-C as a terminal delivers it
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "--url",
            stub_url,
            "--model",
            "M",
            "--requests",
            "100000",
            "--concurrency",
            "4",
            "--workers",
            "2",
            "--ray",
            ray_head,
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "8",
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    # Ctrl-C once both shards are sending: the actors' start-up takes 3 s on an idle machine and
    # more than 10 s beside a vLLM test, so wait on the stub's own count rather than a clock
    _wait_for_requests(stub_url, 200, deadline=time.monotonic() + 100)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=90)[1]
    assert p.returncode == 130, err[-2000:]
    counts = [len(read_records(out / f"worker-{i}" / "records.jsonl")) for i in range(2)]
    assert all(0 < n < 50000 for n in counts), counts  # each kept its finished requests, and stopped
    time.sleep(1)
    actors = [x for x in psutil.process_iter(["name", "cmdline"]) if "LoadWorker" in " ".join(x.info["cmdline"] or [])]
    assert not actors, [x.pid for x in actors]  # the actors were killed with the run
