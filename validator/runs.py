"""The cold, warm and probe runs: built from the plan, driven with loadgen, observed with
the sampler, saved to RUN_DIR/runs/<name>/ as they happen.

Each run keeps its own records, prompts, counters and histograms; nothing is mixed.
Between runs the counters are allowed to catch up with what the client sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from loadgen.client import OpenAIStream, connector
from loadgen.records import RecordWriter, RequestRecord, read_jsonl, read_records
from loadgen.runner import RunConfig, Runner
from loadgen.workload import Lengths, Workload, near_limit, new_salt, shared_prefix
from validator.errors import InfraError
from validator.freeze import Freezer, FreezePoint, read_freezes
from validator.scrape import Sample, Sampler, read_samples


@dataclass
class RunSpec:
    name: str                 # cold, warm-prime, warm, probe
    cache: str                # cold | warm | probe | prime
    workload: Workload
    concurrency: int
    reset_cache: bool = False
    measured: bool = True     # prime runs feed the cache; their latencies are not judged
    purpose: str = ""
    freezes: list[FreezePoint] = field(default_factory=list)   # planned freeze-frames


@dataclass
class RunData:
    """One run as saved: what was sent, what came back, what the server counted."""

    name: str
    cache: str
    purpose: str
    records: list[RequestRecord]
    prompts: dict[str, list[int]]
    started_at: float
    ended_at: float
    before: Sample | None
    after: Sample | None
    samples: list[Sample] = field(default_factory=list)
    isolation: str | None = None          # "reset" | "salt" (how the cache was made cold)
    settled: bool | None = None           # did the counters catch up with the client?
    interrupted: bool = False
    measured: bool = True
    workload: dict = field(default_factory=dict)
    freeze_points: list[dict] = field(default_factory=list)   # planned
    freeze_note: str | None = None                            # why planned freezes were not tried
    freezes: list = field(default_factory=list)               # FreezeRecord, as taken
    problems: list[str] = field(default_factory=list)         # what could not be read back
    scrape_errors: list[dict] = field(default_factory=list)   # failed /metrics scrapes in this run

    def meta(self) -> dict:
        return {"name": self.name, "cache": self.cache, "purpose": self.purpose, "started_at": self.started_at,
                "ended_at": self.ended_at, "isolation": self.isolation, "settled": self.settled,
                "interrupted": self.interrupted, "measured": self.measured, "workload": self.workload,
                "freeze_points": self.freeze_points, "freeze_note": self.freeze_note,
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None}


def plan_runs(plan: dict, profile) -> list[RunSpec]:
    """Near-limit cold run, primed shared-prefix warm run, over-limit probe."""
    g = profile.get
    n, mml, bs = plan["max_num_seqs"], plan["max_model_len"], plan["block_size"]
    margin = g("workload", "margin_tokens") or 0
    out = g("workload", "output_tokens") or min(bs, max(mml // 4, 1))
    if g("workload", "prompt_tokens") and g("workload", "output_tokens"):
        total = g("workload", "prompt_tokens") + out
        margin = max(margin, mml - total)
    waves, seed = g("workload", "waves"), g("workload", "seed")
    prompt = mml - margin - out
    cold = near_limit(mml, n, out, margin, requests=n * waves, seed=seed, salt=new_salt())
    prefix = g("workload", "prefix_tokens") or max(bs, prompt // 2 // bs * bs)
    prefix = min(prefix, prompt - 1)
    groups = g("workload", "prefix_groups")
    salt = new_salt()
    suffix = Lengths.parse(prompt - prefix, "suffix")
    o = Lengths.parse(out, "output")
    prime = shared_prefix(groups, groups, prefix, suffix, o, seed=seed + 1, salt=salt, suffix_seed=1,
                          id_prefix="prime")
    warm = shared_prefix(n * waves, groups, prefix, suffix, o, seed=seed + 1, salt=salt, suffix_seed=2,
                         id_prefix="w")
    # the probe's requests decode for half the context, so the queue lasts long enough to be frozen;
    # three waves, so the excess still waits in the second if a server stall swallows the first
    probe_out = max((mml - margin) // 2, 1)
    probe = near_limit(mml, n, probe_out, margin, requests=3 * n, seed=seed + 2, salt=new_salt())
    probe.description = (f"probe: {3 * n} full-length requests ({mml - margin - probe_out} + {probe_out}) at once, "
                         f"{2 * n} over max_num_seqs")
    return [
        RunSpec("cold", "cold", cold, n, reset_cache=True, freezes=freeze_points(n, out, waves, 3),
                purpose=f"near the limits: {n} x ({prompt} + {out}) tokens, {waves} waves, cache reset"),
        RunSpec("warm-prime", "prime", prime, 1, reset_cache=True, measured=False,
                purpose=f"puts {groups} shared prefix(es) of {prefix} tokens in the cache"),
        RunSpec("warm", "warm", warm, n, freezes=freeze_points(n, out, waves, 2),
                purpose=f"{n * waves} requests over the primed prefix(es): hits expected"),
        RunSpec("probe", "probe", probe, 3 * n, freezes=freeze_points(n, probe_out, 2, 2, waiting=1),
                purpose=f"{3 * n} concurrent full-length requests: {n} run, the others wait"),
    ]


def freeze_points(running: int, output: int, waves: int, count: int, waiting: int = 0) -> list[FreezePoint]:
    """Freezes spread over the first half of the decode, each with `running` requests decoding
    (and, for the probe, at least `waiting` requests queued behind them).

    The first is taken as soon as all have a token; later ones at growing token counts. A point
    the stream passes in one burst is taken in the next wave, so no more points than waves + 1
    (the probe's points sit early in a wave, while the excess still waits)."""
    if output < 2:
        return []  # a single token: nothing decodes, there is no moment to hold
    count = min(count, waves + 1) if waves > 1 else count
    marks = sorted({1, *(max(1, output * i // (2 * count)) for i in range(1, count))})
    if waiting:  # the excess waits only while the first requests run: stay in their first quarter
        marks = sorted({1, *(max(1, output * i // (4 * count)) for i in range(1, count))})
    return [FreezePoint(name=f"freeze{i + 1}", min_tokens=k, running=running, waiting=waiting)
            for i, k in enumerate(marks[:count])]


async def _post_ok(session, url: str) -> bool:
    try:
        async with session.post(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
            return r.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return False


async def _server_down(session, base_url: str, alive, within: float = 2.0) -> bool:
    """True if the process has exited, or /health stops answering, within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            return True
        try:
            async with session.get(base_url + "/health", timeout=aiohttp.ClientTimeout(total=1)) as r:
                if r.status == 200 and (alive is None or alive()):
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
                  api_key: str | None = None, alive=None) -> list[RunData]:
    """Run the specs in order. With `alive` (a server kvgate started), a watchdog polls it every
    0.1 s and cancels the runs the moment the process is gone: ServerDied within a fraction of a
    second, whatever the runs were doing (waiting on a request, a freeze, the counters)."""
    current: list[str] = ["start"]
    if alive is None:
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, alive, current)
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
        return await _execute(specs, base_url, model, run_dir, profile, say, api_key, alive, current)
    except asyncio.CancelledError:
        if died:
            raise ServerDied(current[0]) from None
        raise
    finally:
        watchdog.cancel()
        await asyncio.gather(watchdog, return_exceptions=True)  # collects an interrupt raised in it too


async def _execute(specs, base_url, model, run_dir, profile, say, api_key, alive, current) -> list[RunData]:
    g = profile.get
    out: list[RunData] = []
    timeout = aiohttp.ClientTimeout(total=g("observe", "read_timeout_s") + 5)
    async with aiohttp.ClientSession(timeout=timeout) as scrape_s, \
            aiohttp.ClientSession(connector=connector()) as load_s:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        sampler = Sampler(scrape_s, base_url, run_dir / "metrics.jsonl",
                          interval=g("observe", "scrape_interval_s"), timeout=g("observe", "read_timeout_s"))
        transport = OpenAIStream(load_s, base_url, model, api_key=api_key,
                                 request_timeout=g("observe", "request_timeout_s"),
                                 read_timeout=g("observe", "read_timeout_s"), token_counts=True)
        freeze = FreezeState(g("observe", "freezes"))
        try:
            for spec in specs:
                current[0] = spec.name
                data = await _one_run(spec, transport, sampler, base_url, run_dir, scrape_s, headers, say,
                                      g("observe", "run_timeout_s"), alive, freeze)
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


async def _one_run(spec: RunSpec, transport, sampler: Sampler, base_url: str, run_dir: Path, session, headers,
                   say, run_timeout: float, alive, freeze: FreezeState | None = None) -> RunData:
    d = run_dir / "runs" / spec.name
    d.mkdir(parents=True, exist_ok=True)
    prompts = {s.id: s.prompt for s in spec.workload.items}
    with open(d / "workload.jsonl", "w") as f:
        for s in spec.workload.items:
            f.write(json.dumps({"id": s.id, "prompt": s.prompt, "output_tokens": s.output_tokens,
                                "group": s.group}) + "\n")
    isolation = None
    if spec.reset_cache:
        isolation = "reset" if await _post_ok(session, base_url + "/reset_prefix_cache") else "salt"
    elif spec.cache in ("cold", "probe"):
        isolation = "salt"
    before = await sampler.snapshot()
    # a provisional meta.json: if the server dies or kvgate is stopped mid-run, the records
    # already on disk are still found, and the run is marked as cut short
    provisional = RunData(spec.name, spec.cache, spec.purpose, [], prompts, time.time(), None, before, None, [],
                          isolation, None, True, spec.measured, {"description": spec.workload.description,
                                                                 "salt": spec.workload.salt})
    points = spec.freezes if freeze is not None and freeze.wanted and not freeze.unavailable else []
    provisional.freeze_points = [p.to_json() for p in points]
    provisional.freeze_note = _freeze_note(spec, freeze)
    (d / "meta.json").write_text(json.dumps(provisional.meta(), indent=1, default=str))
    say(f"run {spec.name}: {spec.workload.description} (concurrency {spec.concurrency})")
    n_before = len(sampler.samples)
    sampler.start()
    freezer_task = None
    with RecordWriter(d / "records.jsonl") as w:
        runner = Runner(transport, w, name=spec.name)
        task = asyncio.ensure_future(runner.run(spec.workload, RunConfig(
            concurrency=spec.concurrency, max_requests=len(spec.workload.items), duration=run_timeout)))
        freezer = None
        if points:
            freezer = Freezer(session, base_url, runner, spec.name, points, d / "freezes.jsonl", before, say)
            freezer_task = asyncio.ensure_future(freezer.run())
        try:
            result = await task  # a server kvgate started is watched by execute()
            if any(not r.ok for r in result.records) and await _server_down(session, base_url, alive):
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
    data = RunData(spec.name, spec.cache, spec.purpose, result.records, prompts, result.started_at,
                   result.ended_at, before, after, samples, isolation, settled, interrupted, spec.measured,
                   result.workload)
    data.freeze_points = provisional.freeze_points
    data.freeze_note = provisional.freeze_note
    data.freezes = list(freezer.taken) if freezer is not None else []
    (d / "meta.json").write_text(json.dumps(data.meta(), indent=1, default=str))
    ok = sum(r.ok for r in result.records)
    taken = sum(1 for f in data.freezes if f.settled)
    say(f"run {spec.name}: {ok}/{len(result.records)} ok in {result.ended_at - result.started_at:.1f} s, "
        f"{len(samples)} samples" + (f", {taken}/{len(points)} freezes" if points else "")
        + ("" if settled else ", counters did not catch up"))
    return data


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


def load_runs(run_dir: Path) -> list[RunData]:
    """Saved runs, in the order they ran, for re-judging without a server."""
    out = []
    shared_problems: list[str] = []
    scrape_errors: list[dict] = []
    metrics = run_dir / "metrics.jsonl"
    all_samples = read_samples(metrics, shared_problems, scrape_errors) if metrics.exists() else []
    for meta_path in sorted((run_dir / "runs").glob("*/meta.json"), key=lambda p: json.loads(p.read_text())
                            ["started_at"]):
        m = json.loads(meta_path.read_text())
        d = meta_path.parent
        problems: list[str] = [] if out else shared_problems   # the shared file's, told once
        records = read_records(d / "records.jsonl", problems) if (d / "records.jsonl").exists() else []
        if m.get("ended_at") is None:  # cut short: the run ended with its last record
            m["ended_at"] = max([m["started_at"]] + [m["started_at"] + (r.sent or 0) + (r.done or r.e2e or 0)
                                                      for r in records])
        prompts = dict(read_jsonl(d / "workload.jsonl", lambda x: (x["id"], x["prompt"]), problems))
        # the light samples taken while this run was in flight (the next run starts right after)
        samples = [s for s in all_samples if not s.histograms and m["started_at"] <= (s.t_sent or s.t)
                   <= m["ended_at"]]
        run = RunData(m["name"], m["cache"], m["purpose"], records, prompts,
                      m["started_at"], m["ended_at"],
                      Sample.from_json(m["before"]) if m.get("before") else None,
                      Sample.from_json(m["after"]) if m.get("after") else None,
                      samples, m.get("isolation"), m.get("settled"), m.get("interrupted", False),
                      m.get("measured", True), m.get("workload", {}))
        run.freeze_points = m.get("freeze_points") or []
        run.freeze_note = m.get("freeze_note")
        run.freezes, freeze_problems = read_freezes(d / "freezes.jsonl")
        run.problems = problems + freeze_problems
        run.scrape_errors = [e for e in scrape_errors if isinstance(e.get("t"), (int, float))
                             and m["started_at"] <= e["t"] <= m["ended_at"]]
        out.append(run)
    return out
