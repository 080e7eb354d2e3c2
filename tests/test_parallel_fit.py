"""The tensor-parallel splits vLLM refuses before it profiles any memory, refused by the plan with
the fix (plan/parallel_fit.py), and --enable-expert-parallel, which lifts the FP8 block rule for
experts (Qwen3-235B-A22B FP8 on eight L40S: tests/data/vllm-gpu-starts/starts.csv)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from validator.errors import InputError
from validator.plan.model_shape import shape_from_config
from validator.plan.parallel_fit import check
from validator.plan.weights import count_weights

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests/data/vllm-gpu-starts/configs-kvgate"


def config(name: str) -> dict:
    return {k: v for k, v in json.loads((CONFIGS / name).read_text()).items() if not k.startswith("_")}


QWEN25_14B = config("Qwen__Qwen2.5-14B-Instruct.json")  # 40 attention heads, 8 KV heads
QWEN3_235B_FP8 = config("Qwen__Qwen3-235B-A22B-Instruct-2507-FP8.json")  # experts 1536 wide, 128x128 FP8 blocks


def refusal(cfg: dict, tp: int, ep: bool = False, version: tuple[int, int, int] = (0, 32, 0)) -> str | None:
    try:
        check(shape_from_config(cfg), tp, ep, version)
    except InputError as e:
        return str(e)
    return None


def test_the_attention_heads_must_divide_by_the_tp_size():
    """A public run of Qwen2.5-Coder-14B at TP 3 on L40S: "Total number of attention heads (40) must be
    divisible by tensor parallel size (3)" (stored copy id 57465200396). The plan says so first."""
    said = refusal(QWEN25_14B, 3)
    assert said is not None and said.startswith("hardware.tensor_parallel_size:")
    assert "40 attention heads" in said and "use 1, 2, 4, 8" in said
    assert refusal(QWEN25_14B, 8) is None and refusal(QWEN25_14B, 2) is None


def test_the_kv_heads_split_evenly_or_replicate_to_whole_ranks():
    """TP 5 divides Qwen2.5-14B's 40 query heads but not its 8 KV heads (QKVParallelLinear's divide);
    TP 16 on Qwen3-235B's 4 KV heads replicates each to 4 ranks, TP 6 cannot."""
    said = refusal(QWEN25_14B, 5)
    assert said is not None and "8 KV heads" in said and "use 1, 2, 4, 8" in said
    assert refusal({**QWEN3_235B_FP8, "num_attention_heads": 48}, 6) is not None  # 48 heads divide; 4 KV do not
    assert refusal(QWEN3_235B_FP8, 16, ep=True) is None


def test_fp8_blocks_split_by_tp_must_stay_whole_unless_experts_are_whole():
    """Qwen3-235B-A22B FP8 at TP 8 on vLLM 0.10.2: each expert's 1536 split eight ways is 192, not a
    multiple of the 128-wide blocks (validate_fp8_block_shape_moe); TP 4 gives 384; with expert
    parallelism the experts stay whole and TP 8 starts, as the L40S row did. vLLM 0.32 refines the
    blocks to 64 instead (gcd of 128, 192 and 4096) and takes TP 8 as it is. Whole experts hold the
    same bytes a rank as the split: 27.716 GiB counted (each rank holding one of the 4 KV heads) for
    that row's 27.72 logged."""
    old = (0, 10, 2)
    said = refusal(QWEN3_235B_FP8, 8, version=old)
    assert said is not None and "192" in said and "--enable-expert-parallel" in said
    assert refusal(QWEN3_235B_FP8, 4, version=old) is None and refusal(QWEN3_235B_FP8, 8, True, old) is None
    assert refusal(QWEN3_235B_FP8, 8) is None
    narrow = {**QWEN3_235B_FP8, "moe_intermediate_size": 384}  # 48 a rank at TP 8: blocks of 16, not refined
    assert refusal(narrow, 8) is not None and refusal(narrow, 8, ep=True) is None
    rank = count_weights(shape_from_config(QWEN3_235B_FP8), None, tp=8).held_bytes(8, 1) / 2**30
    assert abs(rank - 27.72) < 0.01
    dense_fp8 = {**QWEN25_14B, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    said = refusal(dense_fp8, 8)  # 13824 / 8 = 1728 of down_proj's input a rank: 13.5 blocks, in every version
    assert said is not None and "down_proj inputs" in said and "--enable-expert-parallel" not in said
    assert refusal(dense_fp8, 4) is None  # 3456 = 27 blocks


def test_expert_parallelism_needs_experts_and_is_read_in_every_spelling_vllm_reads():
    said = refusal(QWEN25_14B, 2, ep=True)
    assert said is not None and said.startswith("vllm.extra_args: --enable-expert-parallel")
    from validator.plan.parallel_fit import expert_parallel

    assert all(expert_parallel([w]) for w in ("--enable-expert-parallel", "--enable_expert_parallel", "-ep"))
    assert not expert_parallel(["--enable-expert-parallelism-not", "--enforce-eager"])


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "validator", "--plan-only", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def qwen3_235b(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_235B_FP8))
    model = ["--model", str(tmp_path), "--platform", "gpu", "--gpu-memory-bytes", "44.42GiB"]
    return [*model, "--max-model-len", "32768", "--vllm-version", "0.10.2"]


