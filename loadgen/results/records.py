"""Per-request records: raw timestamps only; derived metrics are computed later.

Times are seconds. ``scheduled`` and ``sent`` are offsets from the run's start;
``chunk_times`` are offsets from ``sent``: the arrival of every token-carrying
event. TTFT, ITL, TPOT and E2E follow ``vllm bench serve``:

- TTFT = first chunk_time;
- ITL  = the gaps between consecutive chunk_times;
- E2E  = last chunk_time (the usage chunk and [DONE] do not count);
- TPOT = (E2E - TTFT) / (output_tokens - 1), for output_tokens > 1.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loadgen.safefile import make_dirs, open_append


@dataclass(slots=True)  # a million records in memory: no __dict__ each
class RequestRecord:
    id: str
    run: str = ""
    scheduled: float | None = None
    sent: float | None = None
    chunk_times: Sequence[float] = field(default_factory=list)  # array("d") while recorded, list when read
    # completion tokens delivered so far at each chunk (servers that send continuous usage stats);
    # empty when not asked. A chunk can carry several tokens when the server merges them.
    chunk_tokens: list[int | None] = field(default_factory=list)
    done: float | None = None  # offset from sent: stream closed
    asked_prompt_tokens: int | None = None
    asked_output_tokens: int | None = None
    prompt_tokens: int | None = None  # from usage
    output_tokens: int | None = None  # from usage
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when sent
    finish_reason: str | None = None
    status: int | None = None
    error: str | None = None
    warmup: bool = False
    group: int | None = None  # shared-prefix group or conversation
    turn: int | None = None
    text_chunks: int | None = None
    token_mismatch: str | None = None  # asked vs served, when they differ
    worker: int | None = None  # which --workers process sent it
    prompt_digest: str | None = None  # prompt_digest() of the prompt sent: ties the record to it
    # vLLM's own timing of this request (--enable-per-request-metrics), from the engine's clock: queued
    # to scheduled, scheduled to its first token, and the mean gap from its first token to its last
    server_queue_ms: float | None = None
    server_ttft_ms: float | None = None
    server_itl_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200 and bool(self.chunk_times)

    @property
    def delivered(self) -> int:
        """Completion tokens received so far (exact with chunk_tokens, else one per chunk)."""
        if self.chunk_tokens and self.chunk_tokens[-1] is not None:
            return self.chunk_tokens[-1]
        return len(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def itl(self) -> list[float]:
        c = self.chunk_times
        return [b - a for a, b in zip(c, c[1:])]

    @property
    def tpot(self) -> float | None:
        n = self.output_tokens
        if not self.chunk_times or n is None or n < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (n - 1)

    def to_json(self) -> dict:
        # built by hand: dataclasses.asdict deep-copies the (long) chunk_times list
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["chunk_times"] = np.round(np.asarray(self.chunk_times, dtype=float), 6).tolist()
        d["chunk_tokens"] = list(self.chunk_tokens)
        return d

    @classmethod
    def from_json(cls, d: dict) -> RequestRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})


def prompt_digest(prompt, token_ids=None) -> str:
    """A short fingerprint of a prompt as sent (token ids as little-endian int32, UTF-8 text, or chat
    messages as canonical JSON) and, for text and chat, of the ids the server computes for it: a
    record carries it, so a record can be matched to the saved prompt it was sent with."""
    if isinstance(prompt, str):
        data = prompt.encode()
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        data = json.dumps(prompt, sort_keys=True, separators=(",", ":")).encode()
    else:
        data = np.asarray(prompt, dtype="<i4").tobytes()
    if token_ids is not None:
        data += b"\0ids" + np.asarray(token_ids, dtype="<i4").tobytes()
    return hashlib.sha256(data).hexdigest()[:16]


class RecordWriter:
    """Appends one JSON line per finished request and flushes it, so a crash loses nothing finished."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        make_dirs(self.path.parent)
        self._f = open_append(self.path)

    def write(self, rec: RequestRecord) -> None:
        self._f.write(json.dumps(rec.to_json(), separators=(",", ":")) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_jsonl(path: str | os.PathLike, parse, problems: list[str] | None = None) -> list:
    """parse(obj) for each line of a JSONL file. A torn last line (a crash mid-write) is skipped
    quietly; any other line that cannot be read is named in `problems`, never dropped unsaid."""
    out = []
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            if i < len(lines) - 1 and problems is not None:
                problems.append(f"{path.name} line {i + 1}: {type(e).__name__}")
    return out


def read_records(path: str | os.PathLike, problems: list[str] | None = None) -> list[RequestRecord]:
    """Records from a JSONL file (see read_jsonl for what is skipped)."""
    return read_jsonl(path, RequestRecord.from_json, problems)
