"""loadgen in `vllm bench serve`'s language: its flag names with their meanings, and its result
JSON, read back by the installed vLLM's own code."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.results.benchjson import result
from loadgen.results.records import RequestRecord

ROOT = Path(__file__).resolve().parents[1]
BENCH_KEYS = {
    "date",
    "backend",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
}
ACCEPTANCE = [
    "--num-prompts",
    "12",
    "--max-concurrency",
    "4",
    "--random-input-len",
    "16",
    "--random-output-len",
    "8",
    "--save-result",
    "--save-detailed",
]


def loadgen(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def only_json(d: Path) -> dict:
    files = list(d.iterdir())
    assert len(files) == 1 and files[0].suffix == ".json", files
    return json.loads(files[0].read_text())


def test_bench_flags_write_vllm_bench_result_json(stub_url, tmp_path):
    d = tmp_path / "results"
    r = loadgen(
        "--base-url",
        stub_url,
        "--model",
        "M",
        *ACCEPTANCE,
        "--result-dir",
        str(d),
        "--out",
        str(tmp_path / "lg"),
        "--quiet",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--goodput",
        "ttft:10000",
        "--metadata",
        "team=infra",
    )
    assert r.returncode == 0, r.stderr
    res = only_json(d)
    assert BENCH_KEYS <= set(res)
    assert (res["completed"], res["failed"], res["num_prompts"]) == (12, 0, 12)
    assert (res["total_input_tokens"], res["total_output_tokens"]) == (192, 96)
    assert (res["max_concurrency"], res["request_rate"], res["backend"], res["team"]) == (4, "inf", "openai", "infra")
    assert len(res["ttfts"]) == 12 and [len(x) for x in res["itls"]] == [7] * 12
    assert res["input_lens"] == [16] * 12 and res["output_lens"] == [8] * 12 and res["errors"] == [""] * 12
    for m in ("ttft", "tpot", "itl", "e2el"):
        assert {f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p50_{m}_ms", f"p99_{m}_ms"} <= set(res)
    # seconds in the lists, milliseconds in the aggregates, as vLLM writes them
    assert res["median_ttft_ms"] == pytest.approx(statistics.median(res["ttfts"]) * 1e3)
    assert res["request_goodput"] == pytest.approx(res["request_throughput"])  # every TTFT under 10 s
    assert res["request_throughput"] == pytest.approx(12 / res["duration"])


def test_both_vocabularies_describe_the_same_run(stub_url, tmp_path):
    own = loadgen(
        "--url",
        stub_url,
        "--model",
        "M",
        "--requests",
        "6",
        "--concurrency",
        "2",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "4",
        "--out",
        str(tmp_path / "a"),
        "--quiet",
    )
    bench = loadgen(
        "--base-url",
        stub_url,
        "--model",
        "M",
        "--num-prompts",
        "6",
        "--max-concurrency",
        "2",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--out",
        str(tmp_path / "b"),
        "--quiet",
    )
    assert own.returncode == bench.returncode == 0
    a, b = (json.loads((tmp_path / x / "summary.json").read_text()) for x in "ab")
    assert a["config"]["concurrency"] == b["config"]["concurrency"] == 2
    assert (a["ok"], a["prompt_tokens"], a["output_tokens"]) == (b["ok"], b["prompt_tokens"], b["output_tokens"])


def test_warmups_and_range_ratio_follow_vllm_bench(stub_url, tmp_path):
    d = tmp_path / "r"
    r = loadgen(
        "--base-url",
        stub_url,
        "--model",
        "M",
        "--num-prompts",
        "10",
        "--num-warmups",
        "2",
        "--request-rate",
        "200",
        "--max-concurrency",
        "3",
        "--random-input-len",
        "100",
        "--random-range-ratio",
        "0.5",
        "--random-output-len",
        "4",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(d),
        "--out",
        str(tmp_path / "lg"),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    res = only_json(d)
    assert res["num_prompts"] == 10 and res["completed"] == 10 and len(res["ttfts"]) == 10  # warm-ups left out
    assert all(50 <= n <= 150 for n in res["input_lens"]) and len(set(res["input_lens"])) > 1
    assert (res["request_rate"], res["max_concurrency"]) == (200.0, 3)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--request-rate", "0"], "--request-rate"),
        (["--random-range-ratio", "1.5"], "--random-range-ratio"),
        (["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
        (["--metric-percentiles", "101"], "--metric-percentiles"),
        (["--goodput", "ttft=5"], "--goodput"),
        (["--metadata", "novalue"], "--metadata"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--max-concurrency", "2", "--concurrency", "3"], "--max-concurrency"),
    ],
)
def test_bad_bench_flags_are_one_line_exit_2(args, needle, tmp_path):
    r = loadgen("--base-url", "http://127.0.0.1:9", "--model", "M", *args, "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_result_aggregates_match_vllm_definitions():
    """Hand-made records: TPOT = (latency - TTFT) / (tokens - 1); failed requests count, with TTFT 0 in
    the detailed list and out of every aggregate."""
    ok = RequestRecord(id="a")
    ok.status, ok.chunk_times, ok.output_tokens, ok.prompt_tokens = 200, [0.1, 0.3, 0.6], 3, 10
    bad = RequestRecord(id="b", error="HTTP 503: busy", status=503)
    res = result(
        [ok, bad],
        2.0,
        backend="openai",
        model_id="m",
        num_prompts=2,
        request_rate=None,
        burstiness=1.0,
        max_concurrency=None,
        percentile_metrics=("ttft", "tpot", "itl", "e2el"),
        detailed=True,
    )
    assert (res["completed"], res["failed"], res["total_output_tokens"]) == (1, 1, 3)
    assert res["mean_tpot_ms"] == pytest.approx(250.0)  # (0.6 - 0.1) / 2
    assert res["mean_itl_ms"] == pytest.approx(250.0) and res["p99_e2el_ms"] == pytest.approx(600.0)
    assert res["ttfts"] == [0.1, 0.0] and res["itls"][1] == [] and res["errors"] == ["", "HTTP 503: busy"]
    assert res["request_throughput"] == 0.5 and res["output_throughput"] == 1.5


@pytest.mark.vllm
def test_a_result_on_real_vllm_is_read_back_by_vllms_own_code(tiny_server, tmp_path):
    d = tmp_path / "results"
    r = loadgen(
        "--base-url",
        tiny_server.url,
        "--model",
        "tiny",
        *ACCEPTANCE,
        "--result-dir",
        str(d),
        "--out",
        str(tmp_path / "lg"),
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    (path,) = d.iterdir()
    # vLLM's sweep tooling loads an existing result file as its own (vllm/benchmarks/sweep/serve.py)
    reader = (
        "import json, sys; from pathlib import Path\n"
        "from vllm.benchmarks.sweep.param_sweep import ParameterSweepItem\n"
        "from vllm.benchmarks.sweep.serve import run_benchmark\n"
        "d = run_benchmark(None, ['vllm', 'bench', 'serve'], serve_overrides=ParameterSweepItem(),"
        " bench_overrides=ParameterSweepItem(), run_number=0, output_path=Path(sys.argv[1]), dry_run=False)\n"
        "print(json.dumps(d))"
    )
    out = subprocess.run([sys.executable, "-c", reader, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    back = json.loads(out.stdout.strip().splitlines()[-1])
    assert (back["completed"], back["total_input_tokens"], back["total_output_tokens"]) == (12, 192, 96)
    assert back["run_number"] == 0 and len(back["ttfts"]) == 12
