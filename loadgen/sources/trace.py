"""Timed traces (vLLM's `timed_trace`, Mooncake's format): JSONL of {timestamp, input_length,
output_length, hash_ids}. Each hash id stands for --timed-trace-chunk-hash-size tokens, the same
tokens wherever it appears, so two requests that share their first k hash ids share their first
k x chunk tokens: the trace's prefix sharing is reproduced block for block. Requests start at
timestamp x --timed-trace-sec-multiplier seconds from the run's start.

Where vLLM's expansion differs, this one keeps the trace's lengths exact: a last partial chunk is
the first tokens of its hash id's chunk (vLLM draws other tokens for it), and an input longer
than its hash ids cover is completed with tokens of its own (vLLM sends the shorter prompt).
Token content comes from the run's salt, so a replay under another salt shares nothing with an
earlier one while sharing exactly as much within itself."""

from __future__ import annotations

import json

import numpy as np

from loadgen.dataset_options import DatasetOptions
from loadgen.schedule.workload import DEFAULT_ID_RANGE, Workload, _rng, hash_str, new_salt
from loadgen.sources.entries import DatasetError, open_dataset
from loadgen.transport.client import RequestSpec

PAD = 0x7AD  # the stream of a request's own completing tokens (beside its hash ids')


def _int(d: dict, key: str, what: str, minimum: int) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ValueError(f"{what} field {key!r} must be an integer >= {minimum} (got {str(v)[:20]})")
    return v


def read_trace(opts: DatasetOptions, limit: int | None = None, salt: str | None = None) -> Workload:
    p = open_dataset(opts.path)
    salt = salt or new_salt()
    s = hash_str(salt)
    lab, chunk = opts.labels, opts.chunk_hash_size
    lo, hi = DEFAULT_ID_RANGE
    chunks: dict[int, np.ndarray] = {}

    def chunk_of(h: int) -> np.ndarray:
        if h not in chunks:
            chunks[h] = _rng(s, h).integers(lo, hi, size=chunk, dtype=np.int32)
        return chunks[h]

    items: list[RequestSpec] = []
    times: list[float] = []
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if not isinstance(d, dict):
                    raise ValueError("each line must be a JSON object")
                inp = _int(d, lab.input_length, "input length", 1)
                out = _int(d, lab.output_length, "output length", 1)
                ts = d.get(lab.timestamp)
                if not isinstance(ts, (int, float)) or isinstance(ts, bool) or ts < 0:
                    raise ValueError(f"timestamp field {lab.timestamp!r} must be a number >= 0")
                hashes = d.get(lab.hash_ids, [])
                if not isinstance(hashes, list):
                    raise ValueError(f"hash ids field {lab.hash_ids!r} must be a list")
                parts, have = [], 0
                for h in hashes:
                    if have >= inp:
                        break
                    key = hash_str(h) if isinstance(h, str) else h
                    if not isinstance(key, int) or isinstance(key, bool):
                        raise ValueError(f"hash ids must be integers or strings (got {str(h)[:20]})")
                    c = chunk_of(key)[: inp - have]
                    parts.append(c)
                    have += len(c)
                if have < inp:
                    parts.append(_rng(s, PAD, n).integers(lo, hi, size=inp - have, dtype=np.int32))
            except (ValueError, TypeError) as e:
                raise DatasetError(f"--dataset-path: {p} line {n}: {e}") from None
            prompt = np.concatenate(parts)
            items.append(RequestSpec(id=f"t{len(items)}", prompt=prompt, prompt_tokens=inp, output_tokens=out))
            times.append(float(ts) * opts.sec_multiplier)
            if limit and len(items) >= limit:
                break
    if not items:
        raise DatasetError(f"--dataset-path: {p} holds no requests")
    if any(b < a for a, b in zip(times, times[1:])):
        order = sorted(range(len(items)), key=lambda i: times[i])  # replayed in time order
        items, times = [items[i] for i in order], [times[i] for i in order]
    t0 = times[0]
    w = Workload(
        items,
        f"{len(items)} requests of the trace {p.name} over {times[-1] - t0:.1f} s "
        f"(hash ids of {chunk} tokens, timestamps x {opts.sec_multiplier:g})",
        salt,
        0,
        {"dataset": "timed_trace", "chunk_hash_size": chunk},
    )
    # from the first request (vLLM waits for the first timestamp itself: an excerpt of a day-long
    # trace would start hours late)
    w.times = [t - t0 for t in times]
    return w
