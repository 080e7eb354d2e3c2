"""Doctored copies of a real run directory (issue 20): one change per copy, each removing evidence or
contradicting it, and what re-judging must then say. Helpers for tests/test_validate_live.py."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace
from pathlib import Path

from validator.judge.servertiming import share_bound_ms
from validator.profile import from_dict


def jl(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def write_jl(p: Path, rows: list[dict]) -> None:
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))


def edit_json(p: Path, fn) -> None:
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d))


def edit_jl(p: Path, fn) -> None:
    rows = jl(p)
    fn(rows)
    write_jl(p, rows)


def _served(n: int):
    def doctor(d: Path) -> None:
        def f(rows):  # made consistent: chunks, counts and finish reason agree with the doctored usage
            r = rows[0]
            r["output_tokens"], r["token_mismatch"], r["finish_reason"] = n, None, "stop"
            r["chunk_times"], r["chunk_tokens"] = r["chunk_times"][:n], r["chunk_tokens"][:n]

        edit_jl(d / "runs/warm/records.jsonl", f)

    return doctor


def _preemptions_in_metrics(d: Path) -> None:
    meta = json.loads((d / "runs/cold/meta.json").read_text())

    def f(rows):
        for r in rows:
            if "values" in r and not r.get("histograms") and meta["started_at"] <= r["t_sent"] <= meta["ended_at"]:
                r["values"]["num_preemptions"] = (r["values"]["num_preemptions"] or 0) + 2

    edit_jl(d / "metrics.jsonl", f)


def _renamed(d: Path, only: int | None = None) -> None:
    warm, cold = jl(d / "runs/warm/records.jsonl"), jl(d / "runs/cold/records.jsonl")
    for i, (w, c) in enumerate(zip(warm, cold)):
        if only is None or i == only:
            w["id"], w["run"] = c["id"], "cold"
            cold[i] = w
    write_jl(d / "runs/cold/records.jsonl", cold)


def _freeze(fn):
    return lambda d: edit_jl(d / "runs/cold/freezes.jsonl", fn)


def _first_ttfts_plus_6s(rows):
    for r in rows[:4]:
        r["chunk_times"] = [t + 6.0 for t in r["chunk_times"]]


def _readings_disagree(rows):
    rows[0]["readings"][-1]["values"]["num_requests_running"] = 3.0


def _generation_ahead(rows):
    for r in rows[0]["readings"][-2:]:
        r["values"]["generation_tokens"] += 1


def _not_settled(rows):
    rows[1]["settled"] = False


# name -> (doctor, the verdict re-judging must give, a check that must say so, its status)
def _client_clock(shift_s: float, past_the_bound: bool = False):
    """Every warm record's chunks moved by shift_s against its send: a client clock running late (or
    early) by that much, which the engine's own per-request timing shows. past_the_bound: late by
    the API server's share bound of this host as well (a slow host's API server genuinely takes
    100 ms and more, so 100 ms alone is inside its bound there)."""

    def doctor(d: Path) -> None:
        def f(rows):
            shift = shift_s
            if past_the_bound:  # the judge's own bound, from the profile's default tolerances
                tol = from_dict({}).tolerances
                itl = [r["server_itl_ms"] for r in rows if r.get("server_itl_ms") is not None]
                shift += share_bound_ms(itl, tol.api_share_ms, tol.api_share_itls) / 1e3
            for r in rows:
                r["chunk_times"] = [c + shift for c in r["chunk_times"]]

        edit_jl(d / "runs/warm/records.jsonl", f)

    return doctor


CASES = {
    "client clock 100 ms past the share bound": (
        _client_clock(0.1, past_the_bound=True),
        "fail",
        "warm.ttft_client_vs_server_each",
        "fail",
    ),
    "client clock 100 ms early": (_client_clock(-0.1), "fail", "warm.ttft_client_vs_server_each", "fail"),
    "startup.json deleted": (
        lambda d: (d / "startup.json").unlink(),
        "inconclusive",
        "startup.num_gpu_blocks",
        "not_measured",
    ),
    "startup facts null": (
        lambda d: edit_json(d / "startup.json", lambda s: s.update(facts=None)),
        "inconclusive",
        "startup.kv_cache_tokens",
        "not_measured",
    ),
    "startup error recorded": (
        lambda d: edit_json(d / "startup.json", lambda s: s.update(error="vLLM exited with code -9 during probe")),
        "error",
        None,
        None,
    ),
    "meta.json deleted": (
        lambda d: (d / "runs/cold/meta.json").unlink(),
        "inconclusive",
        "cold.prefix_hits",
        "not_measured",
    ),
    "workload emptied": (
        lambda d: (d / "runs/cold/workload.jsonl").write_text(""),
        "fail",
        "cold.records_match_workload",
        "fail",
    ),
    "one prompt removed": (
        lambda d: edit_jl(d / "runs/cold/workload.jsonl", lambda rows: rows.pop(1)),
        "fail",
        "cold.records_match_workload",
        "fail",
    ),
    "workload deleted": (
        lambda d: (d / "runs/cold/workload.jsonl").unlink(),
        "inconclusive",
        "cold.tokens_exact",
        "not_measured",
    ),
    "meta says not measured": (
        lambda d: edit_json(d / "runs/cold/meta.json", lambda m: m.update(measured=False)),
        "fail",
        "cold.notes_agree",
        "fail",
    ),
    "meta lists no freeze points": (
        lambda d: edit_json(d / "runs/cold/meta.json", lambda m: m.update(freeze_points=[])),
        "fail",
        "cold.notes_agree",
        "fail",
    ),
    "meta says freezes off": (
        lambda d: edit_json(
            d / "runs/cold/meta.json",
            lambda m: m.update(freeze_status="off", freeze_note="freezes turned off (observe.freezes: false)"),
        ),
        "fail",
        "cold.notes_agree",
        "fail",
    ),
    "served 31 of 32": (_served(31), "fail", "warm.tokens_exact", "fail"),
    "served 40 of 32": (_served(40), "fail", "warm.tokens_exact", "fail"),
    "preemptions only in metrics.jsonl": (_preemptions_in_metrics, "fail", "cold.counters_agree", "fail"),
    "cold records are the warm run's": (
        lambda d: shutil.copy(d / "runs/warm/records.jsonl", d / "runs/cold/records.jsonl"),
        "fail",
        "cold.records_match_workload",
        "fail",
    ),
    "warm records renamed into cold": (_renamed, "fail", "cold.records_match_workload", "fail"),
    "one record swapped": (lambda d: _renamed(d, only=5), "fail", "cold.records_match_workload", "fail"),
    "a freeze's readings disagree": (
        _freeze(_readings_disagree),
        "inconclusive",
        "cold.freeze1.kv_blocks",
        "not_measured",
    ),
    "server counted a token more": (
        _freeze(_generation_ahead),
        "inconclusive",
        "cold.freeze1.kv_blocks",
        "not_measured",
    ),
    "a freeze not settled": (_freeze(_not_settled), "inconclusive", "cold.freeze2.kv_blocks", "not_measured"),
    "first TTFTs 6 s later": (
        lambda d: edit_jl(d / "runs/cold/records.jsonl", _first_ttfts_plus_6s),
        "fail",
        "slo.ttft_p99_ms",
        "fail",
    ),
    "probe records truncated": (
        lambda d: edit_jl(d / "runs/probe/records.jsonl", lambda rows: rows.__delitem__(slice(4, None))),
        "fail",
        "probe.requests_completed",
        "fail",
    ),
}
for _run in ("cold", "warm-prime", "warm", "probe"):  # issue 19: each planned run deleted in turn
    CASES[f"run {_run} deleted"] = (
        lambda d, n=_run: shutil.rmtree(d / "runs" / n),
        "not pass",
        f"{_run}.requests_completed",
        "not_measured",
    )


def rejudge(d: Path) -> tuple[int, dict]:
    """`validate --report DIR --json` in this process (a traceback fails the test that calls it)."""
    from validator.judging import rejudge as run

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(str(d), True)
    return code, json.loads(out.getvalue())


def failing(src: Path, tmp_path: Path, fn, names: tuple[str, ...]) -> None:
    """A copy of the run directory `src` doctored by `fn` re-judges `fail` (exit 1), each check in
    `names` failing."""
    import shutil

    copy = tmp_path / fn.__name__
    shutil.copytree(src, copy)
    fn(copy)
    code, rep = rejudge(copy)
    status = {c["name"]: c["status"] for c in rep["checks"]}
    assert code == 1 and rep["verdict"] == "fail", fn.__name__
    assert all(status[n] == "fail" for n in names), (fn.__name__, {n: status[n] for n in names})


def replayed(src, **changes):
    """(predictions, observed cached tokens by id) of the run at `src`, the plan's figures changed."""
    from validator.judge.cachedtokens import predictions
    from validator.rundir.rundata import load_runs
    from validator.rundir.saved import read_saved

    saved = read_saved(src)
    run = load_runs(src, saved.schedule, True)[0]
    plan = saved.record
    if "kv_groups" in changes:
        changes = {"shown": {**plan.shown, "kv_groups": changes["kv_groups"]}}
    preds, why = predictions(run, replace(plan, **changes))
    assert preds is not None, why
    return preds, {x.id: x.cached_tokens for x in run.records}


def evicted(src, **changes) -> int:
    """Hashes whose last cached block the replayed pool of the run at `src` (the plan's figures
    `changes`d, as replayed() takes them) took for new content: the pool evicted (whether a later
    request wanted one of them again is the run's timing)."""
    from validator.judge.blockpool import BlockPool

    count = 0
    take = BlockPool.take

    def counted(pool, now, decode=None):
        nonlocal count
        before = len(pool.evicted_by)
        b = take(pool, now, decode)
        count += len(pool.evicted_by) - before
        return b

    BlockPool.take = counted  # type: ignore[method-assign]
    try:
        replayed(src, **changes)
    finally:
        BlockPool.take = take  # type: ignore[method-assign]
    return count


def wrong(preds, observed) -> int:
    return sum(not p.admits(observed[p.id]) for p in preds)
