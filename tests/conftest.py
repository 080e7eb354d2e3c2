"""Shared fixtures: tiny models built once per session into models/ (cached across runs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"


@pytest.fixture(scope="session")
def tiny_model():
    """tiny_model(name) -> path of a built tiny checkpoint."""
    from validator.tinymodels import ensure_tiny_model

    def get(name: str) -> Path:
        return ensure_tiny_model(name, MODELS / name)
    return get


def alive_pids(pids) -> list[int]:
    out = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                out.append(p)
        except OSError:
            pass
    return out


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains text (orphan detection)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and alive_pids([int(d)]):
            out.append(int(d))
    return out


@pytest.fixture(scope="session")
def tiny_server(tiny_model, tmp_path_factory):
    """One real vLLM for the load tests: tiny GQA model, 64 usable blocks of 32, prefix caching on,
    the prefix cache resettable (dev mode). Yields the Server."""
    from validator.launch import LaunchSpec, Server

    spec = LaunchSpec(model=str(tiny_model("tiny-gqa")), served_name="tiny",
                      vllm_args=["--block-size", "32", "--max-model-len", "1024", "--max-num-seqs", "8",
                                 "--max-num-batched-tokens", "2048", "--num-gpu-blocks-override", "65"],
                      env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
                      extra_args=["--enforce-eager"], startup_timeout_s=300,
                      nice=10, cpus="0")  # as profiles/tiny-cpu.yaml: vLLM's busy loops must not starve the client
    server = Server(spec, tmp_path_factory.mktemp("tiny-server"))
    with server:
        server.wait_ready()
        yield server


def run_validate(*args, timeout=600, env=None):
    """`validate ...` as a user runs it: a subprocess from the repo root."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "validator", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def validate_until(args: list[str], phase: str, timeout: float = 180):
    """Start `validate`, read its progress until a line containing `phase`; return (process, vLLM pid)."""
    import subprocess
    import sys
    import time
    p = subprocess.Popen([sys.executable, "-m", "validator", *args], cwd=ROOT, stderr=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    pid, deadline = None, time.monotonic() + timeout
    for line in p.stderr:
        if "starting vLLM (pid" in line:
            pid = int(line.split("(pid ")[1].split(")")[0])
        if phase in line or time.monotonic() > deadline:
            break
    assert pid is not None, "vLLM was not started"
    return p, pid


def tiny_profile_file(tiny_model, tmp_path, **changes):
    """profiles/tiny-cpu.yaml with the model path made absolute and `section__field=value` changes."""
    import yaml
    prof = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    prof["model"]["path"] = str(tiny_model("tiny-gqa"))
    for dotted, v in changes.items():
        sec, key = dotted.split("__")
        prof.setdefault(sec, {})[key] = v
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(prof))
    return f


@pytest.fixture(autouse=True)
def _quiet_gc(request):
    """Live tests time streams in this process: freeze what earlier tests left on the heap (the
    fuzzers leave much), so a full collection cannot stall the event loop mid-run."""
    if request.node.get_closest_marker("vllm"):
        import gc
        gc.collect()
        gc.freeze()
    yield
