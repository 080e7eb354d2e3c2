"""Faults around a real run: a frozen server, a port in use, nothing at --url, owned flags in
extra_args, and stub faults through the whole `validate` job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Validate, run_validate, tiny_profile_file

ROOT = Path(__file__).resolve().parents[1]


tiny_profile = tiny_profile_file
validate = run_validate


@pytest.mark.process_tree
@pytest.mark.vllm
def test_frozen_server_ends_the_run_within_its_deadline(tiny_model, tmp_path):
    f = tiny_profile(tiny_model, tmp_path, observe__read_timeout_s=3, observe__run_timeout_s=60)
    out = tmp_path / "run"
    v = Validate(["--profile", str(f), "--out", str(out)])
    pid = v.until("run probe:")
    os.kill(pid, signal.SIGSTOP)  # frozen: the process exists but answers nothing
    t0 = time.monotonic()
    code, _, rest = v.finish(timeout=120)
    assert code == 3, rest
    assert time.monotonic() - t0 < 45
    assert "vLLM died during the probe run" in rest
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "error"
    probe = {r["name"]: r for r in rep["runs"]}["probe"]
    assert probe["interrupted"] and probe["client"]["failed"] >= 1
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= v.watch.names()  # the check below covers them
    assert not v.watch.survivors()


def test_port_in_use_and_nothing_at_url(tiny_model, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        f = tiny_profile(tiny_model, tmp_path, vllm__port=port)
        r = validate("--launch-only", "--profile", str(f), "--out", str(tmp_path / "a"))
        assert r.returncode == 3 and "already in use" in r.stderr
    r = validate("--profile", str(f), "--url", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "b"))
    assert r.returncode == 3 and f"cannot read http://127.0.0.1:{port}/metrics" in r.stderr
    assert "Traceback" not in r.stderr
    r = validate("--profile", str(f), "--url", "http://10.1.2.3:8000", "--out", str(tmp_path / "c"))
    assert r.returncode == 2 and "not a loopback address" in r.stderr


def test_extra_args_may_not_override_the_plan(tiny_model, tmp_path):
    for bad in (["--max-model-len", "99999"], ["--port=1"], ["--num-gpu-blocks-override", "9"]):
        f = tiny_profile(tiny_model, tmp_path, vllm__extra_args=bad)
        r = validate("--launch-only", "--profile", str(f), "--out", str(tmp_path / "x"))
        assert r.returncode == 2 and "vllm.extra_args" in r.stderr and bad[0].split("=")[0] in r.stderr


@pytest.fixture
def stub(request):
    fault, every = request.param
    p = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stub_server.py"),
            "--port",
            "0",
            "--fault",
            fault,
            "--fault-every",
            str(every),
            "--itl-ms",
            "1",
            "--max-seconds",
            "120",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    port = int(p.stdout.readline().split()[-1])
    yield f"http://127.0.0.1:{port}"
    p.terminate()
    p.wait(timeout=10)


@pytest.mark.parametrize("stub", [("5xx", 4)], indirect=True)
def test_faults_through_validate_fail_clearly_beyond_the_error_budget(stub, tiny_model, tmp_path):
    f = tiny_profile(tiny_model, tmp_path, model__served_name="stub")
    r = validate("--profile", str(f), "--url", stub, "--out", str(tmp_path / "run"), "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    failed = {c["name"] for c in rep["checks"] if c["passed"] is False}
    assert {"cold.error_rate", "warm.error_rate", "slo.error_rate"} <= failed
    assert all(n.endswith("error_rate") for n in failed), failed
    # the server exports only some metrics: those checks are "not measured", never 0
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["cold.kv_samples_bound"]["status"] == "not_measured"
    assert checks["cold.kv_samples_bound"]["observed"] is None
    assert checks["cold.prefix_hits"]["observed"] is None
    assert {r_["name"]: r_["isolation"] for r_ in rep["runs"]}["cold"] == "salt"  # no /reset_prefix_cache
    # the stub cannot be paused: the freezes are not measured, and say why
    assert checks["cold.freeze1.kv_blocks"]["status"] == "not_measured"
    assert "POST /pause" in checks["cold.freeze1.kv_blocks"]["explanation"]
    assert checks["warm.freezes"]["status"] == "not_measured"
    # within a budget that allows it, the same faults no longer fail; but a server that gives no
    # KV readings can never pass: the verdict is inconclusive (exit 1), naming what is missing
    f = tiny_profile(tiny_model, tmp_path, model__served_name="stub", slo__error_rate=0.5)
    r = validate("--profile", str(f), "--url", stub, "--out", str(tmp_path / "run2"), "--json")
    assert r.returncode == 1, r.stdout[-2000:]
    rep = json.loads(r.stdout)
    assert rep["verdict"] == "inconclusive" and rep["counts"]["failed"] == 0
    assert "cold.kv_samples_bound" in rep["not_measured"]


@pytest.mark.parametrize("stub", [("none", 1)], indirect=True)
def test_a_password_in_the_url_is_never_shown_and_the_run_files_are_private(stub, tiny_model, tmp_path):
    """Issue 21, findings 7 and 8: `--url http://user:password@...` works, and the password is in no
    run file, console line or report; run files are 0600, directories 0700."""
    import stat

    f = tiny_profile(tiny_model, tmp_path, model__served_name="stub")
    r = validate(
        "--profile", str(f), "--url", stub.replace("http://", "http://alice:s3cret-pw@"), "--out", str(tmp_path / "run")
    )
    assert r.returncode == 1, r.stderr[-2000:]  # the stub gives no KV readings: inconclusive, never pass
    assert (
        "s3cret-pw" not in r.stdout + r.stderr
        and "<redacted>@127.0.0.1" in (tmp_path / "run" / "startup.json").read_text()
    )
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        assert "s3cret-pw" not in p.read_text(errors="replace"), p
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert stat.S_IMODE((tmp_path / "run" / "runs").stat().st_mode) == 0o700


@pytest.mark.parametrize("stub", [("more-tokens", 3)], indirect=True)
def test_wrong_token_counts_through_validate(stub, tiny_model, tmp_path):
    f = tiny_profile(tiny_model, tmp_path, model__served_name="stub")
    r = validate("--profile", str(f), "--url", stub, "--out", str(tmp_path / "run"), "--json")
    assert r.returncode == 1
    failed = {c["name"] for c in json.loads(r.stdout)["checks"] if c["passed"] is False}
    assert "cold.tokens_exact" in failed and "warm.tokens_exact" in failed


@pytest.mark.vllm
@pytest.mark.parametrize(
    "phase,sig,code,workers",
    [
        ("run warm:", signal.SIGINT, 130, 1),
        ("run probe:", signal.SIGTERM, 143, 1),
        ("run latency:", signal.SIGINT, 130, 2),
    ],
)
@pytest.mark.process_tree
def test_interrupted_during_load_keeps_a_partial_report(phase, sig, code, workers, tiny_model, tmp_path):
    """The last case interrupts the run sent by `loadgen --workers 2`: none of its processes stays."""
    import psutil

    f = tiny_profile(tiny_model, tmp_path, workload__workers=workers)
    out = tmp_path / "run"
    v = Validate(["--profile", str(f), "--out", str(out)])
    v.until(phase)
    os.kill(v.p.pid, sig)
    got, _, rest = v.finish(timeout=120)
    assert got == code, rest
    assert "Traceback" not in rest
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= v.watch.names()
    assert not v.watch.survivors()
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "error" and rep["error"].startswith("interrupted")
    assert {r["name"] for r in rep["runs"]} >= {"cold"}
    assert (out / "runs" / "cold" / "records.jsonl").stat().st_size > 0
    if workers > 1:
        assert (out / "runs" / "latency" / "loadgen.log").exists()  # loadgen had been started
        left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
        assert not left, left


def test_sigterm_during_the_runs_cancels_them_and_then_raises_terminated():
    """While the runs' event loop turns, SIGTERM cancels the main task (no exception raised into
    whichever task happens to run: that task would die with it unretrieved and lose its own tasks,
    seen once in CI as "Task exception was never retrieved"); Terminated comes after the cleanup,
    and kvgate's own handler is back for the judging and the teardown."""
    import asyncio
    import threading

    from validator.serve.launch import Terminated, install_signal_handlers, run_loop

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    install_signal_handlers()
    ours = signal.getsignal(signal.SIGTERM)
    seen = []

    async def runs():
        seen.append(signal.getsignal(signal.SIGTERM) is ours)  # a raising handler is not armed in the loop
        try:
            while True:
                await asyncio.sleep(0.01)
        except BaseException as e:
            seen.append(type(e).__name__)
            raise

    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
    try:
        with pytest.raises(Terminated, match="SIGTERM"):
            run_loop(runs())
        assert seen == [False, "CancelledError"]
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        for s, h in before.items():
            signal.signal(s, h)
