"""Predictions and checks on constructed data: the block model against DESIGN.md §3's measured
cases, and every check shown able to fail."""

import copy

import numpy as np

from loadgen.records import RequestRecord
from validator.compare import bucket_of, judge
from validator.predict import Held, PrefixCacheModel, block_keys, final_peak, kv_blocks_at
from validator.profile import from_dict
from validator.runs import RunData
from validator.scrape import Histogram, Sample

BS = 32


def prompts_with_shared_prefix(n, prefix=256, total=384, seed=0):
    rng = np.random.default_rng(seed)
    shared = rng.integers(10, 500, size=prefix).tolist()
    return [shared + rng.integers(10, 500, size=total - prefix).tolist() for _ in range(n)]


def test_prefix_cache_matches_vllm_measurements():
    # DESIGN.md §3, vLLM 0.32 CPU, block 32: 4 prompts of 384 sharing 256 tokens, sent at once into
    # a freshly reset cache: 768 hit tokens (3 x 256); the same 4 again: 1408 (4 x 352, the len-1 cap)
    p = prompts_with_shared_prefix(4)
    cache = PrefixCacheModel(BS, capacity_blocks=64)
    assert sum(cache.request(x) for x in p) == 768
    assert sum(cache.request(x) for x in p) == 1408


def test_prefix_cache_forgets_on_reset_and_evicts_lru():
    p = prompts_with_shared_prefix(1)[0]
    cache = PrefixCacheModel(BS, capacity_blocks=64)
    cache.request(p)
    cache.reset()
    assert cache.request(p) == 0
    small = PrefixCacheModel(BS, capacity_blocks=12)
    small.request(p)                                   # 12 full blocks cached
    small.request(prompts_with_shared_prefix(1, seed=9)[0])  # 12 others push them out
    assert small.request(p) == 0


def test_kv_blocks_with_a_shared_prefix_match_the_measured_peak():
    # DESIGN.md §3: 64 usable blocks of 32, 4 requests of 384 + 128 sharing a 256-token prefix:
    # peak 40 blocks = 8 shared + 4 x 8 own (384 + 127 positions = 16 blocks each)
    p = prompts_with_shared_prefix(4)
    held = [Held(0.0, [0.01 * (k + 1) for k in range(128)], 384, tuple(block_keys(x, BS))) for x in p]
    assert kv_blocks_at(held, 1.28, BS) == 40
    assert final_peak(held, BS, max_running=4) == 40
    unshared = [Held(0.0, h.chunk_times, 384, ()) for h in held]
    assert kv_blocks_at(unshared, 1.28, BS) == 64


def test_final_peak_is_capped_by_max_running():
    held = [Held(0.0, [1.0], 480, ()) for _ in range(8)]  # 8 overlap at the client, 4 run at once
    assert final_peak(held, BS, max_running=4) == 4 * 15


def test_bucket_of_is_bucket_aware():
    h = Histogram([(0.01, 2.0), (0.05, 9.0), (0.1, 10.0), (float("inf"), 10.0)], 10.0, 0.3)
    assert bucket_of(h, 0.5) == (0.01, 0.05)
    assert bucket_of(h, 0.99) == (0.05, 0.1)


# --- judge() on a constructed run that agrees with itself, then broken one way at a time ---

PLAN = {"max_num_seqs": 4, "max_model_len": 512, "block_size": BS, "usable_blocks": 64, "num_blocks": 65}


def sample(t, usage, running, waiting=0.0, **counters):
    values = {"kv_cache_usage_perc": usage, "num_requests_running": running, "num_requests_waiting": waiting,
              "prefix_cache_queries": None, "prefix_cache_hits": None, "num_preemptions": None,
              "prompt_tokens": None, "generation_tokens": None, "request_success": None}
    values.update(counters)
    return Sample(t, values, t_sent=t)


def ttft_hist(count, upper=0.05):
    return Histogram([(0.01, 0.0), (upper, float(count)), (float("inf"), float(count))], float(count), 0.02 * count)


def itl_hist(count):
    return Histogram([(0.005, 0.0), (0.01, float(count)), (float("inf"), float(count))], float(count), 0.008 * count)


def cold_run():
    """4 unshared requests of 480 + 32 tokens at t0 = 100 s; the server saw 64 blocks at the top."""
    t0 = 100.0
    rng = np.random.default_rng(1)
    recs, prompts = [], {}
    for i in range(4):
        rid = f"n{i}"
        prompts[rid] = rng.integers(10, 500, size=480).tolist()
        recs.append(RequestRecord(id=rid, sent=0.0, chunk_times=[0.02 + 0.008 * k for k in range(32)],
                                  asked_prompt_tokens=480, asked_output_tokens=32, prompt_tokens=480,
                                  output_tokens=32, status=200, finish_reason="length"))
    before = sample(t0 - 1, 0.0, 0, prefix_cache_queries=0.0, prefix_cache_hits=0.0, num_preemptions=0.0)
    before.histograms = {"ttft": ttft_hist(0), "itl": itl_hist(0)}
    after = sample(t0 + 1, 0.0, 0, prefix_cache_queries=1920.0, prefix_cache_hits=0.0, num_preemptions=0.0)
    after.histograms = {"ttft": ttft_hist(4), "itl": itl_hist(4 * 31)}
    samples = [sample(t0 + 0.1, 1.0, 4), sample(t0 + 0.2, 1.0, 4)]
    return RunData("cold", "cold", "", recs, prompts, t0, t0 + 0.3, before, after, samples, "reset", True)


