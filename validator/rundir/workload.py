"""runs/<run>/workload.jsonl, one line a request as sent (its prompt as sent, and for text and chat
prompts the ids the server computed), and audit_text.json (display only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_audit_text(p: Path) -> dict[str, dict]:
    """Display only (never judged): the text around where a dataset's prompts stop sharing."""
    try:
        d = json.loads(p.read_text(encoding="utf-8")) if p.is_file() and p.stat().st_size < 1 << 20 else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(d, dict):
        return {}
    return {
        k: {"at": v["at"], "before": str(v["before"])[:200], "after": str(v["after"])[:200]}
        for k, v in d.items()
        if isinstance(v, dict) and isinstance(v.get("at"), int) and "before" in v and "after" in v
    }


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and all(type(t) is int for t in x)


def workload_item(x: dict[str, Any]) -> tuple[str, Any, int, list[int] | None]:
    """(id, prompt as sent, output tokens, the server's ids of a text or chat prompt or None)."""
    rid, prompt, out, ids = x["id"], x["prompt"], x["output_tokens"], x.get("prompt_ids")
    chat = isinstance(prompt, list) and bool(prompt) and all(isinstance(m, dict) for m in prompt)
    if (
        not isinstance(rid, str)
        or not isinstance(out, int)
        or isinstance(out, bool)
        or not (isinstance(prompt, str) or chat or _is_ids(prompt))
        or not (ids is None or _is_ids(ids))
    ):
        raise TypeError("not a workload line")
    return rid, prompt, out, ids
