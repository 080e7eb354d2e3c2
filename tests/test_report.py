"""What people read: the console table and the plan text."""

from __future__ import annotations

from validator.report.console import checks_lines
from validator.report.text import plan_text


def _check(name, status, expected=1, observed=1, tol="exact", why="because"):
    passed = {"pass": True, "fail": False}.get(status)
    return {
        "name": name,
        "expected": expected,
        "observed": observed,
        "passed": passed,
        "tolerance": tol,
        "explanation": why,
        "judged": status != "not_judged",
        "status": status,
    }


def test_console_columns_fit_their_content_and_attention_comes_last():
    long = {"max_running": 4, "max_waiting": 8, "first_token_after_a_finish": 8}
    checks = [
        _check("probe.queueing", "pass", expected="queue", observed=long, tol="<= 3"),
        _check("cold.freeze1.kv_blocks", "fail", 64, 57.6, why="blocks differ"),
        _check("warm.scrapes", "not_measured", "0 failed", "1 failed", why="gaps"),
        _check("cold.ttft_p50_client_vs_server", "not_judged"),
    ]
    lines = checks_lines(checks)
    head = lines[0]
    assert head.split() == ["check", "expected", "observed", "tolerance", "result"]
    # the widest observed cell is shown whole (the old table cut cells at 22 characters)
    assert "max_running 4, max_waiting 8, first_token_after_a_finish 8" in lines[1]
    col = head.index("tolerance")
    assert lines[1][col : col + 4] == "<= 3" and lines[2][col : col + 5] == "exact"
    assert lines[1].rstrip().endswith("pass") and lines[2].rstrip().endswith("FAIL")
    tail = lines[len(checks) + 1 :]
    assert tail[0] == "FAIL (1):" and tail[1].startswith("  cold.freeze1.kv_blocks: expected 64, observed 57.6")
    assert tail[2] == "not measured (1):" and "warm.scrapes" in tail[3]
    assert len(tail) == 4


def test_nothing_to_repeat_when_everything_passed():
    assert len(checks_lines([_check("a", "pass"), _check("b", "not_judged")])) == 3


def test_bandwidth_lines_are_in_plain_words():
    p = {
        "model": {
            "architecture": "X",
            "model_type": "x",
            "num_layers": 2,
            "layer_kinds": "full x2",
            "num_attention_heads": 4,
            "num_kv_heads": 2,
            "head_dim": 64,
            "head_dim_source": "config",
            "dtype": "bfloat16",
            "sliding_window": None,
        },
        "platform": "gpu",
        "tensor_parallel_size": 1,
        "kv_cache_dtype": "auto",
        "kv_bytes_per_token": 1024,
        "block_size": 16,
        "bytes_per_block": 16384,
        "kv_groups": [{}],
        "num_blocks": 100,
        "usable_blocks": 99,
        "kv_cache_tokens": 1600,
        "max_concurrency": 1.5,
        "max_model_len": 1024,
        "max_num_seqs": 1,
        "max_num_batched_tokens": 2048,
        "blocks_per_seq": 64,
        "limits_source": {},
        "ledger": {
            "mode": "kv_cache_bytes given",
            "gpu_memory_bytes": None,
            "budget_bytes": None,
            "weights_bytes": None,
            "weights_source": "",
            "workspace_bytes": None,
            "kv_cache_bytes": 1 << 20,
            "kv_bytes_at_limits": 1 << 20,
            "kv_payload_bytes_at_limits": 1 << 20,
            "null_block_bytes": 16384,
            "kv_headroom_bytes": 0,
        },
        "bandwidth": {
            "weight_read_bytes_per_step": 1 << 30,
            "kv_read_bytes_per_step": 1 << 20,
            "crossover_batch": 13,
            "decode_step_floor_ms": 0.5,
            "memory_bandwidth_bytes_per_s": 3.35e12,
        },
        "fits": True,
        "reasons": [],
        "ways_out": [],
        "notes": [],
        "vllm_args": ["--max-model-len", "1024"],
        "vllm_env": {},
    }
    text = plan_text(p)
    assert "from 13 sequences on, reading the KV cache costs more than reading the weights" in text
    assert "the floor for inter-token latency" in text and "KV passes weights" not in text


def test_the_command_line_in_the_provenance_hides_secrets():
    from validator.provenance import redact_argv

    argv = [
        "--url",
        "http://user:s3cret@127.0.0.1:8000",
        "--api-token",
        "tok-1",
        "--hf-token=tok-2",
        "--api-key-env",
        "MY_KEY",
        "--profile",
        "p.yaml",
    ]
    shown = redact_argv(argv)
    assert "s3cret" not in " ".join(shown) and "tok-1" not in shown and "--hf-token=tok-2" not in shown
    assert shown == [
        "--url",
        "http://<redacted>@127.0.0.1:8000",
        "--api-token",
        "<redacted>",
        "--hf-token=<redacted>",
        "--api-key-env",
        "MY_KEY",
        "--profile",
        "p.yaml",
    ]
