"""The security review of issue 21, finding by finding: each case reproduced and the safe outcome
asserted. (Cases that need a real run directory or a real vLLM are in test_validate_live.py and
test_vllm_live.py; docs/reliability.md lists them all.)"""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loadgen import net
from tests.conftest import limit_child_memory
from validator.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def run(*args, env=None, timeout=60):
    """validate as a user runs it, in a child allowed 1 GiB of heap and bounded in time."""
    return subprocess.run(
        [sys.executable, "-m", "validator", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=limit_child_memory(1 << 30),
    )


def one_line_exit_2(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


# --- 2. owned flags in every spelling vLLM's parser accepts ---


@pytest.mark.parametrize(
    "args,field",
    [
        (["--enforce-eager", "--hos", "0.0.0.0"], "vllm.host"),
        (["--api-ke", "SECRET"], "vllm.api_key_env"),
        (["--max-model-l", "99999"], "limits.max_model_len"),
        (["--max-num-se=64"], "limits.max_num_seqs"),
        (["--block_si", "16"], "cache.block_size"),
        (["--served-model-na", "x"], "model.served_name"),
        (["--device-memory-utilization", "0.5"], "hardware.gpu_memory_utilization"),
        (["-t", "2"], "hardware.tensor_parallel_size"),
        (["--host.x", "1"], "vllm.host"),
        (["--conf", "f.yaml"], "--conf"),
        (["--", "--host", "0.0.0.0"], "bare --"),
    ],
)
def test_abbreviated_and_dotted_owned_flags_are_refused(args, field):
    from validator.serve.owned import validate_command, validate_extra_args

    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        validate_extra_args(args)
    with pytest.raises(InputError, match="vllm.command"):
        validate_command(["vllm", "serve", *args])


def test_kvgate_refuses_exactly_what_vllms_parser_would_turn_into_an_owned_setting():
    """vLLM's own parser (0.32, the installed one) as the judge: every prefix of an owned flag that it
    resolves to an owned setting is refused, and no flag of vLLM's that sets something else is."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from validator.serve.owned import OWNED_FIELD, validate_extra_args

    parser = make_arg_parser(FlexibleArgumentParser())
    dest = {s: a.dest for a in parser._actions for s in a.option_strings}
    owned_dests = {dest[f] for f in OWNED_FIELD}
    assert {f for f, d in dest.items() if d in owned_dests} <= set(OWNED_FIELD)  # no alias of vLLM's is missed
    for flag in OWNED_FIELD:
        for n in range(3 if flag.startswith("--") else 2, len(flag) + 1):
            word = flag[:n]
            hits = [s for s in dest if s.startswith(word)]
            if word in dest or len({dest[h] for h in hits}) == 1:  # vLLM would take it as that setting
                with pytest.raises(InputError):
                    validate_extra_args([word, "1"])
    for flag, d in dest.items():
        if (
            d not in owned_dests
            and flag not in ("-h", "--help", "--config")
            and not any(o.startswith(flag) for o in OWNED_FIELD)
        ):
            validate_extra_args([flag])  # accepted


def tiny_cpu_with(tmp_path, extra: str, model=ROOT / "profiles" / "models" / "qwen3-8b"):
    """profiles/tiny-cpu.yaml with `extra` after its --enforce-eager and `model` as its path."""
    prof = tmp_path / "p.yaml"
    prof.write_text(
        (ROOT / "profiles" / "tiny-cpu.yaml")
        .read_text()
        .replace("extra_args: [--enforce-eager]", f"extra_args: [--enforce-eager, {extra}]")
        .replace("path: ../models/tiny-gqa", f"path: {model}")
        .replace("build: tiny-gqa", "")
    )
    return prof


def test_extra_args_are_checked_with_url_too(tmp_path):
    prof = tiny_cpu_with(tmp_path, "--hos, 0.0.0.0")
    line = one_line_exit_2(run("--profile", str(prof), "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o")))
    assert "vllm.extra_args" in line and "--hos" in line and "vllm.host" in line


# --- 3. no ambient proxy, no redirect ---


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with `answer` (status, headers, body) and remembers what it was sent."""

    seen: list
    answer: tuple

    def _do(self):
        self.seen.append((self.command, self.path, self.headers.get("Authorization")))
        status, headers, body = self.answer
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_CONNECT = _do

    def log_message(self, *a):
        pass


def recorder(host: str, answer: tuple, port: int = 0):
    handler = type("R", (Recorder,), {"seen": [], "answer": answer})
    srv = http.server.ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, handler.seen


METRICS = b'# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="32",num_gpu_blocks="65"} 1.0\n'


def test_the_key_never_goes_to_a_proxy_or_follows_a_redirect(monkeypatch):
    from validator.serve.facts import server_facts

    proxy, via_proxy = recorder("127.0.0.3", (200, {}, b"{}"))
    elsewhere, redirected = recorder("127.0.0.4", (200, {}, METRICS))
    target = f"http://127.0.0.4:{elsewhere.server_address[1]}"
    good, direct = recorder("127.0.0.1", (200, {}, METRICS))
    bouncer, _ = recorder("127.0.0.1", (307, {"Location": target + "/v1/models"}, b""))
    try:
        for var in ("http_proxy", "HTTP_PROXY", "all_proxy"):
            monkeypatch.setenv(var, f"http://127.0.0.3:{proxy.server_address[1]}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        facts = server_facts(f"http://127.0.0.1:{good.server_address[1]}", "sk-secret-key")
        assert facts.num_gpu_blocks == 65 and via_proxy == []  # straight to the server
        assert ("GET", "/v1/models", "Bearer sk-secret-key") in direct
        with pytest.raises(Exception, match="HTTP 307"):
            server_facts(f"http://127.0.0.1:{bouncer.server_address[1]}", "sk-secret-key")
        assert redirected == [] and via_proxy == []  # the 307 was not followed
    finally:
        for s in (proxy, elsewhere, good, bouncer):
            s.shutdown()


def test_loadgen_never_follows_a_redirect_or_uses_a_proxy(tmp_path):
    proxy, via_proxy = recorder("127.0.0.3", (200, {}, b""))
    elsewhere, redirected = recorder("127.0.0.4", (200, {}, b""))
    bouncer, bounced = recorder(
        "127.0.0.1", (307, {"Location": f"http://127.0.0.4:{elsewhere.server_address[1]}/x"}, b"")
    )
    env = {**os.environ, "http_proxy": f"http://127.0.0.3:{proxy.server_address[1]}", "KEYVAR": "sk-secret-key"}
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "--url",
                f"http://127.0.0.1:{bouncer.server_address[1]}",
                "--model",
                "m",
                "--requests",
                "3",
                "--api-key-env",
                "KEYVAR",
                "--out",
                str(tmp_path / "o"),
                "--quiet",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 3, r.stderr  # every request failed: nothing served
        assert len(bounced) == 3 and redirected == [] and via_proxy == []
        errors = [json.loads(x)["error"] for x in (tmp_path / "o" / "records.jsonl").read_text().splitlines()]
        assert all(e.startswith("HTTP 307") for e in errors), errors
    finally:
        for s in (proxy, elsewhere, bouncer):
            s.shutdown()


# --- 4. the address checked is the address connected to ---


def test_a_name_that_resolves_elsewhere_the_second_time_is_not_followed(monkeypatch):
    """DNS rebinding: `rebind.test` resolves to 127.0.0.1 when checked, to 127.0.0.5 afterwards; the
    requests still go to 127.0.0.1 (the recorder on 127.0.0.5 sees nothing)."""
    from validator.serve.facts import server_facts

    good, direct = recorder("127.0.0.1", (200, {}, METRICS))
    port = good.server_address[1]
    evil, rebound = recorder("127.0.0.5", (200, {}, METRICS), port)  # the same port, another loopback address
    real = socket.getaddrinfo
    calls = []

    def rebinding(host, *a, **kw):
        if host == "rebind.test":
            calls.append(host)
            ip = "127.0.0.1" if len(calls) == 1 else "127.0.0.5"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]
        return real(host, *a, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        url = f"http://rebind.test:{port}"
        p = net.pin(url)
        assert p.addresses == ("127.0.0.1",)
        facts = server_facts(url, None, pin=p)
        assert facts.num_gpu_blocks == 65 and rebound == [] and len(direct) == 3  # /metrics, /v1/models, /server_info
        assert len(calls) == 1  # resolved once, when checked
    finally:
        good.shutdown()
        evil.shutdown()


def test_dev_mode_binds_the_address_that_was_checked():
    from validator.serve.argv import bind_host

    assert bind_host("localhost", dev=True) in ("127.0.0.1", "::1")  # the literal, resolved once
    assert bind_host("0.0.0.0", dev=False) == "0.0.0.0"
    with pytest.raises(InputError, match="vllm.host"):
        bind_host("0.0.0.0", dev=True)
    with pytest.raises(InputError, match="vllm.host"):
        bind_host("10.1.2.3", dev=False)  # load goes only to this machine


# --- 5 and 6. bounded input: one line, exit 2, never a hang or a traceback ---

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


@pytest.mark.parametrize(
    "name,text",
    [
        ("alias bomb in limits.max_model_len", BOMB + "limits:\n  max_model_len: *i\n"),
        ("deeply nested", "limits: " + "[" * 5000 + "]" * 5000 + "\n"),
        ("5,000-digit integer", "limits:\n  max_model_len: " + "9" * 5000 + "\n"),
        ("100,000-digit integer", "limits:\n  max_num_seqs: " + "9" * 100000 + "\n"),
        ("env with a secret of the wrong type", "vllm:\n  env: {HF_TOKEN: [hf-very-secret-value], X: 1}\n"),
    ],
)
def test_bad_profiles_are_one_line_and_exit_2(name, text, tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    line = one_line_exit_2(run("--plan-only", "--profile", str(f)))
    assert len(line) < 400 and "hf-very-secret-value" not in line, line


@pytest.mark.parametrize(
    "name,config",
    [
        ("deeply nested", "[" * 100000 + "]" * 100000),
        ("5,000-digit integer", '{"num_hidden_layers": ' + "9" * 5000 + "}"),
        ("not an object", "[1, 2]"),
    ],
)
def test_bad_config_json_is_one_line_and_exit_2(name, config, tmp_path):
    (tmp_path / "config.json").write_text(config)
    one_line_exit_2(run("--plan-only", "--model", str(tmp_path), "--kv-cache-memory-bytes", "1GiB"))


def test_files_that_never_end_are_refused_not_read(tmp_path):
    fifo = tmp_path / "m"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    assert "not a regular file" in one_line_exit_2(
        run("--plan-only", "--model", str(fifo), "--kv-cache-memory-bytes", "1GiB")
    )
    assert "not a regular file" in one_line_exit_2(
        run("--plan-only", "--model", "/dev/zero", "--kv-cache-memory-bytes", "1GiB")
    )
    assert "not a regular file" in one_line_exit_2(run("--plan-only", "--profile", "/dev/zero"))


@pytest.mark.parametrize(
    "header",
    [
        b"[1, 2]",
        b'{"w": {"dtype": "F16", "data_offsets": {"a": 1}}}',
        b'{"w": {"dtype": "F16", "data_offsets": [0, 1e400]}}',
        b'{"w": ' * 3000 + b"1" + b"}" * 3000,
    ],
)
def test_a_broken_safetensors_header_is_one_line(header, tmp_path):
    import struct

    (tmp_path / "config.json").write_text(
        (ROOT / "tests" / "data" / "configs" / "seed-gqa" / "config.json").read_text()
    )
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert "safetensors" in one_line_exit_2(
        run("--plan-only", "--model", str(tmp_path), "--kv-cache-memory-bytes", "1GiB")
    )


def refused_at_url(body: bytes, tmp_path) -> tuple[str, list]:
    """validate --url against a server answering every request with `body`: its one-line exit 2,
    and the requests it was sent."""
    srv, seen = recorder("127.0.0.1", (200, {}, body))
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        return one_line_exit_2(
            run("--profile", "profiles/tiny-cpu.yaml", "--url", url, "--out", str(tmp_path / "o"))
        ), seen
    finally:
        srv.shutdown()


def test_a_url_whose_metrics_are_not_prometheus_is_one_line(tmp_path):
    line, _ = refused_at_url(b'{"this is": "json", "not": "metrics"}\n{{{', tmp_path)
    assert "not Prometheus text" in line


def test_report_and_out_refuse_what_is_not_theirs(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "plan.json").write_text("[1, 2]")
    (d / "profile.json").write_text('{"name": "x"}')
    assert "plan.json" in one_line_exit_2(run("--report", str(d)))
    (d / "plan.json").write_text('{"block_size": 32}')
    one_line_exit_2(run("--report", str(d)))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "--out" in one_line_exit_2(
        run("--profile", "profiles/tiny-cpu.yaml", "--out", str(dangling), "--url", "http://127.0.0.1:9")
    )


# --- 7 and 8. secrets, modes, the environment vLLM gets ---


def test_secrets_are_redacted_by_one_rule():
    from validator.redact import brief, redact, redact_env, register

    assert redact("GET http://user:pa55@127.0.0.1:8000/metrics") == "GET http://<redacted>@127.0.0.1:8000/metrics"
    register("sk-live-0123456789")
    assert "sk-live" not in redact("vLLM said: bad key sk-live-0123456789")
    assert redact_env({"DB_PASS": "x", "MY_AUTH": "y", "HF_TOKEN": "z", "OMP_NUM_THREADS": "2"}) == {
        "DB_PASS": "<redacted>",
        "MY_AUTH": "<redacted>",
        "HF_TOKEN": "<redacted>",
        "OMP_NUM_THREADS": "2",
    }
    assert len(brief(list(range(10**6)))) < 120


def test_vllm_gets_an_allowed_environment_with_usage_stats_off():
    from validator.serve.owned import launch_environment

    env = launch_environment(
        {
            "PATH": "/bin",
            "LD_PRELOAD": "/tmp/evil.so",
            "PYTHONPATH": "/tmp/x",
            "FORCE_COLOR": "1",
            "HF_HOME": "/data/hf",
            "CUDA_VISIBLE_DEVICES": "0",
            "AWS_SECRET_ACCESS_KEY": "a",
        },
        {"OMP_NUM_THREADS": "2"},
    )
    assert env == {
        "PATH": "/bin",
        "HF_HOME": "/data/hf",
        "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "2",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "NO_COLOR": "1",
        "VLLM_LOGGING_COLOR": "0",
    }


def test_files_are_written_privately_and_never_through_a_symlink(tmp_path):
    from loadgen.safefile import open_append, restrict_umask, write_atomic

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "run"
    d.mkdir()
    (d / "summary.md").symlink_to(victim)
    (d / "summary.md.tmp").symlink_to(victim)  # the old fixed temporary name
    write_atomic(d / "summary.md", "report\n")
    assert victim.read_text() == "precious\n" and not (d / "summary.md").is_symlink()
    assert stat.S_IMODE((d / "summary.md").stat().st_mode) == 0o600
    (d / "records.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        open_append(d / "records.jsonl")
    old = os.umask(0o022)
    try:
        restrict_umask()
        (tmp_path / "new").mkdir()
        assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    finally:
        os.umask(old)
