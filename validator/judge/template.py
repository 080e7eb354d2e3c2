"""The prompt-template audit (pure): where a dataset's prompts stop sharing, and what the prefix
cache would give if the part that differs came after the part they share.

A prefix hit needs identical tokens from the very first one: a system prompt that starts with a
timestamp or a request id shares nothing, however long the text after it. Prompts are grouped by
the longest run of tokens they share with a group's first prompt (at least one block); for each
group the audit names the first position where its prompts differ, and the hit they would get if
that run came first (floor(min(run, len - 1) / block) blocks for every prompt but the first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_PROMPTS = 2000  # prompts audited (in send order); the rest are counted, not compared
MAX_GROUPS = 32  # groups a prompt is compared with (the most recent)
K = 8  # tokens that must repeat before a common run is looked for


@dataclass
class Group:
    first: str  # the request whose prompt the others are compared with
    tokens: list[int]
    index: dict[tuple[int, ...], int] = field(default_factory=dict)
    members: list[str] = field(default_factory=list)
    differ_at: int | None = None  # first token position where a member differs from the first prompt
    run: int = 0  # the shortest common run of a member with the first prompt
    run_starts: int = 0  # where that run starts in the first prompt

    def __post_init__(self) -> None:
        for j in range(len(self.tokens) - K + 1):
            self.index.setdefault(tuple(self.tokens[j : j + K]), j)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def longest_run(a: list[int], g: Group) -> tuple[int, int]:
    """(length, start in the group's first prompt) of the longest run of `a` found in it."""
    best, where, i = 0, 0, 0
    b = g.tokens
    while i <= len(a) - K:
        j = g.index.get(tuple(a[i : i + K]))
        if j is None:
            i += 1
            continue
        n = K
        while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n]:
            n += 1
        if n > best:
            best, where = n, j
        i += max(1, n - K + 1)
    return best, where


@dataclass(frozen=True)
class Audit:
    prompts: int
    prompt_tokens: int
    possible_hit_tokens: int  # with every group's shared run first
    groups: list[dict[str, Any]]
    possible: dict[str, int]  # per request

    @property
    def possible_rate(self) -> float | None:
        return self.possible_hit_tokens / self.prompt_tokens if self.prompt_tokens else None


def audit(prompts: list[tuple[str, list[int]]], block_size: int, hits: dict[str, int] | None = None) -> Audit:
    """`prompts` in the order they were sent; `hits`: each request's predicted hit (the possible hit
    is never below it)."""
    groups: list[Group] = []
    possible: dict[str, int] = {}
    total = sum(len(p) for _, p in prompts)
    for rid, p in prompts[:MAX_PROMPTS]:
        best: tuple[int, int, Group] | None = None
        for g in groups[-MAX_GROUPS:]:
            n, at = longest_run(p, g)
            if n >= block_size and (best is None or n > best[0]):
                best = (n, at, g)
        got = (hits or {}).get(rid, 0)
        if best is None:
            groups.append(Group(rid, p, members=[rid]))
            possible[rid] = got
            continue
        n, at, g = best
        g.members.append(rid)
        d = common_prefix(p, g.tokens)
        g.differ_at = d if g.differ_at is None else min(g.differ_at, d)
        if g.run == 0 or n < g.run:
            g.run, g.run_starts = n, at
        possible[rid] = max(got, min(n, len(p) - 1) // block_size * block_size)
    shown = sorted((g for g in groups if len(g.members) > 1), key=lambda g: -len(g.members))
    return Audit(
        prompts=len(prompts),
        prompt_tokens=total,
        possible_hit_tokens=sum(possible.values()),
        groups=[
            {
                "first": g.first,
                "requests": len(g.members),
                "differ_at": g.differ_at,
                "shared_run": g.run,
                "run_starts": g.run_starts,
                "moved": g.run_starts > (g.differ_at or 0),  # the shared run does not start the prompt
            }
            for g in shown
        ],
        possible=possible,
    )


def break_points(prompts: list[tuple[str, list[int]]], block_size: int) -> dict[str, int]:
    """For display: each group's first prompt and the position where its group differs from it."""
    a = audit(prompts, block_size)
    return {g["first"]: g["differ_at"] for g in a.groups if g["differ_at"] is not None}
