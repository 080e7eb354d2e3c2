"""`--ray ADDRESS|auto`: the `--workers` shards as Ray actors, across the machines of a cluster.

Each actor runs one shard exactly as a `--workers` process does (same workload, same schedule split,
its own event loop) and sends back its records.jsonl and summary.json, which the driver writes to
OUT/worker-I/ and merges exactly. Machines do not share a monotonic clock, so each worker keeps its
own monotonic times and the merge places them with one wall-clock offset per worker, measured from
the driver by round trip before the run (the half round trip is how far the offset can be wrong).
Latencies (TTFT, ITL, E2E) are differences on one worker's clock and do not depend on it.

The loopback rule holds on every node: each actor checks --url where it runs, so a remote worker
reaches the engine only through something that makes it local there (e.g. `ssh -L`).
kvgate joins a cluster; it never starts one (Ray's own servers listen on the node's address).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import socket
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.loadrun import UsageError
from loadgen.results.outputs import exit_code
from loadgen.safefile import make_dirs, write_atomic
from loadgen.scale import START_AFTER_S

CLOCK_PINGS = 5  # round trips per worker; the shortest gives the offset
STOP_GRACE_S = 30.0  # after a stop: time for the shards to write what they recorded


class RayError(Exception):
    """Ray missing or unreachable: the message names --ray and the fix."""


class LoadWorker:
    """A Ray actor (wrapped with ray.remote at run time, so loadgen imports without Ray)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._stopped = threading.Event()

    def clock(self) -> float:
        return time.time()

    def where(self) -> str:
        return socket.gethostname()

    def stop(self) -> None:
        """Ctrl-C at the driver: end the shard as an interrupt ends a process (records kept)."""
        self._stopped.set()
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    def run(self, args: list[str], start_wall: float) -> dict:
        """One shard; start_wall is the start instant on this worker's wall clock."""
        from loadgen import cli, shard

        err = io.StringIO()
        with tempfile.TemporaryDirectory(prefix="kvgate-ray-") as d:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    run = cli.parse([*args, "--out", d])
                    workload, cfg = shard.build(run)
                except UsageError as e:
                    return {"code": 2, "stderr": f"loadgen: error: {e}", "files": {}}
                except SystemExit as e:  # argparse: its message went to stderr
                    return {"code": e.code if isinstance(e.code, int) else 2, "stderr": err.getvalue(), "files": {}}
                run = replace(run, worker_start=start_wall - time.time() + time.perf_counter())
                code = self._serve(shard, run, workload, cfg, Path(d))
            files = {n: (Path(d) / n).read_text() for n in ("records.jsonl", "summary.json") if (Path(d) / n).exists()}
        return {"code": code, "stderr": err.getvalue()[-4000:], "files": files, "host": self.where()}

    def _serve(self, shard, run, workload, cfg, out: Path) -> int:
        async def one():
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
            if self._stopped.is_set():
                raise asyncio.CancelledError
            return await shard.run_shard(run, workload, cfg, out)

        try:
            summary = asyncio.run(one())
        except asyncio.CancelledError:  # stopped before its first request: nothing recorded
            return 130
        if self._stopped.is_set():
            return 130
        return exit_code(summary)


def _probe(address: str) -> None:
    """Fail fast on a cluster that is not there: Ray's own join retries for minutes."""
    where = address
    try:
        if address == "auto":
            from ray._private.services import canonicalize_bootstrap_address

            where = canonicalize_bootstrap_address("auto") or address
        host, _, port = where.rpartition(":")
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except ImportError:
        return  # Ray moved its helper: let ray.init find the cluster itself
    except (OSError, ValueError) as e:  # ConnectionError (no cluster running) is an OSError
        raise RayError(
            f"--ray: no Ray cluster answers at {address!r} ({str(e).splitlines()[0]}); start one "
            "with `ray start --head`, or give HOST:PORT of its head"
        ) from None


def _connect(address: str):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no call home from a load test
    # a cluster started with `ray start` wants the token it wrote for this machine's user; Ray's
    # join by explicit address does not send it unless told (read when Ray is imported)
    token = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", "~/.ray/auth_token")).expanduser()
    if "RAY_AUTH_MODE" not in os.environ and (os.environ.get("RAY_AUTH_TOKEN") or token.exists()):
        os.environ["RAY_AUTH_MODE"] = "token"
    _probe(address)
    try:
        import ray
    except ImportError:
        raise RayError("--ray: Ray is not installed here; install the extra: pip install 'kvgate[ray]'") from None
    import loadgen

    # ships this loadgen to every node (its dependencies, aiohttp and numpy, must be there)
    env = {"py_modules": [str(Path(loadgen.__file__).parent)]}
    try:
        ray.init(address=address, log_to_driver=False, runtime_env=env, logging_level=logging.ERROR)
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError... for a bad address
        raise RayError(
            f"--ray: cannot join the Ray cluster at {address!r}: {type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}; start one with `ray start --head` "
            "or give its address (HOST:PORT of the head, or auto)"
        ) from None
    return ray


def measure_offset(ray: Any, actor: Any) -> tuple[float, float]:
    """(worker wall clock - driver wall clock, half round trip) from the shortest of a few pings."""
    best = (0.0, float("inf"))
    for _ in range(CLOCK_PINGS):
        t1 = time.time()
        w = ray.get(actor.clock.remote())
        t2 = time.time()
        if t2 - t1 < best[1] * 2:
            best = (w - (t1 + t2) / 2, (t2 - t1) / 2)
    return best


def run_actors(address: str, shard_args: list[list[str]], out: Path, timeout: float) -> tuple[list[int], dict]:
    """Run one actor per shard; write each one's files to out/worker-I/; (exit codes, clocks)."""
    ray = _connect(address)
    actors = []
    try:
        cls = ray.remote(num_cpus=1, max_concurrency=2, max_restarts=0)(LoadWorker)
        actors = [cls.options(scheduling_strategy="SPREAD").remote() for _ in shard_args]
        offsets = [measure_offset(ray, x) for x in actors]
        start = time.time() + START_AFTER_S
        refs = [x.run.remote(args, start + off) for x, args, (off, _) in zip(actors, shard_args, offsets)]
        interrupted = False
        try:
            results = ray.get(refs, timeout=timeout)
        except (KeyboardInterrupt, ray.exceptions.GetTimeoutError):
            interrupted = True
            for x in actors:
                x.stop.remote()
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S)
            results = [
                ray.get(r) if r in ready else {"code": 130, "stderr": "no answer after stop", "files": {}} for r in refs
            ]
        for i, res in enumerate(results):
            d = out / f"worker-{i}"
            make_dirs(d)
            for name, text in res["files"].items():
                write_atomic(d / name, text)
            if res.get("stderr"):
                write_atomic(d / "stderr.txt", res["stderr"])
        if interrupted:
            raise KeyboardInterrupt
        clocks = {
            "basis": "wall clock; each worker's offset from the driver measured by round trip",
            "offsets_s": [o for o, _ in offsets],
            "offset_uncertainty_s": [u for _, u in offsets],
            "hosts": [r.get("host") for r in results],
        }
        return [r["code"] for r in results], clocks
    finally:
        for x in actors:
            with contextlib.suppress(Exception):
                ray.kill(x)
        ray.shutdown()
