"""The custom JSONL dataset: one request a line, prompt text or token ids and its output length."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loadgen.schedule.workload import Workload, WorkloadError
from loadgen.transport.client import RequestSpec


def from_dataset(path: str | os.PathLike, default_output: int | None = None, limit: int | None = None) -> Workload:
    """JSONL lines: {"prompt": "text" | [ids], "output_tokens": N, "prompt_tokens": N?, "chat": bool?}."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"--dataset: no such file {p}")
    items: list[RequestSpec] = []
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                prompt = d["prompt"]
                out = d.get("output_tokens", default_output)
                if not (
                    isinstance(prompt, str)
                    or (isinstance(prompt, list) and prompt and all(isinstance(x, int) and x >= 0 for x in prompt))
                ):
                    raise ValueError("prompt must be text or a list of token ids")
                if not isinstance(out, int) or out < 1:
                    raise ValueError("output_tokens must be a positive integer (or pass --output-tokens)")
            except (ValueError, KeyError, TypeError) as e:
                raise WorkloadError(f"--dataset: {p} line {n}: {e}") from None
            items.append(
                RequestSpec(
                    id=f"d{len(items)}",
                    prompt=prompt,
                    output_tokens=out,
                    prompt_tokens=len(prompt) if isinstance(prompt, list) else d.get("prompt_tokens"),
                    chat=bool(d.get("chat", False)),
                )
            )
            if limit and len(items) >= limit:
                break
    if not items:
        raise WorkloadError(f"--dataset: {p} holds no requests")
    return Workload(items, f"{len(items)} requests replayed from {p.name}", salt="", seed=0)
