"""The planner against start-up figures recorded from real vLLM (tests/vllm_cases.py).

Offline and fast; tests/test_vllm_live.py measures the same cases on a live server.
"""

import pytest

from tests.vllm_cases import CASES, REFUSAL, profile_for
from validator.inputs import plan_input_from_profile
from validator.plan.limits import make_plan
from validator.profile import from_dict


def plan_for(tiny_model, case):
    model, *rest = case
    return make_plan(plan_input_from_profile(from_dict(profile_for(tiny_model(model), *rest[:7]))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_equals_recorded_vllm(name, tiny_model):
    case = CASES[name]
    blocks, tokens, conc = case[8:]
    p = plan_for(tiny_model, case[:8])
    assert (p.num_blocks, p.kv_cache_tokens, p.max_concurrency) == (blocks, tokens, conc)


def test_refusal_estimate_equals_recorded_vllm(tiny_model):
    p = plan_for(tiny_model, REFUSAL[:8])
    assert not p.fits
    assert f"estimated maximum model length: {REFUSAL[8]}" in p.reasons[0]
