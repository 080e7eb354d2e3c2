"""`validate --profile`: the whole job on real vLLM (CPU), its report, re-judging, and a lie that
must be caught."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_validate, tiny_profile_file, validate_until

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]


validate = run_validate


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_model):
    """The demo's job: validate --profile profiles/tiny-cpu.yaml, run once for this module."""
    tiny_model("tiny-gqa")
    out = tmp_path_factory.mktemp("demo") / "run"
    r = validate("--profile", "profiles/tiny-cpu.yaml", "--out", str(out))
    return r, out


def test_demo_passes_end_to_end(demo_run):
    r, out = demo_run
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "pass"
    assert [(x["name"], x["cache"]) for x in rep["runs"]] == [
        ("cold", "cold"), ("warm-prime", "prime"), ("warm", "warm"), ("probe", "probe")]
    names = {c["name"] for c in rep["checks"]}
    for needed in ("startup.num_gpu_blocks", "cold.kv_peak_blocks", "cold.kv_utilization", "cold.prefix_hits",
                   "warm.prefix_hits", "cold.ttft_p50_client_vs_server", "cold.itl_p99_client_vs_server",
                   "probe.queueing", "slo.ttft_p99_ms", "slo.itl_p99_ms"):
        assert needed in names
    checks = {c["name"]: c for c in rep["checks"]}
    # what must hold exactly on any machine: blocks, prefix-cache arithmetic, token counts
    assert checks["startup.num_gpu_blocks"]["observed"] == 65
    assert checks["warm.prefix_hits"]["observed"] == checks["warm.prefix_hits"]["expected"] == 16 * 256
    assert checks["cold.prefix_hits"]["observed"] == 0
    assert checks["cold.kv_peak_blocks"]["passed"] is True and checks["cold.kv_peak_blocks"]["observed"] == 64
    # cold and warm kept apart: the cache was reset before the cold run and the warm prime
    assert {x["name"]: x["isolation"] for x in rep["runs"]}["cold"] in ("reset", "salt")
    for f in ("report.html", "summary.md", "metrics.jsonl", "vllm.log", "plan.json", "startup.json",
              "runs/cold/records.jsonl", "runs/warm/records.jsonl", "runs/probe/records.jsonl",
              "runs/cold/workload.jsonl"):
        assert (out / f).stat().st_size > 0, f
    assert "verdict: pass" in r.stdout and "cold.kv_peak_blocks" in r.stdout


def test_rejudge_gives_the_same_verdict_and_sees_tampering(demo_run, tmp_path):
    _, out = demo_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    before = {c["name"]: c["passed"] for c in json.loads((copy / "report.json").read_text())["checks"]}
    r = validate("--report", str(copy), "--json")
    assert r.returncode == 0, r.stderr
    after = {c["name"]: c["passed"] for c in json.loads(r.stdout)["checks"]}
    assert after == before
    # a served output count that differs from the asked one must now fail the run it belongs to
    rec_path = copy / "runs" / "warm" / "records.jsonl"
    lines = rec_path.read_text().splitlines()
    first = json.loads(lines[0])
    first["token_mismatch"] = "output asked 32 served 31"
    rec_path.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    r = validate("--report", str(copy), "--json")
    assert r.returncode == 1
    failed = {c["name"] for c in json.loads(r.stdout)["checks"] if c["passed"] is False}
    assert failed == {"warm.tokens_exact"}


def test_report_renders_in_chromium_with_its_plots(demo_run, tmp_path):
    _, out = demo_run
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is installed by scripts/bootstrap.sh (Debian package chromium)"
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"]
    url = (out / "report.html").as_uri()
    dom = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert "kvgate: <span class=\"pass\">PASS</span>" in dom
    assert dom.count('data-kind="lines"') == 3          # KV blocks over time: cold, warm, probe
    assert dom.count('data-kind="cdf"') == 2            # TTFT and ITL, cold vs warm
    assert dom.count('data-kind="bar"') == 1            # the memory ledger
    assert 'data-name="observed (kv_cache_usage_perc x usable)"' in dom
    png = tmp_path / "report.png"
    subprocess.run([*args, "--window-size=1000,2400", f"--screenshot={png}", url], capture_output=True,
                   timeout=120)
    assert png.stat().st_size > 50_000  # a page with tables and charts, not a blank one


def test_a_lie_about_kv_space_fails_the_startup_checks(tmp_path, tiny_model):
    """The plan says 1 GiB of KV; the server is given 2 GiB behind the plan's back."""
    prof = yaml.safe_load((ROOT / "profiles" / "tiny-cpu.yaml").read_text())
    prof["model"]["path"] = str(tiny_model("tiny-gqa"))
    prof["cache"].pop("num_gpu_blocks_override")
    prof["vllm"]["env"] = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    prof["tolerances"]["min_kv_utilization"] = 0  # 64 of 32767 blocks: this check is not the point here
    f = tmp_path / "lie.yaml"
    f.write_text(yaml.safe_dump(prof))
    r = validate("--profile", str(f), "--out", str(tmp_path / "run"), "--json")
    assert r.returncode == 1, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    failed = {c["name"] for c in rep["checks"] if c["passed"] is False}
    assert {"startup.num_gpu_blocks", "startup.kv_cache_tokens", "startup.max_concurrency",
            "startup.max_concurrency_logged"} <= failed
    # the lie is caught at start-up; prefix, token and error checks still hold
    assert all(n.startswith("startup.") or n.endswith("kv_peak_blocks") for n in failed), failed
    blocks = {c["name"]: c for c in rep["checks"]}["startup.num_gpu_blocks"]
    assert (blocks["expected"], blocks["observed"]) == (32768, 65536)


def test_vllm_killed_mid_run_exits_3_and_keeps_what_was_recorded(tmp_path, tiny_model):
    import signal
    import time

    f = tiny_profile_file(tiny_model, tmp_path)
    out = tmp_path / "run"
    p, pid = validate_until(["--profile", str(f), "--out", str(out)], "run probe:")  # the probe lasts seconds
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    rest = p.stderr.read()
    assert p.wait(timeout=60) == 3, rest
    assert time.monotonic() - t_kill < 15
    assert "vLLM died during the probe run" in rest
    rep = json.loads((out / "report.json").read_text())
    assert rep["verdict"] == "error" and "died" in rep["error"]
    runs = {r["name"]: r for r in rep["runs"]}
    assert runs["cold"]["client"]["ok"] == 16 and runs["warm"]["client"]["ok"] == 16
    assert runs["probe"]["interrupted"] is True
    assert (out / "runs" / "probe" / "records.jsonl").exists()
    assert (out / "metrics.jsonl").stat().st_size > 0
