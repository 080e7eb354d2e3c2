"""Runs one of the measuring tools that import vLLM (tests/vllm_weights.py, tests/vllm_context.py)
in its own process and session, pinned to the test CPU: vLLM's engine and workers go with the
session whatever happens to the measurement. Returns the JSON line the tool prints."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

from tests.conftest import ROOT, TEST_CPU


def run_tool(module: str, *args: str, timeout: float = 300, ranks: int = 1, env: dict[str, str] | None = None) -> Any:
    """`ranks`: the TP size the tool starts vLLM with, one CPU each (the test CPU, then the other);
    `env`: vLLM settings the measurement is taken under."""
    cpus = [TEST_CPU] + [c for c in ("0", "1") if c != TEST_CPU][: ranks - 1]
    env = dict(os.environ, **(env or {}), VLLM_CPU_OMP_THREADS_BIND="|".join(cpus), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    line = next((x for x in out.splitlines() if x.startswith("{")), None)
    assert line is not None, err[-3000:]
    return json.loads(line)
