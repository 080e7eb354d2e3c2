"""The fast transport: streaming requests over plain asyncio sockets, without aiohttp's per-request
cost (issue 25).

aiohttp spends about 70 us of Python to start a request and 30 us to finish one; when a wave of
streams ends together, hundreds of requests start in one event-loop iteration and each waits behind
the others while its TTFT clock already runs. Here a request is a pre-built byte string written to a
pooled keep-alive connection, and a request is stamped as sent only when its bytes are written. The
response is parsed as it is read: status and headers, then HTTP/1.1 chunked (or sized) body, each
network read handed to the SSE parser with the time of that read. httptools (the C parser under
uvicorn) does the HTTP framing when it is installed; a small parser of our own otherwise.

Plain http on the pinned loopback addresses only: TLS and anything else go through OpenAIStream
(aiohttp), which make_transport() picks. The contract is OpenAIStream's: send() fills the record,
never raises but CancelledError, and fails as OpenAIStream fails (same error texts where the cause
is the same), so records from either transport read the same.
"""

from __future__ import annotations

import asyncio
import select
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from loadgen.net import Pin
from loadgen.results.records import RequestRecord
from loadgen.transport.client import ID_HEADER, KEEPALIVE_S, OpenAIStream, RequestSpec
from loadgen.transport.httpparse import HttpError, response_parser
from loadgen.transport.sse import StreamParser

ERROR_BODY = 2000  # bytes of a non-200 body kept for the error text


