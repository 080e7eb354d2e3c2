"""Executing the runs against a live server: load, samples, freezes, counters settled, and a
watchdog that ends everything the moment a server kvgate started dies."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from loadgen import net
from loadgen.transport.client import OpenAIStream, connector
from loadgen.net import Pin
from loadgen.results.records import RecordWriter, read_records
from loadgen.schedule.runner import RunConfig, Runner, RunResult
from loadgen.safefile import make_dirs, open_append
from validator.errors import InfraError
from validator.observe.freeze import Freezer
from validator.observe.schedule import RunSpec
from validator.observe.scrape import Sampler
from validator.rundir.files import write_text
from validator.rundir.rundata import RunData
from validator.rundir.samples import Sample
from validator.rundir.schedule import RunKind
from validator.serve.procs import LoadProcess


async def _post_ok(session, url: str) -> bool:
    try:
        async with session.post(url, timeout=aiohttp.ClientTimeout(total=10), allow_redirects=False) as r:
            return r.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return False


async def _server_down(session, base_url: str, within: float = 2.0) -> bool:
    """True if /health stops answering for `within` seconds (a server kvgate started is also
    watched by execute()'s watchdog; a server at --url has only this)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            async with session.get(base_url + "/health", timeout=aiohttp.ClientTimeout(total=1),
                                   allow_redirects=False) as r:
                if r.status == 200:
                    return False
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            pass
        await asyncio.sleep(0.2)
    return True


async def _settle(sampler: Sampler, before: Sample | None, prompt: int, output: int, timeout: float = 15.0):
    """Counters lag the last responses: poll until they have grown by what the client saw."""
    deadline = time.monotonic() + timeout
    while True:
        s = await sampler.snapshot()
        if s is not None and before is not None:
            p0, g0 = before.values.get("prompt_tokens"), before.values.get("generation_tokens")
            p1, g1 = s.values.get("prompt_tokens"), s.values.get("generation_tokens")
            if None in (p0, g0, p1, g1):
                return s, None  # the server does not export them: cannot tell
            if p1 - p0 >= prompt and g1 - g0 >= output:
                return s, True
        if time.monotonic() > deadline:
            return s, False
        await asyncio.sleep(0.1)


async def execute(specs: list[RunSpec], base_url: str, model: str, run_dir: Path, profile, say,
                  api_key: str | None = None, alive=None, pin: Pin | None = None) -> list[RunData]:
    """Run the specs in order. With `alive` (a server kvgate started), a watchdog polls it every
    0.1 s and cancels the runs the moment the process is gone: ServerDied within a fraction of a
    second, whatever the runs were doing (waiting on a request, a freeze, the counters)."""
    current: list[str] = ["start"]
    if alive is None:
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin)
    died: list[bool] = []
    runs = asyncio.current_task()

    async def watch() -> None:
        while alive():
            await asyncio.sleep(0.1)
        died.append(True)
        runs.cancel()  # the runs' own cleanup keeps what was recorded

    # the runs stay in this task, so an interrupt (Terminated, Ctrl-C) propagates as before
    watchdog = asyncio.ensure_future(watch())
    try:
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin)
    except asyncio.CancelledError:
        if died:
            raise ServerDied(current[0]) from None
        raise
    finally:
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)  # collects an interrupt raised in it too


async def _execute(specs, base_url, model, run_dir, profile, say, api_key, current, pin) -> list[RunData]:
    out: list[RunData] = []
    timeout = aiohttp.ClientTimeout(total=profile.observe.read_timeout_s + 5)
    # no ambient proxy, no redirect, only the addresses the loopback rule checked (loadgen.net)
    async with net.session(pin, timeout=timeout) as scrape_s, net.session(connector=connector(pin)) as load_s:
        sampler = Sampler(scrape_s, base_url, run_dir / "metrics.jsonl",
                          interval=profile.observe.scrape_interval_s, timeout=profile.observe.read_timeout_s)
        transport = OpenAIStream(load_s, base_url, model, api_key=api_key,
                                 request_timeout=profile.observe.request_timeout_s,
                                 read_timeout=profile.observe.read_timeout_s, token_counts=True)
        freeze = FreezeState(profile.observe.freezes)
        # what a run sent by loadgen processes shares with the in-process transport
        load_args = ["--url", net.pinned_url(base_url, pin) if pin else base_url, "--model", model, "--timeout", str(profile.observe.request_timeout_s),
                     "--read-timeout", str(profile.observe.read_timeout_s)]
        if api_key:
            load_args += ["--api-key-env", profile.vllm.api_key_env]
        try:
            for spec in specs:
                current[0] = spec.name
                data = await _one_run(spec, transport, sampler, base_url, run_dir, scrape_s, say,
                                      profile.observe.run_timeout_s, freeze, load_args)
                out.append(data)
                if data.interrupted:
                    break
        finally:
            await sampler.stop()
            sampler.close()
    return out


