"""Bad input never ends in a traceback: profiles and config.json fuzzed with hypothesis
(1,000 examples each), through the same entry point as the command line."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import memory_cap
from validator.cli import main
from validator.profile import SCHEMA

# 1,000 examples each in `make test`; the fast tier (`make test-fast`) draws fewer
FUZZ = settings(
    max_examples=int(os.environ.get("KVGATE_FUZZ_EXAMPLES", "1000")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TMP = Path(tempfile.mkdtemp(prefix="kvgate-fuzz-"))
GOOD_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 512,
    "intermediate_size": 1024,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
(TMP / "model").mkdir()
(TMP / "model" / "config.json").write_text(json.dumps(GOOD_CONFIG))

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "22GiB",
            "1GiB",
            "-3GiB",
            "80GB",
            "1e9",
            "auto",
            "fp8",
            "cpu",
            "gpu",
            "16",
            "0",
            "nan",
            "full_attention",
            "sliding_attention",
            "mamba",
            "bfloat16",
            "float32",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as e:
            return (e.code if isinstance(e.code, int) else 2), err.getvalue()
    return 0, err.getvalue()


def assert_clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith("validate: error: ")


# profiles: known sections and fields with wrong-typed, absurd or missing values, and unknown keys
field_names = [(sec, key) for sec, fields in SCHEMA.items() if sec for key in fields if key not in ("path", "build")]
profile_entries = st.dictionaries(
    st.one_of(st.sampled_from(field_names), st.tuples(st.sampled_from(list(SCHEMA) + ["bogus"]), st.text(max_size=6))),
    values,
    max_size=8,
)


@FUZZ
@given(
    entries=profile_entries, top=st.dictionaries(st.sampled_from(["name", "description", "extra"]), values, max_size=2)
)
def test_fuzzed_profiles_fail_cleanly(entries, top):
    raw: dict = {"model": {"path": str(TMP / "model")}, "cache": {"kv_cache_bytes": "1GiB"}}
    for (sec, key), v in entries.items():
        if sec == "":
            continue
        if not isinstance(raw.get(sec), dict):
            raw[sec] = {}
        raw[sec][key] = v
    raw.update(top)
    f = TMP / "profile.yaml"
    try:
        f.write_text(yaml.safe_dump(raw, allow_unicode=True))
    except yaml.YAMLError:
        return
    assert_clean(*run_cli(["--plan-only", "--json", "--profile", str(f)]))


config_keys = st.sampled_from(
    sorted(
        set(GOOD_CONFIG)
        | {
            "head_dim",
            "layer_types",
            "sliding_window",
            "use_sliding_window",
            "max_window_layers",
            "kv_lora_rank",
            "qk_rope_head_dim",
            "text_config",
            "multi_query",
            "num_kv_heads",
            "sliding_window_pattern",
            "num_kv_shared_layers",
            "tie_word_embeddings",
            "n_layer",
            "n_head",
            "dtype",
            "layers_block_type",
        }
    )
)


@FUZZ
@given(
    changes=st.dictionaries(config_keys, values, max_size=5),
    drop=st.lists(config_keys, max_size=3),
    whole=st.one_of(st.none(), values),
)
def test_fuzzed_config_json_fails_cleanly(changes, drop, whole):
    d = TMP / "fuzzmodel"
    d.mkdir(exist_ok=True)
    if whole is not None and not isinstance(whole, dict):
        text = json.dumps(whole) if not isinstance(whole, float) or whole == whole else "NaN"
    else:
        cfg = {k: v for k, v in GOOD_CONFIG.items() if k not in drop}
        cfg.update(changes)
        try:
            text = json.dumps(cfg)
        except (TypeError, ValueError):
            return
    (d / "config.json").write_text(text)
    assert_clean(
        *run_cli(["--plan-only", "--json", "--model", str(d), "--kv-cache-bytes", "2GiB", "--max-model-len", "2048"])
    )


def test_unreadable_and_missing_files_fail_cleanly(tmp_path):
    (tmp_path / "config.json").write_bytes(b"\xff\xfe not json")
    assert_clean(*run_cli(["--plan-only", "--model", str(tmp_path), "--kv-cache-bytes", "1GiB"]))
    code, err = run_cli(["--plan-only", "--model", str(tmp_path / "nope"), "--kv-cache-bytes", "1GiB"])
    assert code == 2 and "no config.json" in err
    d = tmp_path / "unreadable"
    d.mkdir()
    (d / "config.json").mkdir()  # a directory where a file should be
    assert_clean(*run_cli(["--plan-only", "--model", str(d), "--kv-cache-bytes", "1GiB"]))


# command lines: flags of both tools with generated values, 1,000 argument lists each
numbers = st.one_of(
    st.integers(min_value=-(1 << 40), max_value=1 << 40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "0",
            "-1",
            "1e999",
            "nan",
            "inf",
            "-0",
            "",
            " ",
            "1GiB",
            "79.19GiB",
            "abc",
            "0x10",
            "1_000",
            "http://[::1",
            "http://127.0.0.1:99999",
            "ftp://x",
        ]
    ),
    st.text(max_size=10),
)
VALIDATE_FLAGS = [
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--block-size",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--gpu-memory-utilization",
    "--gpu-memory-bytes",
    "--kv-cache-bytes",
    "--weights-bytes",
    "--workspace-bytes",
    "--num-gpu-blocks-override",
    "--prompt-tokens",
    "--output-tokens",
    "--vllm-version",
    "--kv-cache-dtype",
    "--platform",
    "--url",
]
LOADGEN_FLAGS = [
    "--requests",
    "--concurrency",
    "--rate",
    "--burstiness",
    "--duration",
    "--ramp-up",
    "--warmup",
    "--prompt-tokens",
    "--output-tokens",
    "--prefix-groups",
    "--prefix-tokens",
    "--turns",
    "--seed",
    "--timeout",
    "--read-timeout",
    "--url",
    "--max-memory",
]


@FUZZ
@given(flags=st.lists(st.tuples(st.sampled_from(VALIDATE_FLAGS), numbers), max_size=5))
def test_fuzzed_validate_command_lines_fail_cleanly(flags):
    argv = ["--plan-only", "--json", "--model", str(TMP / "model"), "--kv-cache-bytes", "2GiB"]
    for flag, value in flags:
        argv += [flag, value]
    assert_clean(*run_cli(argv))


@FUZZ
@given(flags=st.lists(st.tuples(st.sampled_from(LOADGEN_FLAGS), numbers), max_size=5))
def test_fuzzed_loadgen_command_lines_fail_cleanly(flags):
    """Every list is parsed and checked as a run would be; nothing is sent (the run itself is
    replaced), so only the input handling is under test."""
    import loadgen.main as lg

    argv = ["--url", "http://127.0.0.1:9", "--model", "m", "--out", str(TMP / "lg")]
    for flag, value in flags:
        argv += [flag, value]
    ran = []

    def no_run(coro, kind="auto"):
        coro.close()
        ran.append(True)
        return {"ok": 1, "requests": 1, "failed": 0}

    err = io.StringIO()
    real = lg.eventloop.run, lg.format_summary
    lg.eventloop.run, lg.format_summary = no_run, lambda s: ""
    try:  # workloads are built as they are sent: accepting any of these must cost next to nothing
        with memory_cap(1 << 30), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = lg.main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
    finally:
        lg.eventloop.run, lg.format_summary = real
    text = err.getvalue()
    assert "Traceback" not in text
    assert code in (0, 2), (code, text)
    if code == 2:
        assert len(text.strip().splitlines()) == 1 and text.startswith("loadgen: error: "), text
    else:
        assert ran  # accepted: it would have run


def test_numeric_flags_out_of_range_are_refused_in_both_tools():
    import subprocess
    import sys

    for args in (
        ["--requests", "-3"],
        ["--timeout", "-1"],
        ["--read-timeout", "0"],
        ["--concurrency", "0"],
        ["--rate", "nan"],
        ["--warmup", "5", "--requests", "5"],
    ):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "loadgen",
                "--url",
                "http://127.0.0.1:9",
                "--model",
                "m",
                "--out",
                str(TMP / "lg2"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and r.stderr.startswith(f"loadgen: error: {args[0]}"), (args, r.stderr)
    for url in ("http://[::1", "http://127.0.0.1:99999"):
        code, err = run_cli(["--profile", "profiles/tiny-cpu.yaml", "--url", url])
        assert code == 2 and "--url" in err and "Traceback" not in err, err