class _Exchange:
    """One request's response, fed by the connection's reads."""

    __slots__ = ("sse", "sent", "status", "error_body", "done", "last_read", "parser", "keep_alive")

    def __init__(self, sse: StreamParser, sent: float, done: asyncio.Future) -> None:
        self.sse = sse
        self.sent = sent
        self.status: int | None = None
        self.error_body = bytearray()
        self.done = done
        self.last_read = sent
        self.parser: Any = None
        self.keep_alive = True

    # httptools' callbacks (and our parser's)
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()  # false on "Connection: close"

    def on_body(self, body: bytes) -> None:
        if self.status == 200:
            self.sse.feed(body, self.last_read - self.sent)
        elif len(self.error_body) < ERROR_BODY:
            self.error_body += body[: ERROR_BODY - len(self.error_body)]
            if len(self.error_body) >= ERROR_BODY and not self.done.done():
                self.done.set_result(None)  # enough of an error body: the connection is not reused

    def on_message_complete(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _Conn(asyncio.Protocol):
    """A keep-alive connection carrying one exchange at a time."""

    def __init__(self, pure: bool = False) -> None:
        self.pure = pure  # our own HTTP parser even where httptools is installed (tests)
        self.transport: asyncio.Transport | None = None
        self.ex: _Exchange | None = None
        self.parser = None
        self.closed = False
        self.idle_since = 0.0
        self.fd = -1

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self.fd = sock.fileno() if sock is not None else -1

    def reusable(self) -> bool:
        """Open, and nothing to read while idle. A server that closes a connection as its response ends
        sends its FIN right behind the last chunk: the kernel holds it before the event loop has called
        eof_received, and a request written there is lost unanswered (ServerDisconnectedError). The
        idle socket is polled first, as urllib3 does before it reuses a pooled connection."""
        if self.closed or self.fd < 0:
            return False
        p = select.poll()
        p.register(self.fd, select.POLLIN | select.POLLPRI)
        return not p.poll(0)  # readable while idle: EOF, a reset, or bytes nobody asked for

    def start(self, ex: _Exchange, payload: bytes) -> None:
        self.ex = ex
        self.parser = ex.parser = response_parser(ex, self.pure)
        assert self.transport is not None
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        ex = self.ex
        if ex is None or self.parser is None:
            self.abort()  # nothing asked: a server speaking out of turn is not spoken to again
            return
        ex.last_read = time.perf_counter()  # the read's own time, for every event in it
        try:
            self.parser.feed_data(data)
        except HttpError as e:
            if not ex.done.done():
                ex.done.set_exception(_Broken(f"bad HTTP from the server: {e}"))
            self.abort()

    def eof_received(self) -> bool:
        self.closed = True  # now, not when connection_lost runs an iteration later: never reused
        return False  # close our side too

    def connection_lost(self, exc: BaseException | None) -> None:
        self.closed = True
        ex = self.ex
        if ex is not None and not ex.done.done():
            ex.done.set_exception(_Lost(ex.status is not None, exc))

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class _Broken(Exception):
    pass


class _Lost(Exception):
    def __init__(self, after_headers: bool, exc: BaseException | None) -> None:
        super().__init__(exc)
        self.after_headers = after_headers
        self.exc = exc


class FastStream(OpenAIStream):
    """Streaming /v1/completions or /v1/chat/completions over pooled plain sockets (http only)."""

    def __init__(self, base_url: str, model: str, pin: Pin | None = None, pure_http: bool = False, **kw) -> None:
        super().__init__(None, base_url, model, **kw)  # type: ignore[arg-type]
        self.pure_http = pure_http
        u = urlsplit(self.base)
        if u.scheme != "http":
            raise ValueError("FastStream speaks plain http; use OpenAIStream for https")
        self.port = u.port or 80
        host = u.hostname or "127.0.0.1"
        self.address = pin.addresses[0] if pin else host  # connect to what the loopback rule checked
        self.host_header = u.netloc.rsplit("@", 1)[-1]
        self.prefix = u.path.rstrip("/")
        self.idle: deque[_Conn] = deque()
        self.all: set[_Conn] = set()
        auth = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        self._head = (
            f"Host: {self.host_header}\r\nContent-Type: application/json\r\n{auth}Connection: keep-alive\r\n"
        ).encode()

    def encode(self, spec: RequestSpec) -> tuple[str, bytes]:
        """The whole request as bytes, written in one call when the request starts."""
        url, body = super().encode(spec)
        path = urlsplit(url).path
        head = b"POST %s HTTP/1.1\r\n%s%s: %s\r\nContent-Length: %d\r\n\r\n" % (
            path.encode(),
            self._head,
            ID_HEADER.encode(),
            spec.id.encode(),
            len(body),
        )
        return url, head + body

    async def _connection(self) -> _Conn:
        now = time.monotonic()
        while self.idle:
            c = self.idle.pop()  # the most recently used: warm, and furthest from the server's keep-alive
            if now - c.idle_since < KEEPALIVE_S and c.reusable():
                return c
            c.abort()
            self.all.discard(c)
        loop = asyncio.get_running_loop()
        _, c = await loop.create_connection(lambda: _Conn(self.pure_http), self.address, self.port)
        self.all.add(c)
        return c

    def _release(self, c: _Conn) -> None:
        c.ex, c.parser = None, None
        if c.closed:
            self.all.discard(c)
            return
        c.idle_since = time.monotonic()
        self.idle.append(c)

    async def aclose(self) -> None:
        for c in list(self.all):
            c.abort()
        self.all.clear()
        self.idle.clear()

    async def send(self, spec: RequestSpec, rec: RequestRecord, t0: float) -> list[int] | None:
        perf = time.perf_counter
        sse = StreamParser(want_token_ids=spec.want_token_ids, want_counts=self.token_counts)
        rec.chunk_times, rec.chunk_tokens = sse.token_times, sse.token_counts
        rec.sent = perf() - t0  # replaced when the bytes are written; kept if they never are
        conn: _Conn | None = None
        loop = asyncio.get_running_loop()
        ex: _Exchange | None = None
        timer = None
        try:
            prepared = self.prepared.pop(spec.id, None)
            _, payload = prepared or self.encode(spec)
            try:
                conn = await self._connection()
            except OSError as e:
                rec.error = f"ClientConnectorError: Cannot connect to host {self.host_header} ssl:default [{e}]"
                self._finish(rec, sse, spec)
                return None
            done = loop.create_future()
            sent = perf()
            rec.sent = sent - t0  # the request starts when its bytes are written, not before
            ex = _Exchange(sse, sent, done)
            timer = loop.call_later(self.read_timeout, self._check_time, ex, done)
            conn.start(ex, payload)
            await done
            if ex.status != 200:
                rec.status = ex.status
                text = bytes(ex.error_body).decode(errors="replace")
                rec.error = f"HTTP {ex.status}: {' '.join(text.split())[:300]}"
                conn.abort()  # an unread body may follow: not reused
                return None
            rec.status = 200
            sse.close(perf() - sent)
            rec.done = perf() - sent
            if not ex.keep_alive:
                conn.abort()  # the server said "Connection: close": it closes this one
        except asyncio.CancelledError:
            rec.error = "cancelled"
            if conn is not None:
                conn.abort()
            self._finish(rec, sse, spec)
            raise
        except TimeoutError:
            rec.status = ex.status if ex else None
            rec.error = f"timeout: no data for {self.read_timeout:g} s or over {self.request_timeout:g} s in all"
            if conn is not None:
                conn.abort()
        except _Lost as e:
            rec.status = ex.status if ex else None
            if e.after_headers:
                rec.error = "stream cut: Response payload is not completed"
            else:
                rec.error = "ServerDisconnectedError: Server disconnected"
        except _Broken as e:
            rec.status = ex.status if ex else None
            rec.error = f"ClientResponseError: {e}"
        except (OSError, ValueError) as e:
            rec.error = f"{type(e).__name__}: {e}"
            if conn is not None:
                conn.abort()
        finally:
            if timer is not None:
                timer.cancel()
            if conn is not None:
                self._release(conn)
        self._finish(rec, sse, spec)
        return sse.token_ids

    def _check_time(self, ex: _Exchange, done: asyncio.Future) -> None:
        """Every read_timeout: no data for that long, or the whole request over request_timeout."""
        if done.done():
            return
        now = time.perf_counter()
        if now - ex.last_read >= self.read_timeout or now - ex.sent >= self.request_timeout:
            done.set_exception(TimeoutError())
            return
        wait = min(ex.last_read + self.read_timeout, ex.sent + self.request_timeout) - now
        asyncio.get_running_loop().call_later(max(wait, 0.001), self._check_time, ex, done)


TRANSPORTS = ("fast", "aiohttp")


def make_transport(kind: str, session, base_url: str, model: str, pin: Pin | None = None, **kw) -> OpenAIStream:
    """The fast transport for plain http (the default), aiohttp for https or when asked for."""
    if kind == "fast" and urlsplit(base_url).scheme == "http":
        return FastStream(base_url, model, pin=pin, **kw)
    return OpenAIStream(session, base_url, model, **kw)


async def close_transport(t: OpenAIStream) -> None:
    if isinstance(t, FastStream):
        await t.aclose()
