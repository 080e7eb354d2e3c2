"""The ShareGPT JSON (vLLM's `sharegpt`): a list of {"conversations": [{"from": ..., "value": text},
...]}. As vLLM reads it: the first turn is the prompt and the second the reply, whose token count is
the output length (unless --sharegpt-output-len); entries with fewer than two turns are skipped. In
file order (vLLM shuffles by --seed): a replay is the file's traffic, request for request. With
--turns N, the first N human turns are one conversation, each turn's prompt holding the history."""

from __future__ import annotations

import json

from loadgen.sources.entries import DatasetError, Entry, open_dataset


def read_sharegpt(path: str | None, limit: int | None = None, turns: int | None = None) -> list[Entry]:
    p = open_dataset(path)
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except (ValueError, RecursionError) as e:
        raise DatasetError(f"--dataset-path: {p} is not ShareGPT JSON ({str(e)[:80]})") from None
    if not isinstance(data, list):
        raise DatasetError(f"--dataset-path: {p} is not ShareGPT JSON: a list of {{conversations: [...]}} expected")
    items: list[Entry] = []
    for k, conv in enumerate(data):
        turns_ = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(turns_, list) or len(turns_) < 2:
            continue
        values = [t["value"] for t in turns_ if isinstance(t, dict) and isinstance(t.get("value"), str)]
        if len(values) != len(turns_):
            raise DatasetError(f'--dataset-path: {p} entry {k}: every turn needs a text "value"')
        if not values[0]:
            continue
        later = [values[i] for i in range(2, len(values), 2) if values[i]][: (turns - 1)] if turns else None
        if turns and len(later or []) < turns - 1:
            continue  # too short for the turns asked
        items.append(Entry(id=f"s{len(items)}", prompt=values[0], answer=values[1], later_turns=later))
        if limit and len(items) >= limit:
            break
    if not items:
        raise DatasetError(f"--dataset-path: {p} holds no conversation of two turns or more")
    return items
