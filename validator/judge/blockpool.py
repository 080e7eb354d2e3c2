"""vLLM 0.32's block pool as the prefix-cache replay (prefixsim.py) follows it: the usable blocks,
the free queue (head: reused first; freed cached blocks to its tail, uncached ones to its head) and
the cached block keys, each with the copies that hold it in the order they were cached."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class Overflow(RuntimeError):
    """The pool ran out: vLLM would have preempted or kept a request waiting, which the client cannot see."""


class BlockPool:
    """The usable blocks, the free queue (head: reused first) and the cached hashes."""

    def __init__(self, usable: int):
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, usable + 1))
        self.key_of: dict[int, Any] = {}
        self.blocks_of: dict[Any, dict[int, None]] = {}  # insertion order: first cached first
        self.ref: dict[int, int] = {}
        self.evicted_by: dict[Any, tuple[float, int, int] | None] = {}  # key -> (time, request, token) of a decode

    def cached(self, key: Any) -> int | None:
        held = self.blocks_of.get(key)
        return next(iter(held)) if held else None  # the first cached copy (BlockHashToBlockMap.get_one_block)

    def take(self, now: float, decode: tuple[int, int] | None = None) -> int:
        """A block from the head of the free queue; `decode` = (request, token) when a decode step takes it."""
        if not self.free:
            raise Overflow("no free block")
        b, _ = self.free.popitem(last=False)
        key = self.key_of.pop(b, None)
        if key is not None:  # evicted: the block is reused for new content
            self.blocks_of[key].pop(b, None)
            if not self.blocks_of[key]:
                del self.blocks_of[key]
                self.evicted_by[key] = None if decode is None else (now, *decode)
        self.ref[b] = 1
        return b

    def touch(self, b: int) -> None:
        if self.ref.get(b, 0) == 0:
            self.free.pop(b, None)
        self.ref[b] = self.ref.get(b, 0) + 1

    def cache(self, b: int, key: Any) -> None:
        if b in self.key_of:
            return
        self.key_of[b] = key
        self.blocks_of.setdefault(key, {})[b] = None

    def release(self, ordered: list[int]) -> None:
        """free_blocks(): `ordered` by eviction priority (a request's blocks, last first)."""
        front: list[int] = []
        back: list[int] = []
        for b in ordered:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (back if b in self.key_of else front).append(b)
        for b in reversed(front):  # prepend_n: front[0] ends up at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)
        for b in back:
            self.free[b] = None
