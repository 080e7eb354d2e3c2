"""Child processes besides vLLM itself: the process-tree helpers the launcher tears servers down
with, the guard that ends a server if kvgate dies (guard.py), and the loadgen processes a run is sent
by. Part of the launcher: nothing outside serve/ starts or stops a process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from loadgen.lifeline import die_with_parent_preexec
from loadgen.lifeline import enabled as lifeline_enabled
from loadgen.safefile import open_append

LIVE: set = set()  # Servers and LoadProcesses, stopped at interpreter exit at the latest


def tree(pid: int) -> list[psutil.Process]:
    """The process and its descendants at any depth (children that left the group too)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def group(pgid: int) -> list[psutil.Process]:
    """Every process in the group (children whose parent already died are reparented, not regrouped)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (OSError, psutil.Error):
            continue
    return out


def name_of(p: psutil.Process) -> str:
    try:
        return p.name()
    except psutil.Error:
        return ""


def running(procs) -> list[psutil.Process]:
    """Those still running and not zombies (a zombie holds no resources)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def start_guard(pid: int) -> subprocess.Popen | None:
    """The guard of a server's processes (validator/serve/guard.py): its stdin is the lifeline, whose
    write end only this process holds (pipes are not inherited), so it reads end-of-file exactly when
    kvgate closes it or dies."""
    if not lifeline_enabled():
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "validator.serve.guard", str(pid)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def stop_guard(guard: subprocess.Popen | None) -> None:
    """Close the lifeline: the guard sweeps whatever the teardown left (nothing, normally) and exits."""
    if guard is None:
        return
    with contextlib.suppress(OSError):
        if guard.stdin is not None:
            guard.stdin.close()
    try:
        guard.wait(timeout=10)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait()


class LoadProcess:
    """A `loadgen` run kvgate starts for a run's load (`--workers N`: it starts its N processes in
    its own process group). Ctrl-C semantics on stop: each worker keeps what it recorded."""

    # SIGINT as a terminal delivers it, even when kvgate inherited it ignored (a background CI job)
    _MAIN = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from loadgen.main import main; sys.exit(main())"
    )

    def __init__(self, args: list[str], log: Path):
        with open_append(log) as f:
            # it and its workers die with kvgate: the kernel's parent-death signal (Linux) and a
            # lifeline on its stdin (loadgen --lifeline; any POSIX system)
            self.proc = subprocess.Popen(
                [sys.executable, "-c", self._MAIN, *args, "--lifeline"],
                stdin=subprocess.PIPE,
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent_preexec(),
            )
        LIVE.add(self)

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self, grace: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # it passes the interrupt to its workers
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of the group is left
        except ProcessLookupError:
            pass
        self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        LIVE.discard(self)
