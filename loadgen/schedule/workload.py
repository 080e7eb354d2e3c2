"""Workloads: what to send. Seeded and reproducible; prompts are token ids by default (int32 arrays:
4 bytes a token), so their length is exact.

Every prompt starts with the run's salt (a few token ids drawn from the salt
string), so prompts of one run can share prefixes with each other but never
with an earlier run: a cold run is cold even when the seed repeats.

A workload's requests are built when they are asked for (`Items`), request i from (seed, i) alone:
memory grows with the requests in flight, not with the request count, and shard i of k sends
exactly the requests one process would have sent at those places.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.transport.client import RequestSpec

DEFAULT_ID_RANGE = (10, 500)  # clear of the low special ids; valid in any vocabulary of 500+
SALT_TOKENS = 4


class WorkloadError(ValueError):
    """Bad workload input; the message names the option and the fix."""


@dataclass(frozen=True)
class Lengths:
    """A length distribution: fixed N, uniform:LO:HI, normal:MEAN:STD[:LO:HI]."""

    kind: str
    a: float
    b: float = 0.0
    lo: int = 1
    hi: int = 1 << 30

    @classmethod
    def parse(cls, text: str | int, option: str) -> Lengths:
        if isinstance(text, int):
            text = str(text)
        parts = str(text).split(":")
        try:
            if len(parts) == 1:
                n = int(parts[0])
                if n < 1:
                    raise ValueError
                return cls("fixed", n, lo=n, hi=n)
            kind, nums = parts[0], [float(x) for x in parts[1:]]
            if kind == "uniform" and len(nums) == 2 and 1 <= nums[0] <= nums[1]:
                return cls("uniform", nums[0], nums[1], lo=int(nums[0]), hi=int(nums[1]))
            if kind == "normal" and len(nums) in (2, 4) and nums[0] >= 1 and nums[1] >= 0:
                lo, hi = (int(nums[2]), int(nums[3])) if len(nums) == 4 else (1, 1 << 30)
                if 1 <= lo <= hi:
                    return cls("normal", nums[0], nums[1], lo=lo, hi=hi)
        except ValueError:
            pass
        raise WorkloadError(
            f"{option}: cannot read {text!r}; write N, uniform:LO:HI or normal:MEAN:STD[:LO:HI] (positive token counts)"
        )

    def sample(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(rng.integers(int(self.a), int(self.b) + 1))
        return int(np.clip(round(rng.normal(self.a, self.b)), self.lo, self.hi))

    @property
    def max(self) -> int:
        return self.hi if self.kind != "normal" or self.hi < (1 << 30) else int(self.a + 6 * self.b)


def salt_ids(salt: str, n: int = SALT_TOKENS, id_range=DEFAULT_ID_RANGE) -> np.ndarray:
    lo, hi = id_range
    return np.random.default_rng(hash_str(salt)).integers(lo, hi, size=n, dtype=np.int32)


def hash_str(s: str) -> int:
    """A stable 63-bit hash (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little") >> 1


def new_salt() -> str:
    return os.urandom(6).hex()


class Items(Sequence):
    """A workload's requests, each built when asked for by `make(index)`; slices are views (a shard's
    items[i::k] builds nothing until it is read)."""

    def __init__(self, n: int, make: Callable[[int], Any], index: range | None = None):
        self._make = make
        self._index = range(n) if index is None else index

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Items(0, self._make, self._index[i])
        return self._make(self._index[i])


@dataclass
class Workload:
    """Request specs, or conversations (lists of turns sent one after another)."""

    items: Sequence  # RequestSpec | Conversation (Items: built when read)
    description: str
    salt: str
    seed: int
    info: dict = field(default_factory=dict)
    times: list[float] | None = None  # a trace's start times (seconds from the first); None: the run's pacing


@dataclass
class Conversation:
    """Multi-turn: turn i+1's prompt is turn i's prompt + its output tokens + new user tokens."""

    id: str
    first_prompt: np.ndarray
    user_turns: list[np.ndarray]  # new user tokens appended before turns 2..T
    output_tokens: int
    group: int


def _ids(rng: np.random.Generator, n: int, id_range: tuple[int, int]) -> np.ndarray:
    lo, hi = id_range
    return rng.integers(lo, hi, size=n, dtype=np.int32)


def _rng(*key: int) -> np.random.Generator:
    """The random stream of one request: the same whichever process builds it, in whatever order."""
    return np.random.default_rng([k & (2**63 - 1) for k in key])


def synthetic(
    n: int,
    prompt: Lengths,
    output: Lengths,
    seed: int = 0,
    salt: str | None = None,
    id_range=DEFAULT_ID_RANGE,
    prefix: str = "r",
) -> Workload:
    """Independent random prompts of exact lengths."""
    salt = salt or new_salt()
    s = salt_ids(salt, id_range=id_range)

    def make(i: int) -> RequestSpec:
        rng = _rng(seed, i)
        p = max(prompt.sample(rng), len(s) + 1)
        return RequestSpec(
            id=f"{prefix}{i}",
            prompt=np.concatenate([s, _ids(rng, p - len(s), id_range)]),
            prompt_tokens=p,
            output_tokens=output.sample(rng),
        )

    return Workload(
        Items(n, make),
        f"{n} random prompts ({prompt.kind}), outputs ({output.kind})",
        salt,
        seed,
        {"salt_tokens": len(s)},
    )


def shared_prefix(
    n: int,
    groups: int,
    prefix_tokens: int,
    suffix: Lengths,
    output: Lengths,
    seed: int = 0,
    salt: str | None = None,
    id_range=DEFAULT_ID_RANGE,
    suffix_seed: int = 0,
    id_prefix: str = "p",
) -> Workload:
    """Requests round-robin over `groups` prefixes of `prefix_tokens` (salt included), each
    with its own suffix. The prefixes depend on (salt, seed) only; `suffix_seed` draws other
    suffixes over the same prefixes (a primer and a measured run)."""
    if prefix_tokens <= SALT_TOKENS:
        raise WorkloadError(f"--prefix-tokens: must exceed the {SALT_TOKENS}-token run salt")
    salt = salt or new_salt()
    s = salt_ids(salt, id_range=id_range)
    rng = np.random.default_rng(seed)
    prefixes = [np.concatenate([s, _ids(rng, prefix_tokens - len(s), id_range)]) for _ in range(groups)]

    def make(i: int) -> RequestSpec:
        g, rng = i % groups, _rng(seed, suffix_seed, 1, i)
        suf = suffix.sample(rng)
        return RequestSpec(
            id=f"{id_prefix}{i}",
            prompt=np.concatenate([prefixes[g], _ids(rng, suf, id_range)]),
            prompt_tokens=prefix_tokens + suf,
            output_tokens=output.sample(rng),
            group=g,
        )

    return Workload(
        Items(n, make),
        f"{n} requests over {groups} shared prefixes of {prefix_tokens} tokens",
        salt,
        seed,
        {"salt_tokens": len(s), "prefix_tokens": prefix_tokens, "groups": groups},
    )


def multi_turn(
    conversations: int,
    turns: int,
    first_prompt: Lengths,
    user_tokens: Lengths,
    output: int,
    seed: int = 0,
    salt: str | None = None,
    id_range=DEFAULT_ID_RANGE,
) -> Workload:
    salt = salt or new_salt()
    s = salt_ids(salt, id_range=id_range)

    def make(c: int) -> Conversation:
        rng = _rng(seed, c)
        first = np.concatenate([s, _ids(rng, max(first_prompt.sample(rng), len(s) + 1) - len(s), id_range)])
        users = [_ids(rng, user_tokens.sample(rng), id_range) for _ in range(turns - 1)]
        return Conversation(id=f"c{c}", first_prompt=first, user_turns=users, output_tokens=output, group=c)

    return Workload(
        Items(conversations, make),
        f"{conversations} conversations x {turns} turns",
        salt,
        seed,
        {"salt_tokens": len(s)},
    )


def near_limit(
    max_model_len: int,
    max_num_seqs: int,
    output_tokens: int,
    margin: int = 0,
    requests: int | None = None,
    seed: int = 0,
    salt: str | None = None,
    id_range=DEFAULT_ID_RANGE,
    id_prefix: str = "n",
) -> Workload:
    """max_num_seqs concurrent requests whose prompt + output = max_model_len - margin. With id_prefix
    "r", exactly what `loadgen --prompt-tokens P --output-tokens O --seed S --salt X` builds."""
    total = max_model_len - margin
    prompt = total - output_tokens
    if prompt < SALT_TOKENS + 1:
        raise WorkloadError(
            f"near-limit: output {output_tokens} + margin {margin} leave no prompt in max_model_len {max_model_len}"
        )
    w = synthetic(
        requests or max_num_seqs,
        Lengths.parse(prompt, "prompt"),
        Lengths.parse(output_tokens, "output"),
        seed=seed,
        salt=salt,
        id_range=id_range,
        prefix=id_prefix,
    )
    w.description = f"near-limit: {len(w.items)} x ({prompt} + {output_tokens}) tokens at concurrency {max_num_seqs}"
    w.info.update(concurrency=max_num_seqs, prompt_tokens=prompt, output_tokens=output_tokens)
    return w


def flags_of(w: Workload) -> list[str]:
    """The loadgen flags that rebuild a synthetic fixed-length workload request for request (the
    hand-off to `loadgen --workers`: flags, not prompts, so each worker builds only its share)."""
    return [
        "--requests",
        str(len(w.items)),
        "--prompt-tokens",
        str(w.info["prompt_tokens"]),
        "--output-tokens",
        str(w.info["output_tokens"]),
        "--seed",
        str(w.seed),
        "--salt",
        w.salt,
    ]
