"""Start-ups whose source quotes the KV cache's size in tokens but not "Available KV cache memory":
the blocks vLLM made of the memory (tokens / block size) bound it to within one block, so the
prediction from config.json and the launch flags is checked on the blocks, within 3 % as the
memory is (tests/test_gpu_memory.py), or named as a miss with what it misses by."""

from __future__ import annotations

from tests.test_gpu_memory import BLOCKS_MISSES, BY_BLOCKS, BY_BLOCKS_WITHIN, ROWS, _f, predict, shape_for
from validator.plan.capacity import KVLayout, layer_specs
from validator.units import GiB


def predicted_blocks(r) -> int:
    layout = KVLayout.from_specs(layer_specs(shape_for(r), int(r["block_size"]), r["kv_cache_dtype"] or "auto"))
    return predict(r).kv_cache_bytes // layout.bytes_per_block


def test_the_rows_checked_by_their_blocks():
    assert [(r["model"], r["vllm_version"], r["gpu"]) for r in BY_BLOCKS] == [
        ("Qwen/Qwen3-8B", "0.24.0", "RTX 5090 (32 GB)")
    ]


def test_blocks_within_3_percent():
    for r in BY_BLOCKS_WITHIN:
        logged, pred = int(r["num_gpu_blocks"]), predicted_blocks(r)
        assert abs(pred - logged) <= 0.03 * logged, (r["model"], pred, logged)


def test_the_rtx_5090_start_misses_by_what_the_same_sources_rtx_4090_start_does_not_spend():
    """Qwen3-8B under vLLM 0.24.0 (the V2 model runner, which reserves nothing for CUDA graphs before
    0.28.1), the same author and flags on two cards: the RTX 4090's start leaves 0.77 GiB of the
    requested memory beside weights and KV, the plan 0.60, within 3 %; the RTX 5090's (Blackwell)
    leaves 1.35 GiB: 5,907 blocks predicted, 5,565 logged, 6 % over. Its weights are counted to the
    log's 15.27 GiB; what the extra 0.58 GiB on Blackwell is, the source does not print."""
    (r,) = [r for r in BY_BLOCKS if (r["model"], r["vllm_version"], r["gpu"]) in BLOCKS_MISSES]
    (ada,) = [x for x in ROWS if x["vllm_version"] == "0.24.0" and x["gpu"].startswith("RTX 4090")]
    logged, pred = int(r["num_gpu_blocks"]), predicted_blocks(r)
    assert pred - logged > 0.03 * logged
    assert abs(predict(r).weights.bytes / GiB - _f(r["weights_gib"])) < 0.01

    weights = _f(r["weights_gib"])  # the RTX 4090's source quotes none: the same checkpoint, 15.27 GiB

    def left(x, kv_gib: float) -> float:  # requested - weights - KV, in GiB
        return float(x["gpu_memory_utilization"]) * _f(x["gpu_total_gib"]) - weights - kv_gib

    blackwell, on_ada = left(r, logged * 16 * 147_456 / GiB), left(ada, _f(ada["available_kv_gib"]))
    assert abs(blackwell - 1.35) < 0.01 and abs(on_ada - 0.77) < 0.01
    m = predict(ada)
    planned = (m.activation_peak.bytes + m.non_torch.bytes) / GiB
    assert not m.cudagraph_subtracted and abs(planned - 0.60) < 0.01
    assert abs(m.kv_cache_bytes / GiB - 6.03) < 0.03 * 6.03


def test_the_later_start_of_that_source_is_what_more_utilization_gives():
    """The source's later start (95,936 tokens, 5,996 blocks; its flags not given, the author puts the
    gap down to a compile cache) is 431 blocks more: what 0.03 more utilization of 31.36 GiB gives
    (0.94 GiB, 428 blocks of 2.25 MiB)."""
    (r,) = BY_BLOCKS
    later = {**r, "gpu_memory_utilization": "0.95"}
    assert abs((predicted_blocks(later) - predicted_blocks(r)) - (5_996 - 5_565)) <= 4
