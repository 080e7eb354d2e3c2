"""A dataset read from its file: a Workload when its prompts are token ids already (timed traces), a
Pending one when the server's tokenizer must make them exact first (resolve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.dataset_options import DatasetName, DatasetOptions
from loadgen.schedule.workload import Workload
from loadgen.sources.custom import read_custom
from loadgen.sources.entries import Entry
from loadgen.sources.sharegpt import read_sharegpt
from loadgen.sources.trace import read_trace


@dataclass
class Pending:
    """A dataset read but not yet tokenized: the server's /tokenize makes it a Workload (resolve)."""

    entries: list[Entry]
    opts: DatasetOptions
    source: str


def read_dataset(
    d: DatasetOptions, limit: int | None = None, salt: str | None = None, chat: bool = False
) -> Workload | Pending:
    """Raises DatasetError (one line naming the file and the fix)."""
    if d.name is DatasetName.TIMED_TRACE:
        return read_trace(d, limit=limit, salt=salt)
    if d.name is DatasetName.SHAREGPT:
        entries = read_sharegpt(d.path, limit=limit, turns=d.turns)
    elif d.name is DatasetName.CUSTOM:
        entries = read_custom(d.path, d.custom_output_len, limit=limit)
        if chat:  # --chat: text prompts go to /v1/chat/completions as one user message
            for e in entries:
                e.chat = e.chat or isinstance(e.prompt, str)
    else:
        raise ValueError(f"{d.name.value} is not read from a file")
    return Pending(entries, d, f"{Path(d.path or '').name} ({d.name.value})")