@dataclass
class FreezeState:
    """Whether freezes are wanted, and why they stopped being tried (no /pause on this server)."""

    wanted: bool = True
    unavailable: str | None = None


async def _one_run(spec: RunSpec, transport, sampler: Sampler, base_url: str, run_dir: Path, session,
                   say, run_timeout: float, freeze: FreezeState | None = None,
                   load_args: list[str] | None = None) -> RunData:
    d = run_dir / "runs" / spec.name
    make_dirs(d)
    prompts = {}
    with open_append(d / "workload.jsonl") as f:
        for s in spec.workload.items:
            prompts[s.id] = prompt = s.prompt.tolist() if hasattr(s.prompt, "tolist") else s.prompt
            f.write(json.dumps({"id": s.id, "prompt": prompt, "output_tokens": s.output_tokens,
                                "group": s.group}) + "\n")
    isolation = None
    if spec.reset_cache:
        isolation = "reset" if await _post_ok(session, base_url + "/reset_prefix_cache") else "salt"
    elif spec.kind in (RunKind.COLD, RunKind.PROBE):
        isolation = "salt"
    before = await sampler.snapshot()
    # a provisional meta.json: if the server dies or kvgate is stopped mid-run, the records
    # already on disk are still found, and the run is marked as cut short
    points = spec.freezes if freeze is not None and freeze.wanted and not freeze.unavailable else []
    provisional = RunData(
        name=spec.name, kind=spec.kind, purpose=spec.purpose, records=[], prompts=prompts,
        started_at=time.time(), ended_at=None, before=before, after=None, isolation=isolation,
        interrupted=True, measured=spec.measured,
        workload={"description": spec.workload.description, "salt": spec.workload.salt,
                  "concurrency": spec.concurrency},
        freeze_points=[p.to_json() for p in points], freeze_note=_freeze_note(spec, freeze),
        freeze_status=_freeze_status(spec, freeze))
    write_text(d / "meta.json", json.dumps(provisional.meta(), indent=1, default=str))
    say(f"run {spec.name}: {spec.workload.description} (concurrency {spec.concurrency})")
    n_before = len(sampler.samples)
    sampler.start()
    freezer_task = None
    freezer = None
    if spec.workers > 1:
        try:
            result = await _from_processes(spec, d, load_args, run_timeout)
            if any(not r.ok for r in result.records) and await _server_down(session, base_url):
                raise ServerDied(spec.name)
        finally:
            await sampler.stop()
    else:
        with RecordWriter(d / "records.jsonl") as w:
            runner = Runner(transport, w, name=spec.name)
            task = asyncio.ensure_future(runner.run(spec.workload, RunConfig(
                concurrency=spec.concurrency, max_requests=len(spec.workload.items), duration=run_timeout)))
            if points:
                freezer = Freezer(session, base_url, runner, spec.name, points, d / "freezes.jsonl", before, say)
                freezer_task = asyncio.ensure_future(freezer.run())
            try:
                # waited on, not awaited: a cancel of this run (Ctrl-C, the watchdog) must reach this task
                # and not be absorbed by the runner, which ends quietly when cancelled
                await asyncio.wait({task})
                result = task.result()
                if any(not r.ok for r in result.records) and await _server_down(session, base_url):
                    raise ServerDied(spec.name)  # requests fail fast once the server is gone
            finally:
                if freezer_task is not None:  # points not reached by the end of the run stay untaken
                    freezer_task.cancel()
                    (err,) = await asyncio.gather(freezer_task, return_exceptions=True)
                    if isinstance(err, Exception):  # a bug, not a finding: shown, and the freezes not measured
                        freezer.unavailable = f"freezer failed: {type(err).__name__}: {err}"
                        say(f"freeze-frames failed in the {spec.name} run: {type(err).__name__}: {err}")
                if not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                await sampler.stop()
    if freezer is not None and freezer.unavailable and freeze is not None:
        freeze.unavailable = freezer.unavailable
        say(f"freeze-frames unavailable ({freezer.unavailable}): later runs are not frozen")
    interrupted = result.interrupted
    sent_p = sum(r.prompt_tokens or 0 for r in result.records if r.ok)
    sent_g = sum(r.output_tokens or 0 for r in result.records if r.ok)
    after, settled = await _settle(sampler, before, sent_p, sent_g)
    samples = [s for s in sampler.samples[n_before:] if not s.histograms]
    data = RunData(
        name=spec.name, kind=spec.kind, purpose=spec.purpose, records=result.records, prompts=prompts,
        started_at=result.started_at, ended_at=result.ended_at, before=before, after=after, samples=samples,
        isolation=isolation, settled=settled, interrupted=interrupted, measured=spec.measured,
        workload={**result.workload, "concurrency": spec.concurrency}, freeze_points=provisional.freeze_points,
        freeze_note=provisional.freeze_note, freeze_status=provisional.freeze_status,
        freezes=list(freezer.taken) if freezer is not None else [])
    write_text(d / "meta.json", json.dumps(data.meta(), indent=1, default=str))
    ok = sum(r.ok for r in result.records)
    taken = sum(1 for f in data.freezes if f.settled)
    say(f"run {spec.name}: {ok}/{len(result.records)} ok in {result.ended_at - result.started_at:.1f} s, "
        f"{len(samples)} samples" + (f", {taken}/{len(points)} freezes" if points else "")
        + ("" if settled else ", counters did not catch up"))
    return data


