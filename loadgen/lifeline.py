"""Processes that die with the process that started them, however it dies (SIGKILL included).

Two mechanisms, both cheap:

- Linux: the child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``), set
  between fork and exec, so it holds from the child's first instruction.
- Any POSIX system: a lifeline pipe. The parent keeps the write end and never writes; the child
  (or a guard watching it) reads the other end. When the parent dies, the kernel closes its end
  and the reader sees end-of-file.

kvgate uses both for `loadgen` processes, and a guard (validator/serve/guard.py) for vLLM, whose
engine core and workers are grandchildren that the kernel would not signal.

``KVGATE_LIFELINE=off`` turns both off: for the tests that show what happens without them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1


def enabled() -> bool:
    return os.environ.get("KVGATE_LIFELINE", "on") != "off"


def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # resolved now: nothing may be looked up between fork and exec


def die_with_parent_preexec():
    """A ``preexec_fn`` for subprocess.Popen: the child is killed when this process dies (Linux;
    None elsewhere or when switched off). Only a system call runs between fork and exec."""
    if _PRCTL is None or not enabled():
        return None
    parent, prctl, kill = os.getpid(), _PRCTL, signal.SIGKILL

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was made: nobody to follow
            os._exit(1)

    return preexec


def watch_stdin() -> None:
    """In a child started with a lifeline on its stdin: kill this process when the pipe reaches
    end-of-file (the parent is gone). What the process finished is on disk already (records are
    written and flushed one by one)."""
    if not enabled():
        return

    def wait() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="lifeline", daemon=True).start()
