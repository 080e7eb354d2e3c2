"""A dataset's requests as read from its file, before the server's tokenizer has made their
lengths exact (sources/resolve.py turns them into RequestSpecs)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

Messages = list[dict[str, Any]]  # chat messages: {"role": ..., "content": "text"}


@dataclass(slots=True)
class Entry:
    id: str
    prompt: str | list[int] | Messages  # text, token ids, or chat messages
    output_tokens: int | None = None  # None: the length of `answer` (ShareGPT)
    answer: str | None = None  # the reply whose token count is the output length
    chat: bool = False  # sent to /v1/chat/completions (messages always are)
    later_turns: list[str] | None = None  # ShareGPT multi-turn: the later human turns


class DatasetError(ValueError):
    """A dataset that cannot be read; the message names the file, the line and the fix."""


def open_dataset(path: str | None, flag: str = "--dataset-path") -> Path:
    if not path:
        raise DatasetError(f"{flag}: give the dataset file")
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{flag}: no such file {p}")
    return p


def check_messages(m: Any) -> Messages:
    """Chat messages as the OpenAI API takes them: a non-empty list of {role, content: text}."""
    if not isinstance(m, list) or not m:
        raise ValueError("messages must be a non-empty list")
    for x in m:
        if not (isinstance(x, dict) and isinstance(x.get("role"), str) and isinstance(x.get("content"), str)):
            raise ValueError('each message must be {"role": "...", "content": "text"}')
    return [{"role": x["role"], "content": x["content"]} for x in m]


def check_ids(p: Any) -> list[int]:
    if not (isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in p)):
        raise ValueError("prompt must be text or a non-empty list of token ids")
    return p
