"""The `dataset` run: the user's traffic (a ShareGPT file, a custom or chat JSONL, a timed trace, or
vLLM's prefix_repetition), cache reset first, frozen where the client's view settles, and judged
request by request. Text and chat prompts become exact at the server (POST /tokenize) before the
run; plan.json's schedule is written again then, with the request count the run will send."""

from __future__ import annotations

from loadgen import net
from loadgen.dataset_options import DatasetName
from loadgen.schedule.workload import Conversation, Lengths, Workload, new_salt, shared_prefix
from loadgen.sources.entries import DatasetError
from loadgen.sources.read import Pending, read_dataset
from loadgen.sources.resolve import resolve
from loadgen.transport.client import RequestSpec
from loadgen.transport.tokenize import ServerTokenizer, TokenizeError
from validator.errors import InfraError, InputError
from validator.judge.template import break_points
from validator.observe.schedule import RunSpec, plan_runs
from validator.plan.record import PlanRecord
from validator.profile import WorkloadSection
from validator.profile.dataset import dataset_of
from validator.rundir.freezes import FreezePoint
from validator.rundir.schedule import RunKind

FREEZES = 4  # freeze-frames spread over a dataset run
TEXTS = 8  # groups whose break is shown in words


def freeze_points_for(n: int) -> list[FreezePoint]:
    """Up to FREEZES freezes, after 1/5, 2/5, ... of the requests were sent: at the first moment
    then with a request decoding and none in prefill (running 0: any traffic)."""
    marks = sorted({max(1, n * k // (FREEZES + 1)) for k in range(1, FREEZES + 1)}) if n > 1 else []
    return [FreezePoint(name=f"freeze{i + 1}", min_tokens=1, running=0, after_sent=m) for i, m in enumerate(marks)]


def runs_for(plan: PlanRecord, workload: WorkloadSection) -> list[RunSpec]:
    """The session's runs: the `dataset` run alone when the profile names a dataset, else the
    synthetic runs near the limits (schedule.py)."""
    return [dataset_run(plan, workload)] if workload.dataset else plan_runs(plan, workload)


def session_runs(plan: PlanRecord, profile) -> list[RunSpec]:
    """The capacity sweep when asked for (sweep.steps, --sweep), else runs_for()."""
    if profile.sweep.steps is not None:
        from validator.observe.sweep import sweep_runs

        if profile.workload.dataset:
            raise InputError("sweep.steps and workload.dataset: a session sweeps or replays a dataset; give one")
        return sweep_runs(plan, profile.sweep, profile.workload.seed)
    return runs_for(plan, profile.workload)


def dataset_run(plan: PlanRecord, workload: WorkloadSection) -> RunSpec:
    ds = dataset_of(workload.dataset)
    assert ds is not None
    if ds.turns:
        raise InputError(
            "workload.dataset.turns: validate audits single requests; replay conversations with "
            "loadgen --dataset-name sharegpt --turns N"
        )
    opts = ds.options(max_model_len=plan.max_model_len)
    concurrency = ds.concurrency or plan.max_num_seqs
    try:
        if opts.name is DatasetName.PREFIX_REPETITION:
            n = ds.requests or 10 * opts.num_prefixes
            w: Workload | Pending = shared_prefix(
                n,
                opts.num_prefixes,
                opts.prefix_len,
                Lengths.parse(opts.suffix_len, "suffix"),
                Lengths.parse(opts.prefix_output_len, "output"),
                seed=workload.seed,
                salt=new_salt(),
                id_prefix="p",
            )
        else:
            w = read_dataset(opts, limit=ds.requests, salt=new_salt())
    except DatasetError as e:
        raise InputError(str(e).replace("--dataset-path", "workload.dataset.path")) from None
    timed = isinstance(w, Workload) and w.times is not None
    spec = RunSpec(
        "dataset",
        RunKind.DATASET,
        w if isinstance(w, Workload) else Workload([], "", "", 0),
        concurrency,
        reset_cache=True,
        timed=timed,
        block_size=plan.block_size,
        max_model_len=plan.max_model_len,
        pending=w if isinstance(w, Pending) else None,
        purpose=f"your traffic ({opts.name.value}), "
        + ("at the trace's timestamps" if timed else f"{concurrency} in flight")
        + ", cache reset: prefix hits judged request by request",
    )
    if isinstance(w, Workload):
        _fits(w, plan.max_model_len)
        spec.freezes = freeze_points_for(len(w.items))
    return spec


async def _texts_at_breaks(w: Workload, tok: ServerTokenizer, block_size: int) -> dict[str, dict]:
    """Display only: the text on either side of where each group of prompts stops sharing (the
    server's /detokenize of a few tokens each side), for the template audit's report."""
    prompts = [(s.id, s.token_ids.tolist()) for s in w.items if isinstance(s, RequestSpec) and s.token_ids is not None]
    out = {}
    for rid, at in list(break_points(prompts, block_size).items())[:TEXTS]:
        ids = dict(prompts)[rid]
        try:
            out[rid] = {
                "at": at,
                "before": await tok.decode(ids[max(0, at - 12) : at]),
                "after": await tok.decode(ids[at : at + 12]),
            }
        except TokenizeError:
            return {}  # the picture goes without its text
    return out


def _fits(w: Workload, max_model_len: int) -> None:
    long = [s.id for s in w.items if (s.prompt_tokens or 0) + s.output_tokens > max_model_len]
    if long:
        raise InputError(
            f"workload.dataset: {len(long)} requests (first {long[0]}) are longer than max_model_len "
            f"{max_model_len}; raise --max-model-len or shorten the dataset"
        )


async def resolve_pending(specs: list[RunSpec], base_url: str, model: str, api_key: str | None, pin, say) -> None:
    """Make every pending dataset exact at the server (its /tokenize), in place."""
    for spec in specs:
        if spec.pending is None:
            continue
        p = spec.pending
        async with net.session(pin) as s:
            tok = ServerTokenizer(s, base_url, model, {"Authorization": f"Bearer {api_key}"} if api_key else None)
            try:
                w, drops = await resolve(p.entries, tok, p.opts, p.source)
            except TokenizeError as e:
                raise InfraError(f"the server could not tokenize the dataset: {e}") from None
            if not w.items:
                raise InputError(f"workload.dataset: no request is left to send ({drops.line()})")
            if any(isinstance(x, Conversation) for x in w.items):  # turns are refused above; a guard
                raise InputError("workload.dataset: conversations are replayed by loadgen, not validate")
            _fits(w, spec.max_model_len)
            spec.texts = await _texts_at_breaks(w, tok, spec.block_size)
        w.salt = ""  # text prompts cannot carry a salt: the cache reset keeps the run cold
        spec.workload, spec.pending = w, None
        spec.freezes = freeze_points_for(len(w.items))
        say(f"dataset: {w.description}, tokenized by the server ({tok.calls} /tokenize calls)")
