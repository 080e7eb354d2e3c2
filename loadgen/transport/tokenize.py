"""The server's tokenizer over HTTP (vLLM's POST /tokenize and /detokenize): the exact ids it will
compute for a text prompt or a chat conversation, so a replayed dataset's lengths are never guessed
and nothing is downloaded."""

from __future__ import annotations

from typing import Any

import aiohttp


class TokenizeError(RuntimeError):
    """The server did not tokenize; the message says what it answered."""


class ServerTokenizer:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str, headers: dict | None = None):
        self.session = session
        self.base = base_url.rstrip("/")
        self.model = model
        self.headers = headers or {}
        self.calls = 0

    async def _post(self, route: str, body: dict[str, Any]) -> dict:
        self.calls += 1
        try:
            async with self.session.post(
                self.base + route,
                json={"model": self.model, **body},
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=60),
                allow_redirects=False,
            ) as r:
                if r.status != 200:
                    text = " ".join((await r.text())[:200].split())
                    raise TokenizeError(f"{route} answered HTTP {r.status}: {text}")
                d = await r.json()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            raise TokenizeError(f"{route}: {type(e).__name__}: {e}") from None
        if not isinstance(d, dict):
            raise TokenizeError(f"{route} answered something other than a JSON object")
        return d

    async def encode(self, text: str, special: bool = True) -> list[int]:
        d = await self._post("/tokenize", {"prompt": text, "add_special_tokens": special})
        return _ids(d)

    async def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        d = await self._post("/tokenize", {"messages": messages, "add_generation_prompt": True})
        return _ids(d)

    async def decode(self, ids: list[int]) -> str:
        d = await self._post("/detokenize", {"tokens": ids})
        text = d.get("prompt")
        if not isinstance(text, str):
            raise TokenizeError("/detokenize answered no text")
        return text


def _ids(d: dict) -> list[int]:
    ids = d.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
        raise TokenizeError("/tokenize answered no token ids")
    return ids
