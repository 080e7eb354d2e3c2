"""The guard: ends a vLLM server's processes when kvgate dies, however kvgate dies.

vLLM's API server starts an engine core, which starts its workers (and a resource tracker); killed
alone, the API server leaves them running, holding the GPU and the port (measured on vLLM 0.32:
all three still there 11 s after a SIGKILL of the API server). The kernel's parent-death signal
reaches only a direct child, so the launcher also starts this small process beside the server:

    python -m validator.serve.guard PID      (stdin: the lifeline pipe; kvgate holds the write end)

It learns the server's process tree every 0.1 s (a process that leaves the group is still known by
pid and start time) and, when the lifeline reaches end-of-file, SIGKILLs the server's process group
and every process it learned. kvgate's own teardown (TERM, grace, KILL) runs first on every normal
path and then closes the lifeline, so the guard only ever finds what an abrupt death left.
"""

from __future__ import annotations

import os
import select
import signal
import sys

import psutil

POLL_S = 0.1


def _learn(pid: int, known: dict[int, float]) -> None:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            known.setdefault(p.pid, p.create_time())
        except psutil.Error:
            continue


def _same(pid: int, created: float) -> psutil.Process | None:
    """The process still running under that pid, and the same one (not a reused pid)."""
    try:
        p = psutil.Process(pid)
        return p if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def end_all(pid: int, known: dict[int, float]) -> None:
    alive = [p for p in (_same(q, t) for q, t in known.items()) if p is not None]
    in_group = False
    for p in alive:
        try:
            in_group = in_group or os.getpgid(p.pid) == pid
        except OSError:
            pass
    if in_group:  # the group still exists and is the server's: every member, known or not
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def main(argv: list[str]) -> int:
    pid = int(argv[0])
    known: dict[int, float] = {}
    while True:
        _learn(pid, known)
        ready, _, _ = select.select([0], [], [], POLL_S)
        if ready:
            try:
                data = os.read(0, 64)
            except OSError:
                data = b""
            if not data:
                break
    _learn(pid, known)
    end_all(pid, known)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is kvgate's to handle
    sys.exit(main(sys.argv[1:]))
