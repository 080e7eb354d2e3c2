"""The planner against start-up figures recorded from real vLLM (tests/vllm_cases.py).

Offline and fast; tests/test_vllm_live.py measures the same cases on a live server.
"""

import pytest

from tests.vllm_cases import CACHE_EXTRA, CASES, CASES_BF16_STATE, REFUSAL, SLIDING_SWEEP, profile_for
from validator.inputs import plan_input_from_profile
from validator.plan.limits import make_plan
from validator.profile import from_dict


def plan_for(tiny_model, case, **extra):
    model, *rest = case
    return make_plan(plan_input_from_profile(from_dict(profile_for(tiny_model(model), *rest[:7], **extra))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_equals_recorded_vllm(name, tiny_model):
    case = CASES[name]
    blocks, tokens, conc = case[8:]
    # the recording host has AVX-512 BF16, so vLLM kept the recurrent state in float32: said here so
    # that the test holds on any host (test_hybrid.py checks the host rule itself)
    p = plan_for(tiny_model, case[:8], mamba_ssm_cache_dtype="float32", **CACHE_EXTRA.get(name, {}))
    assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == (blocks, tokens, conc)


@pytest.mark.parametrize("name", sorted(CASES_BF16_STATE))
def test_plan_equals_recorded_vllm_with_the_state_in_bfloat16(name, tiny_model):
    """The same starts recorded on a host without AVX-512 BF16, where vLLM keeps the state in the
    model's bfloat16: 1.1 to 1.9 times the blocks of the float32 recordings."""
    case = CASES[name]
    p = plan_for(tiny_model, case[:8], mamba_ssm_cache_dtype="bfloat16", **CACHE_EXTRA.get(name, {}))
    assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == CASES_BF16_STATE[name]
    assert CASES_BF16_STATE[name] != case[8:]


@pytest.fixture(scope="module")
def window_models(tiny_model, tmp_path_factory):
    """tiny-sliding with its window rewritten (config.json only: the weights do not depend on it)."""
    import json
    import shutil

    src = tiny_model("tiny-sliding")
    out = {}
    for w in sorted({k[0] for k in SLIDING_SWEEP}):
        d = tmp_path_factory.mktemp(f"sw{w}") / "model"
        shutil.copytree(src, d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["sliding_window"] = w
        (d / "config.json").write_text(json.dumps(cfg))
        out[w] = d
    return out


@pytest.mark.parametrize("key", sorted(SLIDING_SWEEP), ids=lambda k: "w{}-b{}-t{}".format(*k))
def test_sliding_window_footprint_equals_recorded_vllm(key, window_models):
    """Window, block size and batched tokens each change the per-request footprint (window - 1 +
    in-flight tokens, block-rounded, plus one block): every combination as vLLM reported it."""
    w, b, t = key
    p = make_plan(plan_input_from_profile(from_dict(profile_for(window_models[w], 1, b, 4096, 8, t, "auto", None))))
    assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == SLIDING_SWEEP[key]


def test_refusal_estimate_equals_recorded_vllm(tiny_model):
    p = plan_for(tiny_model, REFUSAL[:8])
    assert not p.fits
    assert f"estimated maximum model length: {REFUSAL[8]}" in p.reasons[0]
