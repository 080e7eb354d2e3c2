"""Datasets and traces as loadgen reads them (issue 23): the shipped files are what their generator
writes, a trace's hash ids become shared tokens block for block, ShareGPT and custom files are read
as vLLM reads them, and bad input is one line naming the file, the line and the fix."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from loadgen.dataset_options import DatasetName, DatasetOptions
from loadgen.loadrun import UsageError
from loadgen.sources.entries import DatasetError
from loadgen.sources.sharegpt import read_sharegpt
from loadgen.sources.trace import read_trace
from tests.conftest import ROOT

DATA = ROOT / "profiles" / "datasets"


def test_the_shipped_datasets_are_what_their_generator_writes():
    spec = importlib.util.spec_from_file_location("generate", DATA / "generate.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    files = gen.files()
    assert set(files) == {p.name for p in DATA.iterdir() if p.suffix in (".json", ".jsonl")}
    for name, text in files.items():
        assert (DATA / name).read_text(encoding="utf-8") == text, name


def trace(tmp_path, rows, **kw):
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return read_trace(DatasetOptions(name=DatasetName.TIMED_TRACE, path=str(f), **kw), salt="s")


def test_a_hash_id_is_the_same_tokens_wherever_it_appears(tmp_path):
    w = trace(
        tmp_path,
        [
            {"timestamp": 1000, "input_length": 40, "output_length": 5, "hash_ids": [7, 8, 9]},
            {"timestamp": 1500, "input_length": 48, "output_length": 6, "hash_ids": [7, 8, 3]},
            {"timestamp": 1200, "input_length": 30, "output_length": 7, "hash_ids": [8]},  # longer than its ids
        ],
        chunk_hash_size=16,
        sec_multiplier=0.001,
    )
    by_len = {len(x.prompt): x for x in w.items}
    a, b, c = by_len[40], by_len[48], by_len[30]
    assert [x.prompt_tokens for x in w.items] == [40, 30, 48]  # replayed in time order
    assert w.times == pytest.approx([0.0, 0.2, 0.5])  # from the first, x the multiplier
    assert np.array_equal(a.prompt[:32], b.prompt[:32]) and not np.array_equal(a.prompt[32:40], b.prompt[32:40])
    assert np.array_equal(c.prompt[:16], a.prompt[16:32])  # hash id 8, at another place
    assert np.array_equal(
        a.prompt[32:40],
        trace(
            tmp_path,
            [{"timestamp": 0, "input_length": 48, "output_length": 1, "hash_ids": [0, 1, 9]}],
            chunk_hash_size=16,
        )
        .items[0]
        .prompt[32:40],
    )  # noqa: E501
    assert not np.array_equal(c.prompt[16:], a.prompt[32:46])  # its own completing tokens
    other = read_trace(DatasetOptions(name=DatasetName.TIMED_TRACE, path=str(tmp_path / "t.jsonl")), salt="x")
    assert not np.array_equal(other.items[0].prompt[:16], w.items[0].prompt[:16])  # another salt: nothing shared


@pytest.mark.parametrize(
    "row,what",
    [
        ({"input_length": 4, "output_length": 1}, "timestamp field 'timestamp'"),
        ({"timestamp": 0, "output_length": 1}, "input length field 'input_length'"),
        ({"timestamp": 0, "input_length": 4, "output_length": 0}, "output length field"),
        ({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": 5}, "must be a list"),
    ],
)
def test_a_bad_trace_line_is_named(tmp_path, row, what):
    with pytest.raises(DatasetError, match=f"line 1: .*{what}"):
        trace(tmp_path, [row])


def test_sharegpt_is_read_as_vllm_reads_it(tmp_path):
    e = read_sharegpt(str(DATA / "sharegpt-tiny.json"))
    data = json.loads((DATA / "sharegpt-tiny.json").read_text())
    assert len(e) == 40 and e[0].prompt == data[0]["conversations"][0]["value"]
    assert e[0].answer == data[0]["conversations"][1]["value"] and e[0].output_tokens is None
    conv = read_sharegpt(str(DATA / "sharegpt-tiny.json"), turns=4)
    assert len(conv) == 4 and all(len(x.later_turns or []) == 3 for x in conv)  # the four-turn ones
    f = tmp_path / "bad.json"
    f.write_text('{"conversations": []}')
    with pytest.raises(DatasetError, match="is not ShareGPT JSON"):
        read_sharegpt(str(f))
    f.write_text('[{"conversations": [{"from": "human", "value": "hi"}]}]')
    with pytest.raises(DatasetError, match="no conversation of two turns"):
        read_sharegpt(str(f))


def test_loadgen_dataset_flags_are_checked_with_vllms_names(tmp_path):
    from loadgen.cli import parse

    base = ["--url", "http://127.0.0.1:9", "--model", "m"]
    run = parse([*base, "--dataset", str(DATA / "chat-system-prompt.jsonl")])
    assert run.dataset is not None and run.dataset.name is DatasetName.CUSTOM
    run = parse(
        [*base, "--dataset-name", "timed_trace", "--dataset-path", "t", "--timed-trace-sec-multiplier", "0.001"]
    )
    assert run.dataset is not None and run.dataset.sec_multiplier == 0.001
    for bad, what in (
        (["--dataset-path", "x"], "--dataset-path needs --dataset-name"),
        (["--dataset-name", "sharegpt"], "needs --dataset-path"),
        (["--dataset-name", "timed_trace", "--dataset-path", "t", "--timed-trace-sec-multiplier", "0"], "above 0"),
        (["--dataset-name", "custom", "--dataset-path", "t", "--turns", "3"], "only with --dataset-name sharegpt"),
    ):
        with pytest.raises(UsageError, match=what):
            parse([*base, *bad])


def test_a_trace_replays_at_its_timestamps_and_refuses_a_rate(tmp_path):
    from loadgen.main import prepare

    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1]}\n' * 3)
    base = ["--url", "http://127.0.0.1:9", "--model", "m", "--dataset-name", "timed_trace", "--dataset-path", str(f)]
    _, w, cfg = prepare(base)
    assert cfg.timed and cfg.concurrency is None and cfg.max_requests == 3
    _, w, cfg = prepare([*base, "--concurrency", "2"])  # asked for: closed loop over the trace's requests
    assert not cfg.timed and cfg.concurrency == 2


def test_validate_takes_the_dataset_from_flags_over_the_profile(tmp_path):
    from validator.cli import build_parser, resolve_profile

    p = tmp_path / "p.yaml"
    p.write_text(
        "workload:\n  dataset:\n    name: timed_trace\n    path: t.jsonl\n    timed_trace_sec_multiplier: 0.001\n"
    )
    args = build_parser().parse_args(["--profile", str(p), "--timed-trace-chunk-hash-size", "512"])
    ds = resolve_profile(args).workload.dataset
    assert ds is not None and ds["timed_trace_chunk_hash_size"] == 512 and ds["timed_trace_sec_multiplier"] == 0.001
    assert ds["path"] == str(tmp_path / "t.jsonl")  # relative to the profile
    from validator.profile.dataset import dataset_of

    section = dataset_of(ds)
    assert section is not None
    opts = section.options(max_model_len=512)
    assert (opts.name, opts.chunk_hash_size, opts.sec_multiplier, opts.max_model_len, opts.labels.hash_ids) == (
        DatasetName.TIMED_TRACE,
        512,
        0.001,
        512,
        "hash_ids",
    )
    args = build_parser().parse_args(["--profile", str(p), "--dataset-name", "sharegpt", "--dataset-path", "s.json"])
    ds = resolve_profile(args).workload.dataset
    assert ds is not None and ds["name"] == "sharegpt" and ds["timed_trace_sec_multiplier"] == 1.0  # a new kind: fresh


def test_a_negative_seed_is_refused_by_name_before_any_run(tmp_path):
    """Found by tests/test_fuzz_input.py: --seed -1 reached numpy's generator (a ValueError traceback)."""
    from loadgen.cli import parse
    from validator.errors import InputError
    from validator.profile import from_dict

    with pytest.raises(UsageError, match="--seed: -1 is out of range; give a whole number from 0"):
        parse(["--url", "http://127.0.0.1:9", "--model", "m", "--seed", "-1"])
    assert parse(["--url", "http://127.0.0.1:9", "--model", "m", "--seed", str(2**40)]).seed == 2**40
    with pytest.raises(InputError, match="workload.seed: must be at least 0"):
        from_dict({"model": {"build": "tiny-gqa"}, "workload": {"seed": -1}})
