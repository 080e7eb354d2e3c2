"""The quality A/B's requests: prompts sized with the server's tokenizer, then each prompt sent
alone (no batch to vary the arithmetic), greedy, with logprobs and token ids.

Bounded in count and time: a tokenizer call or a generation has its timeout, the filler is sized
in at most 5 tries per prompt, and a failed request is recorded with its error, never raised.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from loadgen import net
from validator.errors import InputError
from validator.quality.prompts import Prompt, Task, TaskKind, build, builtin_tasks

SIZING_TRIES = 5
MAX_BODY = 64 << 20


async def _post_json(
    s: aiohttp.ClientSession, url: str, body: dict, timeout: float, headers: dict
) -> tuple[int | None, Any]:
    try:
        async with s.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
        ) as r:
            raw = await r.content.read(MAX_BODY + 1)
            if len(raw) > MAX_BODY:
                return None, "answer larger than 64 MiB"
            text = raw.decode(errors="replace")
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, text[:300]
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return None, f"{type(e).__name__}: {e}"


async def count_tokens(s, base_url: str, model: str, text: str, headers: dict, timeout: float) -> int:
    status, body = await _post_json(s, base_url + "/tokenize", {"model": model, "prompt": text}, timeout, headers)
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("count"), int):
        raise InputError(
            f"quality: the server's /tokenize did not answer ({status}: {str(body)[:120]}); prompts cannot be sized"
        )
    return body["count"]


async def sized_prompts(
    s, base_url: str, model: str, budget: int, headers: dict, timeout: float, tasks: list[Task] | None = None
) -> list[Prompt]:
    """The built-in prompts, each filled to its share of `budget` tokens (never over it)."""
    out = []
    per_word = None
    for task in tasks or builtin_tasks():
        target = max(int(task.length_share * budget), 16)
        words = max(int(target / (per_word or 4.0)), 1)
        best = None
        for _ in range(SIZING_TRIES):
            p = build(task, words, target)
            n = await count_tokens(s, base_url, model, p.text, headers, timeout)
            if n <= target and (best is None or n > best[1]):
                best = (p, n)
            per_word = max(n / max(words, 1), 0.1)
            if target * 0.97 <= n <= target:
                break
            words = max(int(words * target / n * (0.99 if n > target else 1.0)), 1)
        if best is None:  # even the shortest filler is too long: the question alone
            p = build(task, 0, target)
            best = (p, await count_tokens(s, base_url, model, p.text, headers, timeout))
            if best[1] > budget:
                raise InputError(f"quality.max_prompt_tokens: {budget} tokens cannot hold the {task.kind.value} prompt")
        out.append(best[0])
    return out


def prompts_from_file(path: str | Path) -> list[Prompt]:
    """The user's prompts: JSON lines with "prompt", and optionally "answer" and "id"."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"quality.dataset_path: cannot read {path}: {e.strerror}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            raise InputError(f"quality.dataset_path: line {i} of {path} is not JSON") from None
        if not isinstance(d, dict) or not isinstance(d.get("prompt"), str) or not d["prompt"]:
            raise InputError(f'quality.dataset_path: line {i} of {path} has no "prompt" string')
        answer = d.get("answer")
        out.append(
            Prompt(
                str(d.get("id", f"line-{i}")), TaskKind.GIVEN, d["prompt"], str(answer) if answer is not None else None
            )
        )
    if not out:
        raise InputError(f"quality.dataset_path: {path} holds no prompt")
    if len(out) > 10000:
        raise InputError(f"quality.dataset_path: {len(out)} prompts; the A/B takes at most 10000")
    return out


async def generate(
    s, base_url: str, model: str, prompts: list[Prompt], max_tokens: int, logprobs: int, headers: dict, timeout: float
) -> list[dict[str, Any]]:
    """One greedy completion per prompt, one at a time; a record per prompt (the error when it failed)."""
    out = []
    for p in prompts:
        body = {
            "model": model,
            "prompt": p.text,
            "max_tokens": max_tokens,
            "temperature": 0,
            "seed": 0,
            "logprobs": logprobs,
            "return_tokens_as_token_ids": True,  # tokens compared by id, not by their text
        }
        t0 = time.time()
        status, d = await _post_json(s, base_url + "/v1/completions", body, timeout, headers)
        rec: dict[str, Any] = {"id": p.id, "start": t0, "end": time.time(), "error": None}
        try:
            if status != 200:
                raise ValueError(f"HTTP {status}: {str(d)[:200]}")
            choice = d["choices"][0]
            lp = choice.get("logprobs") or {}
            rec.update(
                text=choice.get("text", ""),
                prompt_tokens=(d.get("usage") or {}).get("prompt_tokens"),
                tokens=lp.get("tokens") or [],
                logprobs=lp.get("token_logprobs") if lp else None,
                top=lp.get("top_logprobs") if lp else None,
            )
        except (ValueError, KeyError, IndexError, TypeError) as e:
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        out.append(rec)
    return out


async def reset_cache(s, base_url: str) -> str:
    """ "reset" when the prefix cache was emptied (dev mode), else "cached": the repeat may then
    read the first run's blocks."""
    status, _ = await net.post(s, base_url + "/reset_prefix_cache", 10.0)
    return "reset" if status == 200 else "cached"
