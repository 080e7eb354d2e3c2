"""What a run will hold in memory, known before anything is built (pure), and the budget it must fit.

Prompts are built as they are sent (workload.Items), so what grows with the request count is the
records: each finished request keeps its record (about 420 bytes) and one 8-byte arrival time per
token chunk, because every percentile is computed from all of them at the end. The other terms
are bounded by what is in flight: the prompts being sent (4 bytes a token as an int32 array, about
5 more as the JSON body), the bodies encoded before the run (at most client.PREPARE_BYTES), shared
prefixes (kept for the whole run), and for multi-turn runs each live conversation's history, which
grows by the output and the next user turn at every turn.

Measured on CPython 3.11 (tracemalloc, 10,000 finished records of 128 chunk times each): 1,423 bytes
a record, 420 + 8 x 128.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN_BYTES = 4  # an int32 token id
JSON_BYTES_PER_TOKEN = 5  # "123," in a request body
RECORD_BYTES = 420  # a finished RequestRecord, without its chunk times
CHUNK_BYTES = 8  # one arrival time (array of doubles)
BODY_BYTES = 300  # a request body besides its prompt
DEFAULT_BUDGET = 1 << 30  # --max-memory
MAX_PROMPT_TOKENS = 1 << 24  # 16,777,216: longer than any model's context


class BudgetError(ValueError):
    """A run that would not fit its budget; the message names the flag to change."""


@dataclass(frozen=True, kw_only=True)
class Shape:
    """What decides a run's memory, from the flags."""

    requests: int  # at most (a --duration run without --requests: the cap)
    prompt_max: int  # tokens of the longest prompt (a conversation's first turn)
    output_max: int
    in_flight: int  # concurrency, or the open loop's ceiling
    prefix_groups: int = 0
    prefix_tokens: int = 0
    turns: int = 0  # multi-turn: turns per conversation
    user_max: int = 0  # multi-turn: new user tokens per turn
    dataset_bytes: int = 0  # a dataset is read whole: its file size

    @property
    def conversation_max(self) -> int:
        """The longest prompt a conversation reaches: its history at the last turn."""
        if self.turns < 2:
            return self.prompt_max
        return self.prompt_max + (self.turns - 1) * (self.output_max + self.user_max)


def terms(s: Shape, prepare_bytes: int) -> dict[str, int]:
    """Bytes by what holds them."""
    per_prompt = s.conversation_max * (TOKEN_BYTES + JSON_BYTES_PER_TOKEN) + BODY_BYTES
    out = {
        "records": s.requests * (RECORD_BYTES + CHUNK_BYTES * s.output_max),
        "prompts in flight": min(s.in_flight, s.requests) * per_prompt,
        "bodies encoded before the run": min(s.requests * per_prompt, prepare_bytes),
    }
    if s.prefix_groups:
        out["shared prefixes"] = s.prefix_groups * s.prefix_tokens * TOKEN_BYTES
    if s.dataset_bytes:
        out["dataset"] = 10 * s.dataset_bytes  # JSON text read into Python objects
    return out


def check(s: Shape, budget: int, prepare_bytes: int) -> dict[str, int]:
    """The terms, or BudgetError naming the flag to change: a prompt longer than any context, more
    turns than requests, or a total over the budget."""
    if s.prompt_max > MAX_PROMPT_TOKENS:
        raise BudgetError(
            f"--prompt-tokens: prompts of up to {s.prompt_max:,} tokens are longer than any model's "
            f"context (kvgate's bound: {MAX_PROMPT_TOKENS:,}); lower it"
        )
    if s.turns > s.requests:
        raise BudgetError(
            f"--turns: {s.turns:,} turns a conversation need at least as many requests (--requests "
            f"{s.requests:,}); lower --turns"
        )
    if s.conversation_max > MAX_PROMPT_TOKENS:
        raise BudgetError(
            f"--turns: after {s.turns:,} turns a conversation's prompt reaches "
            f"{s.conversation_max:,} tokens, longer than any model's context "
            f"({MAX_PROMPT_TOKENS:,}); lower --turns"
        )
    t = terms(s, prepare_bytes)
    total = sum(t.values())
    if total > budget:
        ranked = sorted(t.items(), key=lambda kv: -kv[1])
        parts = ", ".join(f"{k} {human(v)}" for k, v in ranked if v)
        raise BudgetError(
            f"--max-memory: this run would hold about {human(total)} ({parts}), over the "
            f"{human(budget)} budget; lower {LOWER[ranked[0][0]]}, or raise --max-memory"
        )
    return t


# the flags that shrink each term
LOWER = {
    "records": "--requests or --output-tokens",
    "prompts in flight": "--concurrency, --prompt-tokens or --turns",
    "bodies encoded before the run": "--prompt-tokens",
    "shared prefixes": "--prefix-groups or --prefix-tokens",
    "dataset": "the dataset (--requests reads only its first lines)",
}


def requests_within(budget: int, s: Shape, prepare_bytes: int) -> int:
    """The most requests whose records fit the budget beside the other terms (for a run bounded by
    --duration only: its count bound)."""
    other = sum(v for k, v in terms(s, prepare_bytes).items() if k != "records")
    return max((budget - other) // (RECORD_BYTES + CHUNK_BYTES * s.output_max), 1)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(|b|kib|mib|gib|tib|kb|mb|gb|tb)\s*$", re.I)
_UNIT = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def parse_size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise BudgetError(f"--max-memory: cannot read {text[:40]!r}; write e.g. 1GiB, 512MiB or a byte count")
    n = int(float(m.group(1)) * _UNIT[m.group(2).lower()])
    if not 1 << 20 <= n <= 1 << 50:
        raise BudgetError(f"--max-memory: {text[:40]!r} is out of range; give 1MiB to 1PiB")
    return n


def human(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"