async def _from_processes(spec: RunSpec, d: Path, load_args: list[str], run_timeout: float) -> RunResult:
    """The run sent by `loadgen --workers N` (started by the launcher), its merged records read back.
    Cancelled (Ctrl-C, the watchdog): loadgen is interrupted and each worker's records are kept."""
    w, out = spec.workload, d / "loadgen"
    proc = LoadProcess([*load_args, "--concurrency", str(spec.concurrency), "--requests", str(len(w.items)),
                        "--prompt-tokens", str(w.info["prompt_tokens"]), "--output-tokens",
                        str(w.info["output_tokens"]), "--seed", str(w.seed), "--salt", w.salt, "--duration",
                        str(run_timeout), "--workers", str(spec.workers), "--out", str(out), "--quiet"],
                       d / "loadgen.log")
    started, interrupted = time.time(), True
    try:
        while proc.poll() is None:
            await asyncio.sleep(0.1)
        interrupted = proc.poll() not in (0, 1, 3)
    finally:
        proc.stop()
        merged = out / "records.jsonl"
        files = [merged] if merged.exists() and not interrupted else sorted(out.glob("worker-*/records.jsonl"))
        records = [r for f in files for r in read_records(f)]
        with RecordWriter(d / "records.jsonl") as rw:   # where every run's records are read from
            for r in records:
                r.run = spec.name   # loadgen names its records "loadgen": they are this run's
                rw.write(r)
    if proc.poll() == 2:
        raise InfraError(f"loadgen could not run the {spec.name} run: {(d / 'loadgen.log').read_text()[-500:]}")
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    window = summary.get("window") or [started, time.time()]
    return RunResult(spec.name, records, window[0], window[1], interrupted,
                     workload={"description": w.description, "salt": w.salt, "seed": w.seed, **w.info,
                               "workers": spec.workers, "clocks": summary.get("clocks")})


def _freeze_status(spec: RunSpec, freeze: "FreezeState | None") -> str | None:
    """None: planned freezes are tried; "off": observe.freezes is false; "unavailable": no /pause."""
    if not spec.freezes:
        return None
    if freeze is None or not freeze.wanted:
        return "off"
    return "unavailable" if freeze.unavailable else None


def _freeze_note(spec: RunSpec, freeze: "FreezeState | None") -> str | None:
    """Why a run that should have freezes has none (None: it has them, or never should)."""
    if not spec.freezes:
        return None
    if freeze is None or not freeze.wanted:
        return "freezes turned off (observe.freezes: false)"
    if freeze.unavailable:
        return f"the server has no usable /pause ({freeze.unavailable}); start vLLM with VLLM_SERVER_DEV_MODE=1"
    return None


class ServerDied(InfraError):
    def __init__(self, run: str):
        super().__init__(f"vLLM died during the {run} run")
        self.run = run
