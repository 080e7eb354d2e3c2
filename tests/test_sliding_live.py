"""Sliding-window layers only (Mistral-7B-v0.1's layout: one KV group of window 128, no full-attention
group) on real vLLM (CPU). vLLM 0.32 looks such a group up over the whole prompt, right to left (a run
of the window's blocks anywhere in the prompt's chain is a hit, whatever before it was evicted), and
caches only its checkpoint: the window's blocks before each prompt's last token, with no junction of
a shared prefix (no other group's longer hit to find one). The freezes, prefix hits and per-request
cached tokens follow that and are judged, where they were `not measured`."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests import doctor
from tests.conftest import ROOT, TEST_CPU, run_validate
from tests.doctor import evicted, replayed, wrong
from tests.test_datasets_live import TRACE, checks, model_server, one_block_more_fails, url_run
from tests.test_sweep_live import kvbound_sweep

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def sliding_server(tiny_model, tmp_path_factory):
    """67 blocks: two requests of 1,024 tokens as vLLM reserves them (33 blocks each: the window and
    the step's tokens, block-rounded, plus one) and the null block; the trace's requests evict."""
    yield from model_server(tiny_model, tmp_path_factory.mktemp("sliding-server"), "tiny-sliding", 67)


def test_a_trace_on_sliding_layers_only_is_exact_request_by_request(sliding_server, tmp_path):
    """The Mooncake trace: 48 of 48 requests exact (measured 1,984 hit tokens) and the run passes
    whole, its 4 freezes counting the copies the replayed pool held (the prefix model, which has no
    pool, gave t45 a 192-token hit vLLM did not: the freezes were not measured). The replayed pool
    evicts cached blocks (66 usable, the trace's checkpoints fill it); whether a later request wanted
    one of them is the run's timing (a never-evicting pool got 1 of 48 wrong in one run, none in a
    CI run of 2026-12-06), so that is not asserted. One full-attention group, or a full group beside
    the window (which would bound the hit and pin junctions) get requests wrong (24 and 18 of 48 when
    measured). A request doctored to one block more fails."""
    code, rep, err = url_run(sliding_server, tmp_path, *TRACE)
    c = checks(rep)
    assert code == 0 and rep["verdict"] == "pass", err
    assert all(c[f"dataset.freeze{k}.kv_blocks"]["status"] == "pass" for k in (1, 2, 3, 4))
    assert c["dataset.cached_tokens"]["status"] == "pass" and c["dataset.prefix_hits"]["status"] == "pass"
    assert "48 of 48 requests got exactly" in c["dataset.cached_tokens"]["explanation"]
    assert c["dataset.prefix_hits"]["observed"] > 0  # the window's checkpoints were hit: not a 0 = 0
    src = tmp_path / "run"
    groups = json.loads((src / "plan.json").read_text())["kv_groups"]
    assert [(g["kind"], g["sliding_window"]) for g in groups] == [("SlidingWindowSpec", 128)]
    preds, observed = replayed(src)
    assert wrong(preds, observed) == 0
    assert evicted(src) > 0  # the pool evicted; whether a later request wanted a block again is the run's timing
    full = {"kind": "FullAttentionSpec", "layers": 2, "page_size_bytes": 16384, "block_size": 32}
    assert wrong(*replayed(src, kv_groups=[full])) >= 1
    assert wrong(*replayed(src, kv_groups=[full, *groups])) >= 1
    one_block_more_fails(src, tmp_path / "a", preds, 32)


@pytest.fixture(scope="module")
def sliding_demo(tiny_model, tmp_path_factory):
    """The demo profile on the tiny Mistral (69 blocks: 4 sequences of 512 tokens reserve 17 each)."""
    d = tmp_path_factory.mktemp("sliding-demo")
    prof = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    prof["model"] |= {"path": str(tiny_model("tiny-sliding")), "build": "tiny-sliding"}
    prof["cache"]["num_gpu_blocks_override"] = 69
    prof["vllm"]["cpus"] = TEST_CPU
    f = d / "sliding.yaml"
    f.write_text(yaml.safe_dump(prof))
    r = run_validate("--profile", str(f), "--out", str(d / "run"))
    return r, d / "run"


def test_the_demo_on_sliding_layers_only_is_judged_whole(sliding_demo, tmp_path):
    """Every check measured and passed (the freezes and prefix hits were `not measured`: 11 of 87).
    The warm run's 24 prompts share a 256-token prefix and vLLM gives them no hit, as predicted: the
    window caches only each prompt's own tail, and with no other group no junction is pinned. A
    freeze doctored one block higher, or a hit on the shared prefix, fails."""
    r, out = sliding_demo
    rep = json.loads((out / "report.json").read_text())
    c = checks(rep)
    assert r.returncode == 0 and rep["verdict"] == "pass", r.stderr[-3000:]
    assert not [k for k, v in c.items() if v["status"] == "not_measured"]
    assert (c["warm.prefix_hits"]["expected"], c["warm.prefix_hits"]["observed"]) == (0, 0)
    assert c["warm.freeze1.kv_blocks"]["status"] == "pass" and c["cold.freeze1.kv_blocks"]["status"] == "pass"

    def one_block_more(d):
        def f(rows):
            for reading in rows[0]["readings"]:
                reading["values"]["kv_cache_usage_perc"] += 1 / 68

        doctor.edit_jl(d / "runs" / "warm" / "freezes.jsonl", f)

    def a_shared_prefix_hit(d):  # vLLM's hit counter 256 higher from the warm run's end on, everywhere
        end = json.loads((d / "runs" / "warm" / "meta.json").read_text())["after"]["t"]

        def later(sample):
            if sample and sample["t"] >= end:
                sample["values"]["prefix_cache_hits"] += 256

        for meta in (d / "runs").glob("*/meta.json"):
            doctor.edit_json(meta, lambda m: [later(m.get(k)) for k in ("before", "after")])
        doctor.edit_jl(d / "metrics.jsonl", lambda rows: [later(row) for row in rows])

    for fn, check in ((one_block_more, "warm.freeze1.kv_blocks"), (a_shared_prefix_hit, "warm.prefix_hits")):
        copy = tmp_path / fn.__name__
        shutil.copytree(out, copy)
        fn(copy)
        code, doctored = doctor.rejudge(copy)
        assert code == 1 and doctored["verdict"] == "fail", fn.__name__
        assert checks(doctored)[check]["status"] == "fail", (fn.__name__, checks(doctored)[check])


@pytest.fixture(scope="module")
def sliding_sweep(tiny_model, tmp_path_factory):
    """The capacity profile on the tiny Mistral with 21 blocks (20 usable): prompts of 64 tokens (2
    blocks) shorter than the window, each growing to 5 blocks as it decodes its 256 tokens."""
    d, model = tmp_path_factory.mktemp("sliding-sweep"), tiny_model("tiny-sliding")
    return kvbound_sweep(d, model, "3,4,5,6", blocks=21, prompt_tokens=64, output_tokens=256, bisect=0)


def test_a_sweep_on_sliding_layers_only_first_preempts_where_the_window_says(sliding_sweep, tmp_path):
    """A request of 64 + 256 tokens holds at most its window's 4 blocks and the one being filled: 20
    usable blocks hold 4 of them, where full attention's 10 blocks a request would hold 2. vLLM ran
    3-6 at once (admission is by the 2-block prompts), first preempted at 5 in flight, never at 3 or
    4, and the KV samples at 4 reached the bound exactly (20 = 4 x 5), as the ledger's run of the
    scheduler says; a preemption doctored in at 4, or a freeze one block higher, fails."""
    r, out = sliding_sweep
    rep = json.loads((out / "report.json").read_text())
    c = checks(rep)
    assert r.returncode == 0 and rep["verdict"] == "pass", r.stderr[-3000:]
    assert rep["sweep"]["kv_holds"] == 4 and "the KV cache holds 4 sequences of 64 + 256" in rep["sweep"]["line"]
    for n in (3, 4, 5, 6):
        got = (c[f"sweep-c{n}.admitted"], c[f"sweep-c{n}.waiting_at_start"], c[f"sweep-c{n}.freeze1.kv_blocks"])
        assert [(x["expected"], x["observed"], x["status"]) for x in got] == [
            (n, n, "pass"),
            (0, 0, "pass"),
            (3 * n, 3 * n, "pass"),  # at the freeze each holds its 64-token prompt and its first token: 3 blocks
        ]
    assert [c[f"sweep-c{n}.preemptions"]["observed"] for n in (3, 4)] == [0, 0]
    assert c["sweep-c5.preemptions"]["observed"] >= 1
    assert (c["sweep.first_preemption"]["expected"], c["sweep.first_preemption"]["observed"]) == (5, 5)
    assert (c["sweep-c4.kv_samples_bound"]["expected"], c["sweep-c4.kv_samples_bound"]["observed"]) == (20, 20)

    def a_preemption_at_4(d):
        def f(m):
            m["after"]["values"]["num_preemptions"] = m["before"]["values"]["num_preemptions"] + 1

        doctor.edit_json(d / "runs" / "sweep-c4" / "meta.json", f)

    def one_block_more(d):
        def f(rows):
            for reading in rows[0]["readings"]:
                reading["values"]["kv_cache_usage_perc"] += 1 / 20

        doctor.edit_jl(d / "runs" / "sweep-c4" / "freezes.jsonl", f)

    doctor.failing(out, tmp_path, a_preemption_at_4, ("sweep-c4.preemptions", "sweep.first_preemption"))
    doctor.failing(out, tmp_path, one_block_more, ("sweep-c4.freeze1.kv_blocks",))
