"""The custom JSONL dataset (vLLM's `custom`): one request a line,
{"prompt": "text" | [token ids], "output_tokens": N} or {"messages": [...], "output_tokens": N}
(chat, sent to /v1/chat/completions); "chat": true sends a text prompt as one user message."""

from __future__ import annotations

import json

from loadgen.sources.entries import DatasetError, Entry, check_ids, check_messages, open_dataset


def read_custom(
    path: str | None, default_output: int, limit: int | None = None, flag: str = "--dataset-path"
) -> list[Entry]:
    p = open_dataset(path, flag)
    items: list[Entry] = []
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                if not isinstance(d, dict):
                    raise ValueError("each line must be a JSON object")
                out = d.get("output_tokens", default_output)
                if not isinstance(out, int) or isinstance(out, bool) or out < 1:
                    raise ValueError("output_tokens must be a positive integer")
                if "messages" in d:
                    entry = Entry(
                        id=f"d{len(items)}", prompt=check_messages(d["messages"]), output_tokens=out, chat=True
                    )
                elif isinstance(d.get("prompt"), str) and d["prompt"]:
                    entry = Entry(id=f"d{len(items)}", prompt=d["prompt"], output_tokens=out, chat=bool(d.get("chat")))
                else:
                    entry = Entry(id=f"d{len(items)}", prompt=check_ids(d.get("prompt")), output_tokens=out)
                    if d.get("chat"):
                        raise ValueError("chat requests need text or messages, not token ids")
            except (ValueError, KeyError, TypeError) as e:
                raise DatasetError(f"{flag}: {p} line {n}: {e}") from None
            items.append(entry)
            if limit and len(items) >= limit:
                break
    if not items:
        raise DatasetError(f"{flag}: {p} holds no requests")
    return items
