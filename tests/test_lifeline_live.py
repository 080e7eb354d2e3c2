"""kvgate killed hard (SIGKILL: what the OOM killer, a CI runner's timeout and `kubectl delete
--grace-period=0` send) leaves no process behind: not vLLM's API server, engine core or workers,
not the loadgen processes it started, not its own guard. Every process is tracked by the test
itself, by pid and start time, from the moment it appears under the killed process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import Validate, tiny_profile_file

ROOT = Path(__file__).resolve().parents[1]
GONE_WITHIN_S = 2.0


class TreeWatch:
    """Every descendant of `pid` (at any depth, and the process groups they lead), polled every
    20 ms in a thread until stopped: what a SIGKILL of `pid` would orphan."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seen: dict[tuple[int, float], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            try:
                procs = psutil.Process(self.pid).children(recursive=True)
            except psutil.Error:
                continue
            leaders = {p.pid for p in procs}
            for p in psutil.process_iter():
                try:
                    if os.getpgid(p.pid) in leaders:
                        procs.append(p)
                except (OSError, psutil.Error):
                    pass
            for p in procs:
                try:  # the engine renames itself (VLLM::EngineCore) after it starts: keep the latest
                    key, cmd = (p.pid, p.create_time()), " ".join(p.cmdline())
                    name = f"[{p.name()}] "
                except psutil.Error:
                    continue
                if cmd.strip():  # an exiting process shows an empty command line: keep what was seen
                    self.seen[key] = name + cmd
                else:
                    self.seen.setdefault(key, name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def alive(self) -> list[str]:
        out = []
        for (pid, created), name in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{pid} {name}")
            except psutil.Error:
                pass
        return out

    def kill_all(self) -> None:
        for pid, created in self.seen:
            try:
                p = psutil.Process(pid)
                if p.create_time() == created:
                    p.kill()
            except psutil.Error:
                pass


def _survivors_after_sigkill(proc: subprocess.Popen, watch: TreeWatch) -> list[str]:
    time.sleep(0.2)  # the watch has seen the tree as it is now
    proc.kill()
    proc.wait(timeout=10)
    time.sleep(GONE_WITHIN_S)
    watch.stop()
    left = watch.alive()
    watch.kill_all()  # never leave them for the next test, whatever the assertion says
    return left


# (moment, the progress line that marks it); the kill follows the line at once
MOMENTS = [
    ("starting", "starting vLLM (pid"),
    ("loading", "vLLM: loading"),
    ("cold run", "run cold: near-limit"),
    ("between runs", "run cold: 8/8 ok"),
    ("judging", "judging the runs"),
]


@pytest.mark.process_tree
@pytest.mark.vllm
@pytest.mark.parametrize("moment,line", MOMENTS, ids=[m for m, _ in MOMENTS])
def test_validate_killed_at_any_moment_leaves_no_vllm_process(moment, line, tiny_model, tmp_path):
    f = tiny_profile_file(tiny_model, tmp_path, workload__waves=2)
    v = Validate(["--profile", str(f), "--out", str(tmp_path / "run")])
    watch = TreeWatch(v.p.pid)
    v.until(line, timeout=240)
    left = _survivors_after_sigkill(v.p, watch)
    seen = " ".join(watch.seen.values())
    assert "vllm.entrypoints.openai.api_server" in seen, seen  # the server was started and tracked
    if moment in ("cold run", "between runs"):
        assert "[VLLM::EngineCor" in seen and "[VLLM::Worker]" in seen, seen
    assert not left, f"alive {GONE_WITHIN_S:g} s after kvgate was killed ({moment}): {left}"


@pytest.mark.process_tree
@pytest.mark.vllm
def test_without_the_lifeline_a_killed_validate_leaves_vllm_running(tiny_model, tmp_path):
    """The check above can fail: with the mechanism switched off, the same kill leaves the server."""
    f = tiny_profile_file(tiny_model, tmp_path, workload__waves=2)
    v = Validate(["--profile", str(f), "--out", str(tmp_path / "run")], env={**os.environ, "KVGATE_LIFELINE": "off"})
    watch = TreeWatch(v.p.pid)
    v.until("run cold: near-limit", timeout=240)
    left = _survivors_after_sigkill(v.p, watch)
    assert any("[VLLM::EngineCor" in x for x in left) and any("api_server" in x for x in left), left


@pytest.mark.vllm
def test_validate_killed_during_the_latency_run_leaves_no_loadgen(tiny_model, tmp_path):
    f = tiny_profile_file(tiny_model, tmp_path, workload__workers=2, workload__waves=2)
    v = Validate(["--profile", str(f), "--out", str(tmp_path / "run")])
    watch = TreeWatch(v.p.pid)
    v.until("run latency:", timeout=300)
    time.sleep(3.5)  # the loadgen workers are running their shards
    left = _survivors_after_sigkill(v.p, watch)
    seen = " ".join(watch.seen.values())
    assert seen.count("--worker-shard") >= 2 or seen.count("-m loadgen") >= 2, seen
    assert not left, left


@pytest.mark.parametrize("lifeline", ["on", "off"])
def test_loadgen_workers_die_with_their_parent(lifeline, stub_url, tmp_path):
    """`loadgen --workers 2` SIGKILLed mid-run: its two workers are gone 2 s later (and, with the
    mechanism off, still running: the check can fail)."""
    env = {**os.environ, "KVGATE_LIFELINE": lifeline}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--url",
            stub_url,
            "--model",
            "m",
            "--workers",
            "2",
            "--concurrency",
            "4",
            "--requests",
            "100000",
            "--output-tokens",
            "200",
            "--out",
            str(tmp_path / "lg"),
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watch = TreeWatch(p.pid)
    deadline = time.monotonic() + 30
    while sum("--worker-shard" in n for n in watch.seen.values()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3.5)  # past the workers' common start: they are sending
    left = _survivors_after_sigkill(p, watch)
    assert sum("--worker-shard" in n for n in watch.seen.values()) == 2
    if lifeline == "on":
        assert not left, left
    else:
        assert len(left) == 2, left
