"""The runs of a validation (cold, warm prime, warm, probe, latency), their workloads and freeze
points, from the plan and the profile."""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.schedule.workload import Lengths, Workload, near_limit, new_salt, shared_prefix
from loadgen.sources.read import Pending
from validator.errors import InputError
from validator.plan.record import PlanRecord
from validator.profile import WorkloadSection
from validator.rundir.freezes import FreezePoint
from validator.rundir.schedule import PlannedRun, RunKind, Schedule


@dataclass
class RunSpec:
    name: str  # cold, warm-prime, warm, probe, latency
    kind: RunKind
    workload: Workload
    concurrency: int
    reset_cache: bool = False
    measured: bool = True  # prime runs feed the cache; their latencies are not judged
    purpose: str = ""
    freezes: list[FreezePoint] = field(default_factory=list)  # planned freeze-frames
    workers: int = 1  # above 1: sent by that many loadgen processes (no freezes: they hold no runner)
    timed: bool = False  # at the workload's own start times (a trace), not closed loop
    pending: Pending | None = None  # a dataset the server's tokenizer must make exact before the run
    block_size: int = 16  # the plan's (the dataset audit's texts are found block by block)
    max_model_len: int = 0  # the plan's: a resolved dataset's requests must fit it
    texts: dict | None = None  # audit_text.json: the words where a dataset's prompts stop sharing

    def planned(self) -> PlannedRun:
        return PlannedRun(
            name=self.name,
            kind=self.kind,
            requests=len(self.pending.entries) if self.pending is not None else len(self.workload.items),
            concurrency=self.concurrency,
            reset_cache=self.reset_cache,
            measured=self.measured,
            workers=self.workers,
            freeze_points=tuple(self.freezes),
        )


def schedule_of(specs: list[RunSpec], server_started: bool, freezes: bool) -> Schedule:
    """What plan.json says the session will do, before it does it."""
    return Schedule(server_started=server_started, freezes=freezes, runs=tuple(s.planned() for s in specs))


def plan_runs(plan: PlanRecord, workload: WorkloadSection) -> list[RunSpec]:
    """Near-limit cold run, primed shared-prefix warm run, over-limit probe (with a dataset in the
    profile, observe/dataset.py's runs_for gives the `dataset` run instead)."""
    n, mml, bs = plan.max_num_seqs, plan.max_model_len, plan.block_size
    margin = workload.margin_tokens or 0
    out = workload.output_tokens or min(bs, max(mml // 4, 1))
    if workload.prompt_tokens and workload.output_tokens:
        total = workload.prompt_tokens + out
        margin = max(margin, mml - total)
    waves, seed = workload.waves, workload.seed
    prompt = mml - margin - out
    cold = near_limit(mml, n, out, margin, requests=n * waves, seed=seed, salt=new_salt())
    prefix = workload.prefix_tokens or max(bs, prompt // 2 // bs * bs)
    prefix = min(prefix, prompt - 1)
    groups = workload.prefix_groups
    salt = new_salt()
    suffix = Lengths.parse(prompt - prefix, "suffix")
    o = Lengths.parse(out, "output")
    prime = shared_prefix(groups, groups, prefix, suffix, o, seed=seed + 1, salt=salt, suffix_seed=1, id_prefix="prime")
    warm = shared_prefix(n * waves, groups, prefix, suffix, o, seed=seed + 1, salt=salt, suffix_seed=2, id_prefix="w")
    # the probe's requests decode for half the context, so the queue lasts long enough to be frozen;
    # three waves, so the excess still waits in the second if a server stall swallows the first
    probe_out = max((mml - margin) // 2, 1)
    probe = near_limit(mml, n, probe_out, margin, requests=3 * n, seed=seed + 2, salt=new_salt())
    probe.description = (
        f"probe: {3 * n} full-length requests ({mml - margin - probe_out} + {probe_out}) at once, "
        f"{2 * n} over max_num_seqs"
    )
    specs = [
        RunSpec(
            "cold",
            RunKind.COLD,
            cold,
            n,
            reset_cache=True,
            freezes=freeze_points(n, out, waves, 3),
            purpose=f"near the limits: {n} x ({prompt} + {out}) tokens, {waves} waves, cache reset",
        ),
        RunSpec(
            "warm-prime",
            RunKind.PRIME,
            prime,
            1,
            reset_cache=True,
            measured=False,
            purpose=f"puts {groups} shared prefix(es) of {prefix} tokens in the cache",
        ),
        RunSpec(
            "warm",
            RunKind.WARM,
            warm,
            n,
            freezes=freeze_points(n, out, waves, 2),
            purpose=f"{n * waves} requests over the primed prefix(es): "
            + ("hits expected" if plan.prefix_cached else "no hit and no shared block (no prefix cache)"),
        ),
        RunSpec(
            "probe",
            RunKind.PROBE,
            probe,
            3 * n,
            freezes=freeze_points(n, probe_out, 2, 2, waiting=1),
            purpose=f"{3 * n} concurrent full-length requests: {n} run, the others wait",
        ),
    ]
    k = workload.workers or 1
    if k > 1:
        specs.append(latency_run(n, mml, margin, out, waves, seed + 3, k))
    return specs


def latency_run(n: int, mml: int, margin: int, out: int, waves: int, seed: int, workers: int) -> RunSpec:
    """The cold run's shape sent by `workers` loadgen processes, with loadgen's own request ids, so
    `loadgen --prompt-tokens P --output-tokens O --seed S --salt X` rebuilds exactly these prompts."""
    if workers > n:
        raise InputError(
            f"workload.workers: {workers} load processes need at least as many requests in flight; "
            f"max_num_seqs is {n}: lower workload.workers"
        )
    w = near_limit(mml, n, out, margin, requests=n * waves, seed=seed, salt=new_salt(), id_prefix="r")
    w.description += f", {workers} load processes"
    return RunSpec(
        "latency",
        RunKind.LATENCY,
        w,
        n,
        reset_cache=True,
        workers=workers,
        purpose=f"near the limits from {workers} load processes (loadgen --workers), no freezes: "
        "the SLOs are judged here",
    )


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
    return [
        FreezePoint(name=f"freeze{i + 1}", min_tokens=k, running=running, waiting=waiting)
        for i, k in enumerate(marks[:count])
    ]
