"""The transport: one streaming request to an OpenAI-compatible server.

The caller owns the aiohttp session. ``send`` fills the record it is given and
never raises (except ``CancelledError``, after marking the record): every
failure becomes ``record.error``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import numpy as np

from loadgen import net
from loadgen.results.records import RequestRecord
from loadgen.transport.sse import StreamParser


@dataclass
class RequestSpec:
    id: str
    prompt: np.ndarray | list[int] | str | list[dict]  # token ids (int32 array or list), text, or chat messages
    output_tokens: int
    prompt_tokens: int | None = None  # asked: exact for token ids, /tokenize'd for text
    token_ids: np.ndarray | None = None  # a text or chat prompt's ids as the server computes them
    chat: bool = False
    group: int | None = None
    turn: int | None = None
    warmup: bool = False
    want_token_ids: bool = False


# the request's id, for a stub or proxy that counts requests (vLLM ignores it; X-Request-Id it
# would adopt as its own request id, which must stay unique across runs)
ID_HEADER = "X-Kvgate-Request-Id"
# vLLM's HTTP server (uvicorn) closes an idle keep-alive connection after 5 s
# (VLLM_HTTP_TIMEOUT_KEEP_ALIVE); the client drops its own first, so a request is never written to a
# connection the server is closing
KEEPALIVE_S = 2.0


def connector(pin=None) -> aiohttp.TCPConnector:
    """The connection pool for load: unbounded (the runner bounds concurrency), short keep-alive,
    connecting only to the addresses the loopback rule checked (loadgen.net.Pin)."""
    return net.connector(pin, limit=0, keepalive_timeout=KEEPALIVE_S)


# request bodies encoded before a run, at most (an 8k-token prompt is about 40 kB of JSON): 1,600
# such bodies, more than the lag benchmark sends (5 waves of 500 streams of 4,000-token prompts: 50 MB)
PREPARE_BYTES = 64 << 20


class Transport(Protocol):
    def prepare(self, specs) -> None:
        """Do before the run what would otherwise be done per request while streams are live."""

    async def send(self, spec: RequestSpec, rec: RequestRecord, t0: float) -> list[int] | None:
        """Fill rec; return the output token ids when spec.want_token_ids (else None). Never raises."""


class OpenAIStream:
    """Streaming /v1/completions (token ids or text) or /v1/chat/completions."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        model: str,
        api_key: str | None = None,
        request_timeout: float = 300.0,
        read_timeout: float = 60.0,
        exact_output: bool = True,
        token_counts: bool = False,
    ):
        self.session = session
        self.base = base_url.rstrip("/")
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._post_headers = {**self.headers, "Content-Type": "application/json"}
        self.timeout = aiohttp.ClientTimeout(total=request_timeout, sock_read=read_timeout)
        self.request_timeout, self.read_timeout = request_timeout, read_timeout
        self.exact_output = exact_output
        # ask for usage in every chunk: exact delivered-token counts while a stream is live
        self.token_counts = token_counts
        self.prepared: dict[str, tuple[str, bytes]] = {}  # request id -> (url, body), see prepare()

    def payload(self, spec: RequestSpec) -> tuple[str, dict]:
        body: dict = {
            "model": self.model,
            "max_tokens": spec.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
        if self.token_counts:
            body["stream_options"]["continuous_usage_stats"] = True
        if self.exact_output:  # exactly output_tokens tokens, whatever the model would say
            body.update(ignore_eos=True, min_tokens=spec.output_tokens)
        if spec.chat:
            if isinstance(spec.prompt, str):
                body["messages"] = [{"role": "user", "content": spec.prompt}]
            elif isinstance(spec.prompt, list) and spec.prompt and isinstance(spec.prompt[0], dict):
                body["messages"] = spec.prompt
            else:
                raise ValueError("chat requests need a text prompt or messages")
            return self.base + "/v1/chat/completions", body
        body["prompt"] = spec.prompt.tolist() if isinstance(spec.prompt, np.ndarray) else spec.prompt
        if spec.want_token_ids:
            body["return_token_ids"] = True
        return self.base + "/v1/completions", body

    def encode(self, spec: RequestSpec) -> tuple[str, bytes]:
        url, body = self.payload(spec)
        return url, json.dumps(body, separators=(",", ":")).encode()

    def prepare(self, specs) -> None:
        """Encode the first bodies before the run, up to PREPARE_BYTES: JSON of an 8k-token prompt
        costs about 0.5 ms, which, done in the event loop as a wave of requests starts together,
        delays every live stream. The rest are encoded as they are sent."""
        self.prepared = {}
        used = 0
        for s in specs:
            if used > PREPARE_BYTES or not isinstance(s, RequestSpec):  # conversations: built as they go
                break
            try:
                self.prepared[s.id] = enc = self.encode(s)
            except ValueError:
                continue  # send() records the error
            used += len(enc[1])

    async def send(self, spec: RequestSpec, rec: RequestRecord, t0: float) -> list[int] | None:
        perf = time.perf_counter
        parser = StreamParser(want_token_ids=spec.want_token_ids, want_counts=self.token_counts)
        # the record shares the parser's lists, so an observer sees tokens as they arrive
        rec.chunk_times, rec.chunk_tokens = parser.token_times, parser.token_counts
        sent = perf()
        rec.sent = sent - t0
        try:
            prepared = self.prepared.pop(spec.id, None)
            url, data = prepared or self.encode(spec)
            # never retried: a POST the server may have read cannot be told apart from one it did not,
            # and a second copy would double the load the run meant to apply. Stale pooled
            # connections are avoided at their cause instead (see connector()).
            resp_cm = self.session.post(
                url,
                data=data,
                headers={**self._post_headers, ID_HEADER: spec.id},
                timeout=self.timeout,
                allow_redirects=False,
            )
            async with resp_cm as resp:
                rec.status = resp.status
                if resp.status != 200:
                    text = (await resp.content.read(2000)).decode(errors="replace")
                    rec.error = f"HTTP {resp.status}: {' '.join(text.split())[:300]}"
                    return None
                feed = parser.feed
                async for data in resp.content.iter_any():
                    feed(data, perf() - sent)
                parser.close(perf() - sent)
            rec.done = perf() - sent
        except asyncio.CancelledError:
            rec.error = "cancelled"
            self._finish(rec, parser, spec)
            raise
        except asyncio.TimeoutError:
            rec.error = f"timeout: no data for {self.read_timeout:g} s or over {self.request_timeout:g} s in all"
        except aiohttp.ClientPayloadError as e:
            rec.error = f"stream cut: {e}"
        except (aiohttp.ClientError, OSError, ValueError) as e:
            rec.error = f"{type(e).__name__}: {e}"
        self._finish(rec, parser, spec)
        return parser.token_ids

    @staticmethod
    def _finish(rec: RequestRecord, parser: StreamParser, spec: RequestSpec) -> None:
        rec.chunk_times, rec.chunk_tokens = parser.token_times, parser.token_counts
        rec.text_chunks = parser.text_events
        rec.finish_reason = parser.finish_reason
        u = parser.usage
        if u:
            rec.prompt_tokens = u.get("prompt_tokens")
            rec.output_tokens = u.get("completion_tokens")
            details = u.get("prompt_tokens_details")
            if isinstance(details, dict):
                rec.cached_tokens = details.get("cached_tokens")
        m = parser.server_metrics or {}
        rec.server_queue_ms = _ms(m.get("queue_time_ms"))
        rec.server_ttft_ms = _ms(m.get("time_to_first_token_ms"))
        rec.server_itl_ms = _ms(m.get("mean_itl_ms"))
        if parser.error and rec.error is None:
            rec.error = parser.error
        if rec.error is None and rec.status == 200:
            if not parser.token_times:
                rec.error = "no token in the stream"
            elif u is None and not parser.done:
                rec.error = "stream ended early: no usage chunk and no [DONE]"
        mism = []
        if spec.output_tokens is not None and rec.output_tokens is not None and rec.output_tokens != spec.output_tokens:
            mism.append(f"output asked {spec.output_tokens} served {rec.output_tokens}")
        if spec.prompt_tokens is not None and rec.prompt_tokens is not None and rec.prompt_tokens != spec.prompt_tokens:
            mism.append(f"prompt asked {spec.prompt_tokens} served {rec.prompt_tokens}")
        rec.token_mismatch = "; ".join(mism) or None


def _ms(v: object) -> float | None:
    """A figure of vLLM's per-request metrics; None when absent or not a number."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
