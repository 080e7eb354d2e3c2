"""loadgen's memory is known before a run is built, and bounded (issue 19): a run that would not fit
--max-memory is refused with exit 2 naming what to lower, before anything is built; what is
accepted builds its prompts only as it sends them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.loadrun import UsageError
from loadgen.main import prepare
from loadgen.schedule import memory
from tests.conftest import limit_child_memory

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--url", "http://127.0.0.1:9", "--model", "m"]


@pytest.mark.parametrize(
    "args,names",
    [
        (["--turns", "1000000"], "--turns"),  # 1 conversation of 1e6 turns: was 21 GB
        (["--prompt-tokens", "100000000"], "--prompt-tokens"),
        (["--requests", "1000000", "--turns", "1000"], "--max-memory"),
        (["--requests", "1000000"], "--max-memory"),
        (["--requests", "10", "--output-tokens", "100000000"], "--max-memory"),
        (["--requests", "100000", "--prefix-groups", "100000", "--prefix-tokens", "100000"], "--prefix-groups"),
        (["--concurrency", "5000", "--prompt-tokens", "100000", "--requests", "10000"], "--concurrency"),
        (["--requests", "2000", "--turns", "1000", "--output-tokens", "20000"], "--turns"),  # history past any context
    ],
)
def test_runs_that_would_not_fit_are_refused_before_anything_is_built(args, names, tmp_path):
    """As a user types them, in a child allowed 1 GiB of heap: exit 2 with one line naming the flag,
    never a MemoryError (which a regression that builds them would meet)."""
    r = subprocess.run(
        [sys.executable, "-m", "loadgen", *BASE, "--out", str(tmp_path / "o"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_child_memory(1 << 30),
    )
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loadgen: error: ") and names in lines[0], lines
    assert not (tmp_path / "o" / "records.jsonl").exists()


def test_the_budget_is_the_line_between_accepted_and_refused():
    """700,000 requests of 128 output tokens hold about 1.0 GiB of records: over the default 1 GiB
    with the encoded bodies, within 2 GiB; the refusal gives the terms."""
    args = [*BASE, "--requests", "700000", "--output-tokens", "128", "--concurrency", "8"]
    with pytest.raises(UsageError, match=r"--max-memory: this run would hold about 1\.0 GiB \(records 964\.0 MiB"):
        prepare(args)
    _, w, cfg = prepare([*args, "--max-memory", "2GiB"])
    assert len(w.items) == 700_000 and cfg.max_requests == 700_000


def test_a_duration_run_is_bounded_in_count_by_what_fits():
    _, w, cfg = prepare(
        [*BASE, "--duration", "60", "--concurrency", "4", "--output-tokens", "128", "--max-memory", "100MiB"]
    )
    per = memory.RECORD_BYTES + memory.CHUNK_BYTES * 128
    assert cfg.max_requests == len(w.items) and 0 < cfg.max_requests * per <= 100 << 20
    assert cfg.max_requests > (100 << 20) // per - 60_000  # the rest of the budget: bodies, 4 prompts


@pytest.mark.parametrize("text", ["1k", "0", "lots", "1e400", "5PiB"])
def test_a_budget_that_cannot_be_read_is_named(text):
    with pytest.raises(UsageError, match="--max-memory"):
        prepare([*BASE, "--max-memory", text])
