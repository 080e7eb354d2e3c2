"""One run against a live server: its workload saved, the cache made cold when asked, the load sent
(in this event loop, or by loadgen processes), freezes taken, the counters settled, meta.json
written before and after."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

from loadgen import net
from loadgen.results.records import RecordWriter, read_records
from loadgen.safefile import make_dirs, open_append
from loadgen.schedule.runner import RunConfig, Runner, RunResult
from loadgen.schedule.workload import flags_of
from validator.errors import InfraError
from validator.observe.freeze import Freezer
from validator.observe.schedule import RunSpec
from validator.observe.scrape import Sampler
from validator.rundir.files import write_text
from validator.rundir.rundata import RunData
from validator.rundir.samples import Sample
from validator.rundir.schedule import RunKind
from validator.serve.procs import LoadProcess


async def _server_down(session, base_url: str, within: float = 2.0) -> bool:
    """True if /health stops answering for `within` seconds (a server kvgate started is also
    watched by execute()'s watchdog; a server at --url has only this)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (await net.get(session, base_url + "/health", 1.0))[0] == 200:
            return False
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
            if p0 is None or g0 is None or p1 is None or g1 is None:
                return s, None  # the server does not export them: cannot tell
            if p1 - p0 >= prompt and g1 - g0 >= output:
                return s, True
        if time.monotonic() > deadline:
            return s, False
        await asyncio.sleep(0.1)


@dataclass
class FreezeState:
    """Whether freezes are wanted, and why they stopped being tried (no /pause on this server)."""

    wanted: bool = True
    unavailable: str | None = None


async def one_run(
    spec: RunSpec,
    transport,
    sampler: Sampler,
    base_url: str,
    run_dir: Path,
    session,
    say,
    run_timeout: float,
    freeze: FreezeState | None = None,
    load_args: list[str] | None = None,
) -> RunData:
    d = run_dir / "runs" / spec.name
    make_dirs(d)
    prompts = {}
    with open_append(d / "workload.jsonl") as f:
        for s in spec.workload.items:
            prompts[s.id] = prompt = s.prompt.tolist() if hasattr(s.prompt, "tolist") else s.prompt
            line = {"id": s.id, "prompt": prompt, "output_tokens": s.output_tokens, "group": s.group}
            if s.token_ids is not None:  # text or chat: the ids the server computes, for the predictions
                line["prompt_ids"] = s.token_ids.tolist()
            f.write(json.dumps(line) + "\n")
    if spec.texts:
        write_text(d / "audit_text.json", json.dumps(spec.texts, indent=1))
    isolation = None
    if spec.reset_cache:
        isolation = "reset" if (await net.post(session, base_url + "/reset_prefix_cache", 10.0))[0] == 200 else "salt"
    elif spec.kind in (RunKind.COLD, RunKind.PROBE):
        isolation = "salt"
    before = await sampler.snapshot()
    # a provisional meta.json: if the server dies or kvgate is stopped mid-run, the records
    # already on disk are still found, and the run is marked as cut short
    points = spec.freezes if freeze is not None and freeze.wanted and not freeze.unavailable else []
    provisional = RunData(
        name=spec.name,
        kind=spec.kind,
        purpose=spec.purpose,
        records=[],
        prompts=prompts,
        started_at=time.time(),
        ended_at=0.0,  # saved as null: a run whose meta.json has no end was cut short
        before=before,
        after=None,
        isolation=isolation,
        interrupted=True,
        measured=spec.measured,
        workload={
            "description": spec.workload.description,
            "salt": spec.workload.salt,
            "concurrency": spec.concurrency,
        },
        freeze_points=[p.to_json() for p in points],
        freeze_note=_freeze_note(spec, freeze),
        freeze_status=_freeze_status(spec, freeze),
    )
    write_text(d / "meta.json", json.dumps({**provisional.meta(), "ended_at": None}, indent=1, default=str))
    say(f"run {spec.name}: {spec.workload.description} (concurrency {spec.concurrency})")
    n_before = len(sampler.samples)
    sampler.start()
    freezer_task = None
    freezer = None
    if spec.workers > 1:
        try:
            result = await _from_processes(spec, d, load_args or [], run_timeout)
            if any(not r.ok for r in result.records) and await _server_down(session, base_url):
                raise ServerDied(spec.name)
        finally:
            await sampler.stop()
    else:
        with RecordWriter(d / "records.jsonl") as w:
            runner = Runner(transport, w, name=spec.name)
            task = asyncio.ensure_future(
                runner.run(
                    spec.workload,
                    RunConfig(
                        concurrency=None if spec.timed else spec.concurrency,
                        timed=spec.timed,
                        max_requests=len(spec.workload.items),
                        duration=run_timeout,
                    ),
                )
            )
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
                    if isinstance(err, Exception) and freezer is not None:  # a bug, not a finding: shown
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
        name=spec.name,
        kind=spec.kind,
        purpose=spec.purpose,
        records=result.records,
        prompts=prompts,
        started_at=result.started_at,
        ended_at=result.ended_at,
        before=before,
        after=after,
        samples=samples,
        isolation=isolation,
        settled=settled,
        interrupted=interrupted,
        measured=spec.measured,
        workload={**result.workload, "concurrency": spec.concurrency},
        freeze_points=provisional.freeze_points,
        freeze_note=provisional.freeze_note,
        freeze_status=provisional.freeze_status,
        freezes=list(freezer.taken) if freezer is not None else [],
    )
    write_text(d / "meta.json", json.dumps(data.meta(), indent=1, default=str))
    ok = sum(r.ok for r in result.records)
    taken = sum(1 for f in data.freezes if f.settled)
    say(
        f"run {spec.name}: {ok}/{len(result.records)} ok in {result.ended_at - result.started_at:.1f} s, "
        f"{len(samples)} samples"
        + (f", {taken}/{len(points)} freezes" if points else "")
        + ("" if settled else ", counters did not catch up")
    )
    return data


