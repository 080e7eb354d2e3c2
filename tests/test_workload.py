"""Workloads and arrivals (pure): exact lengths, salts, shared prefixes, seeded schedules."""

import numpy as np
import pytest

from loadgen.schedule.arrivals import arrival_times
from loadgen.schedule.runner import RunConfig
from loadgen.schedule.workload import (
    Lengths,
    WorkloadError,
    multi_turn,
    near_limit,
    salt_ids,
    shared_prefix,
    synthetic,
)
from loadgen.sources.custom import read_custom
from loadgen.sources.entries import DatasetError


def test_lengths_parse_and_sample():
    rng = np.random.default_rng(0)
    assert Lengths.parse("384", "x").sample(rng) == 384
    u = [Lengths.parse("uniform:10:20", "x").sample(rng) for _ in range(500)]
    assert min(u) == 10 and max(u) == 20
    n = [Lengths.parse("normal:100:50:60:140", "x").sample(rng) for _ in range(500)]
    assert min(n) >= 60 and max(n) <= 140
    for bad in ("0", "uniform:5", "normal:-1:2", "gauss:1:2", "x"):
        with pytest.raises(WorkloadError, match="--p"):
            Lengths.parse(bad, "--p")


def test_prompts_have_exact_lengths_and_the_run_salt():
    w = synthetic(20, Lengths.parse("uniform:50:80", "p"), Lengths.parse(8, "o"), seed=1, salt="a")
    s = salt_ids("a").tolist()
    for spec in w.items:
        assert len(spec.prompt) == spec.prompt_tokens and spec.prompt[:4].tolist() == s
        assert spec.prompt.dtype == np.int32  # 4 bytes a token, not a list of Python ints
    again = synthetic(20, Lengths.parse("uniform:50:80", "p"), Lengths.parse(8, "o"), seed=1, salt="a")
    assert [x.prompt.tolist() for x in again.items] == [x.prompt.tolist() for x in w.items]  # seeded
    other = synthetic(20, Lengths.parse("uniform:50:80", "p"), Lengths.parse(8, "o"), seed=1, salt="b")
    assert all(x.prompt[:4].tolist() != y.prompt[:4].tolist() for x, y in zip(w.items, other.items))  # cold


def test_requests_are_built_when_read_and_a_shard_reads_the_same_requests():
    """A million-request workload costs nothing until read; items[i::k] are the very requests the
    whole workload has at those places (each request is built from (seed, index) alone)."""
    import tracemalloc

    tracemalloc.start()
    w = synthetic(1_000_000, Lengths.parse(4096, "p"), Lengths.parse(8, "o"), seed=5, salt="s")
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(w.items) == 1_000_000 and size < 1_000_000  # 4 G token ids if built: under 1 MB held
    shard = w.items[:10][1::3]
    assert [x.id for x in shard] == ["r1", "r4", "r7"]
    assert [x.prompt.tolist() for x in shard] == [w.items[i].prompt.tolist() for i in (1, 4, 7)]
    assert w.items[999_999].id == "r999999" and len(w.items[999_999].prompt) == 4096


def test_shared_prefix_groups_share_exactly_the_prefix():
    w = shared_prefix(
        6, groups=2, prefix_tokens=64, suffix=Lengths.parse(16, "s"), output=Lengths.parse(4, "o"), seed=2, salt="x"
    )
    g0 = [x.prompt.tolist() for x in w.items if x.group == 0]
    assert all(p[:64] == g0[0][:64] and len(p) == 80 for p in g0)
    assert g0[0][64:] != g0[1][64:]
    g1 = [x.prompt.tolist() for x in w.items if x.group == 1]
    assert g1[0][:4] == g0[0][:4] and g1[0][4:64] != g0[0][4:64]  # same salt, other prefix
    primer = shared_prefix(2, 2, 64, Lengths.parse(16, "s"), Lengths.parse(4, "o"), seed=2, salt="x", suffix_seed=1)
    p0 = primer.items[0].prompt.tolist()
    assert p0[:64] == g0[0][:64] and p0[64:] != g0[0][64:]


def test_near_limit_fills_the_context():
    w = near_limit(512, 4, 32, margin=0, requests=8)
    assert all(len(x.prompt) + x.output_tokens == 512 for x in w.items) and len(w.items) == 8
    with pytest.raises(WorkloadError):
        near_limit(40, 4, 38)


def test_multi_turn_conversations():
    w = multi_turn(2, 3, Lengths.parse(40, "p"), Lengths.parse(8, "u"), output=16, seed=3)
    c = w.items[0]
    assert len(c.first_prompt) == 40 and [len(u) for u in c.user_turns] == [8, 8]


def test_dataset_replay_and_its_errors(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"prompt": [11, 12, 13], "output_tokens": 5}\n{"prompt": "hello there"}\n'
        '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],'
        ' "output_tokens": 3}\n'
    )
    e = read_custom(str(f), default_output=256)
    assert [(x.prompt, x.output_tokens, x.chat) for x in e[:2]] == [
        ([11, 12, 13], 5, False),
        ("hello there", 256, False),
    ]
    assert e[2].chat and e[2].prompt[0] == {"role": "system", "content": "be brief"}
    for line, what in (
        ('{"prompt": [11, -1], "output_tokens": 5}', "line 1: prompt must be text"),
        ('{"prompt": "x", "output_tokens": 0}', "output_tokens must be a positive integer"),
        ('{"messages": [{"role": "user"}]}', "each message must be"),
        ('{"prompt": [1, 2], "chat": true}', "chat requests need text or messages"),
        ("[1, 2]", "each line must be a JSON object"),
    ):
        f.write_text(line + "\n")
        with pytest.raises(DatasetError, match=what):
            read_custom(str(f), default_output=8)


def test_open_loop_schedule_is_seeded_poisson_or_bursty():
    a = arrival_times(4000, rate=50.0, burstiness=1.0, ramp_up=0.0, seed=7)
    gaps = np.diff([0.0] + a)
    assert abs(gaps.mean() - 1 / 50) < 0.002
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # Poisson: coefficient of variation 1
    bursty = np.diff([0.0] + arrival_times(4000, 50.0, 0.25, 0.0, 7))
    assert bursty.std() / bursty.mean() > 1.6  # gamma shape 1/4: cv 2
    assert arrival_times(10, 50.0, 1.0, 0.0, 7) == a[:10]
    ramp = arrival_times(200, 50.0, 1.0, ramp_up=2.0, seed=7)
    assert sum(1 for t in ramp if t < 1.0) < sum(1 for t in a[:200] if t < 1.0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({}, "exactly one of"),
        ({"concurrency": 2}, "bound the run"),
        ({"rate": 0, "max_requests": 1}, "above 0"),
        ({"concurrency": 1, "duration": -1}, "--duration"),
    ],
)
def test_run_config_bounds(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**kwargs).check()
