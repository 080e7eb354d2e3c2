"""A dataset's entries made exact: every text and chat prompt tokenized by the server that will
serve it (POST /tokenize, the same tokenizer and chat template, nothing guessed or downloaded), so
each request carries the token ids the server will compute and the judge can predict the prefix
cache from them. ShareGPT replies are tokenized for their length. Requests that cannot be served
(vLLM's ShareGPT pruning, longer than max_model_len) are dropped and counted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from loadgen.dataset_options import SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL, SHAREGPT_MIN, DatasetName, DatasetOptions
from loadgen.schedule.workload import Conversation, Workload
from loadgen.sources.entries import Entry, Messages
from loadgen.transport.client import RequestSpec

TOKENIZE_IN_FLIGHT = 8


class Tokenizer(Protocol):
    async def encode(self, text: str, special: bool = True) -> list[int]:
        """The ids the server computes for a /v1/completions text prompt (special: with BOS etc.)."""

    async def encode_chat(self, messages: Messages) -> list[int]:
        """The ids of the prompt /v1/chat/completions renders from these messages."""


@dataclass
class Drops:
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, why: str) -> None:
        self.counts[why] = self.counts.get(why, 0) + 1

    def line(self) -> str:
        return ", ".join(f"{n} {why}" for why, n in self.counts.items())


async def _one(e: Entry, tok: Tokenizer, opts: DatasetOptions, drops: Drops, group: int):
    if isinstance(e.prompt, list) and e.prompt and isinstance(e.prompt[0], dict):
        ids = await tok.encode_chat(e.prompt)  # messages, by the test above
        sent: object = e.prompt
    elif isinstance(e.prompt, str):
        ids = await tok.encode_chat([{"role": "user", "content": e.prompt}]) if e.chat else await tok.encode(e.prompt)
        sent = e.prompt
    else:
        ids = [int(x) for x in e.prompt]  # type: ignore[arg-type]  # token ids: neither text nor messages
        sent = None
    fixed = opts.sharegpt_output_len if opts.name is DatasetName.SHAREGPT else None
    out = fixed or e.output_tokens
    if out is None:
        out = len(await tok.encode(e.answer or "", special=False))
    if opts.name is DatasetName.SHAREGPT and (
        len(ids) < SHAREGPT_MIN
        or (fixed is None and out < SHAREGPT_MIN)
        or len(ids) > SHAREGPT_MAX_PROMPT
        or len(ids) + out > SHAREGPT_MAX_TOTAL
    ):
        drops.add("left out by vLLM's ShareGPT rules (4 to 1,024 prompt tokens, 4+ output, 2,048 in all)")
        return None
    if out < 1:
        drops.add("with an empty reply")
        return None
    if opts.max_model_len is not None and len(ids) + out > opts.max_model_len:
        drops.add(f"longer than max_model_len {opts.max_model_len}")
        return None
    arr = np.asarray(ids, dtype=np.int32)
    if e.later_turns:
        users = [np.asarray(await tok.encode(t, special=False), dtype=np.int32) for t in e.later_turns]
        return Conversation(id=e.id, first_prompt=arr, user_turns=users, output_tokens=out, group=group)
    return RequestSpec(
        id=e.id,
        prompt=arr if sent is None else sent,  # type: ignore[arg-type]
        token_ids=None if sent is None else arr,
        prompt_tokens=len(ids),
        output_tokens=out,
        chat=e.chat or not isinstance(sent, (str, type(None))),
    )


async def resolve(entries: list[Entry], tok: Tokenizer, opts: DatasetOptions, source: str) -> tuple[Workload, Drops]:
    """The workload of these entries, in their order (at most TOKENIZE_IN_FLIGHT /tokenize calls at once)."""
    drops = Drops()
    gate = asyncio.Semaphore(TOKENIZE_IN_FLIGHT)

    async def one(k: int, e: Entry):
        async with gate:
            return await _one(e, tok, opts, drops, k)

    made = await asyncio.gather(*(one(k, e) for k, e in enumerate(entries)))
    items = [x for x in made if x is not None]
    what = f"{len(items)} requests of {source}" + (f" ({drops.line()} left out)" if drops.counts else "")
    return Workload(items, what, salt="", seed=0, info={"dataset": opts.name.value}), drops