async def _from_processes(spec: RunSpec, d: Path, load_args: list[str], run_timeout: float) -> RunResult:
    """The run sent by `loadgen --workers N` (started by the launcher), its merged records read back.
    Cancelled (Ctrl-C, the watchdog): loadgen is interrupted and each worker's records are kept."""
    w, out = spec.workload, d / "loadgen"
    proc = LoadProcess(
        [
            *load_args,
            "--concurrency",
            str(spec.concurrency),
            *flags_of(w),
            "--duration",
            str(run_timeout),
            "--workers",
            str(spec.workers),
            "--out",
            str(out),
            "--quiet",
        ],
        d / "loadgen.log",
    )
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
        with RecordWriter(d / "records.jsonl") as rw:  # where every run's records are read from
            for r in records:
                r.run = spec.name  # loadgen names its records "loadgen": they are this run's
                rw.write(r)
    if proc.poll() == 2:
        raise InfraError(f"loadgen could not run the {spec.name} run: {(d / 'loadgen.log').read_text()[-500:]}")
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    window = summary.get("window") or [started, time.time()]
    return RunResult(
        spec.name,
        records,
        window[0],
        window[1],
        interrupted,
        workload={
            "description": w.description,
            "salt": w.salt,
            "seed": w.seed,
            **w.info,
            "workers": spec.workers,
            "clocks": summary.get("clocks"),
        },
    )


def _freeze_status(spec: RunSpec, freeze: FreezeState | None) -> str | None:
    """None: planned freezes are tried; "off": observe.freezes is false; "unavailable": no /pause."""
    if not spec.freezes:
        return None
    if freeze is None or not freeze.wanted:
        return "off"
    return "unavailable" if freeze.unavailable else None


def _freeze_note(spec: RunSpec, freeze: FreezeState | None) -> str | None:
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
