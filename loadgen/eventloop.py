"""The event loop a loadgen process runs on: uvloop when it is installed (vLLM installs it, through
uvicorn), else asyncio's own. `--event-loop asyncio` keeps asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
LOOPS = ("auto", "uvloop", "asyncio")


def uvloop_module(kind: str):
    """uvloop for auto (when importable) and uvloop; None for asyncio's own loop."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise
        return None
    return uvloop


def run(coro: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """asyncio.run on the chosen loop (Ctrl-C raises KeyboardInterrupt in the caller, as asyncio.run)."""
    uv = uvloop_module(kind)
    return asyncio.run(coro) if uv is None else uv.run(coro)