def test_the_cli_refuses_with_exit_2_and_plans_with_the_flag(qwen3_235b):
    refused = validate(*qwen3_235b, "--tensor-parallel-size", "8")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--enable-expert-parallel" in refused.stderr
    planned = validate(*qwen3_235b, "--tensor-parallel-size", "8", "--enable-expert-parallel", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["max_num_seqs"] >= 1 and "experts whole on each rank" in plan["ledger"]["sources"]["weights_bytes"]
    assert abs(plan["ledger"]["weights_bytes"] / 2**30 - 27.72) < 0.01  # the L40S row's logged share
    newer = [a if a != "0.10.2" else "0.32.0" for a in qwen3_235b]  # vLLM 0.32 refines the blocks instead
    assert validate(*newer, "--tensor-parallel-size", "8").returncode == 0


def test_more_gpus_are_offered_only_where_vllm_would_start(qwen3_235b):
    """At TP 4 the 55 GiB a rank do not fit a 44 GiB L40S: the ways out offer TP 8 only with expert
    parallelism, where vLLM would start it."""

    def offered(*extra: str) -> list[int]:
        r = validate(*qwen3_235b, "--tensor-parallel-size", "4", "--json", *extra)
        assert r.returncode == 1, r.stderr
        return [w.get("tensor_parallel_size") for w in json.loads(r.stdout)["ways_out"] if w["way"] == "more GPUs"]

    assert offered() == [] and offered("--enable-expert-parallel") == [8]


def test_more_gpus_are_planned_with_each_sizes_own_share_of_the_weights():
    """Llama-3.1-8B from its config.json on an 18 GiB GPU: 15 GiB of weights leave too little at TP 1;
    at TP 2 a rank holds half and the plan fits. The way out is offered, and planned as offered, fits
    (before, the ways out reused TP 1's share at every size and offered none)."""
    base = ["--profile", "profiles/llama-3.1-8b.yaml", "--gpu-memory-bytes", "18GiB", "--json"]
    r = validate(*base)
    assert r.returncode == 1, r.stderr
    ways = [w for w in json.loads(r.stdout)["ways_out"] if w["way"] == "more GPUs"]
    assert [w["tensor_parallel_size"] for w in ways] == [2]
    w = ways[0]
    as_offered = f"--tensor-parallel-size 2 --max-model-len {w['max_model_len']} --max-num-seqs {w['max_num_seqs']}"
    q = validate(*base, *as_offered.split())
    assert q.returncode == 0, q.stderr
    half = json.loads(q.stdout)["ledger"]["weights_bytes"] / 2**30
    assert 7.4 < half < 7.6