def values(**tol):
    v = from_dict({"slo": {"ttft_p99_ms": 1000, "itl_p99_ms": 100}}).values
    v["tolerances"].update(tol)
    return v


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_consistent_run_passes():
    checks, figures = judge(PLAN, [cold_run()], values())
    failed = [c.name for c in checks if c.passed is False]
    assert failed == []
    c = by_name(checks)
    assert c["cold.kv_peak_blocks"].expected == 64 and c["cold.kv_peak_blocks"].passed
    assert c["cold.prefix_queries"].passed and c["cold.prefix_hits"].passed
    assert c["cold.kv_utilization"].observed == 1.0


def broken(mutate):
    run = cold_run()
    mutate(run)
    return by_name(judge(PLAN, [run], values())[0])


def test_kv_above_the_arithmetic_fails():
    def more(run):
        run.prompts = {k: v for k, v in run.prompts.items()}
        for r in run.records:
            r.prompt_tokens = 400   # the client believes the requests were shorter than the server saw
    c = broken(more)
    assert c["cold.kv_peak_blocks"].passed is False


def test_prefix_hits_disagreeing_fail():
    def hits(run):
        run.after.values["prefix_cache_hits"] = 256.0
    assert broken(hits)["cold.prefix_hits"].passed is False


def test_preemptions_fail_at_the_limits():
    def pre(run):
        run.after.values["num_preemptions"] = 3.0
    assert broken(pre)["cold.preemptions"].passed is False


def test_low_utilisation_fails():
    def low(run):
        run.samples = [sample(100.1, 0.5, 4)]
    c = broken(low)
    assert c["cold.kv_utilization"].passed is False


def test_token_mismatch_fails():
    def short(run):
        run.records[0].token_mismatch = "output asked 32 served 30"
    assert broken(short)["cold.tokens_exact"].passed is False


def test_client_far_from_server_histogram_fails():
    def slow(run):
        for r in run.records:
            r.chunk_times = [t + 2.0 for t in r.chunk_times]  # 2 s more than the server counted
    c = broken(slow)
    assert c["cold.ttft_p50_client_vs_server"].passed is False


def test_slo_breach_fails():
    c = by_name(judge(PLAN, [cold_run()], values())[0])
    assert c["slo.ttft_p99_ms"].passed is True
    v = values()
    v["slo"]["ttft_p99_ms"] = 1.0
    assert by_name(judge(PLAN, [cold_run()], v)[0])["slo.ttft_p99_ms"].passed is False


def test_probe_without_evidence_of_waiting_fails():
    run = cold_run()
    run.name, run.cache = "probe", "probe"
    extra = copy.deepcopy(run.records)
    for r in extra:
        r.id = r.id + "x"  # 4 more requests that started and finished with the first 4
    run.records += extra
    run.prompts.update({r.id: run.prompts[r.id[:-1]] for r in extra})
    c = by_name(judge(PLAN, [run], values())[0])
    assert c["probe.queueing"].passed is False
    for r in extra:  # now they got their first token only after the first ones finished
        r.sent = 0.0
        r.chunk_times = [t + 0.3 for t in r.chunk_times]
    c = by_name(judge(PLAN, [run], values())[0])
    assert c["probe.queueing"].passed is True


def test_missing_metrics_are_not_measured_not_zero():
    def gone(run):
        for s in (run.before, run.after):
            s.values["prefix_cache_hits"] = None
        run.samples = []
    c = broken(gone)
    assert c["cold.prefix_hits"].passed is None and c["cold.prefix_hits"].observed is None
    assert c["cold.kv_peak_blocks"].passed is None


def test_kv_timeline_off_the_prediction_fails():
    def low(run):
        run.samples = [sample(100.1, 0.25, 4), sample(100.2, 0.25, 4)]  # 16 blocks while 4 x 16 were held
    c = broken(low)
    assert c["cold.kv_timeline"].passed is False and c["cold.kv_timeline"].observed == 48


def test_kv_timeline_allows_for_a_stalled_client():
    def stalled(run):
        for r in run.records:   # all chunks arrived in one burst 0.5 s late: the client's clock trails
            r.chunk_times = [0.02 + 0.008 * k for k in range(16)] + [0.7] * 16
        run.samples = [sample(100.6, 1.0, 4)]
    c = broken(stalled)
    assert c["cold.kv_timeline"].passed is True
