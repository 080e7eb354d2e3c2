"""HTTP/1.1 response framing for the fast transport: httptools (the C parser under uvicorn) when it
is installed, else a small parser of our own with the same callbacks (on_headers_complete, on_body,
on_message_complete) and methods (feed_data, get_status_code, should_keep_alive)."""

from __future__ import annotations

try:  # only where it pays: chunked decoding in C, a callback per chunk
    import httptools

    HttpError: type[Exception] = httptools.HttpParserError
except ImportError:  # pragma: no cover - exercised by tests through PyResponseParser directly
    httptools = None  # type: ignore[assignment]

    class HttpError(ValueError):  # type: ignore[no-redef]
        pass


LINE_MAX = 4096  # a chunk-size or trailer line longer than this is not HTTP/1.1 from vLLM


class PyResponseParser:
    """Status line, headers, then a chunked, sized or until-close body."""

    def __init__(self, cb) -> None:
        self.cb = cb
        self.buf = b""
        self.state = "head"
        self.status: int | None = None
        self.left = 0  # bytes of the current chunk (or the sized body) still to come
        self.keep_alive = True

    def get_status_code(self) -> int:
        if self.status is None:
            raise HttpError("no status yet")
        return self.status

    def should_keep_alive(self) -> bool:
        """HTTP/1.1 without "Connection: close", and a body whose end is framed (not read to close)."""
        return self.keep_alive

    def feed_data(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        self.buf = b""
        while buf:
            st = self.state
            if st == "head":
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > 65536:
                        raise HttpError("response headers over 64 KiB")
                    self.buf = buf
                    return
                self._head(buf[:end].decode("latin-1"))
                buf = buf[end + 4 :]
            elif st == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > LINE_MAX:  # a size line that never ends: memory stays bounded
                        raise HttpError("chunk size line over 4 KiB")
                    self.buf = buf
                    return
                try:
                    n = int(buf[:end].split(b";", 1)[0], 16)
                except ValueError:
                    raise HttpError(f"bad chunk size {buf[:end][:20]!r}") from None
                buf = buf[end + 2 :]
                self.left, self.state = n, ("data" if n else "trailer")
            elif st in ("data", "sized"):
                take = buf[: self.left]
                self.left -= len(take)
                buf = buf[len(take) :]
                self.cb.on_body(take)
                if self.left == 0:
                    if st == "sized":
                        self.state = "done"
                        self.cb.on_message_complete()
                    else:
                        self.state = "crlf"
            elif st == "crlf":
                if len(buf) < 2:
                    self.buf = buf
                    return
                if buf[:2] != b"\r\n":
                    raise HttpError("chunk not followed by CRLF")
                buf, self.state = buf[2:], "size"
            elif st == "trailer":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > LINE_MAX:
                        raise HttpError("trailer line over 4 KiB")
                    self.buf = buf
                    return
                line, buf = buf[:end], buf[end + 2 :]
                if not line:  # the empty line after the last chunk (and any trailers)
                    self.state = "done"
                    self.cb.on_message_complete()
            elif st == "close":
                self.cb.on_body(buf)
                return
            else:  # done: bytes after the message, unasked
                raise HttpError("data after the end of the response")

    def _head(self, head: str) -> None:
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise HttpError(f"not an HTTP/1.x status line: {lines[0][:40]!r}")
        try:
            self.status = int(parts[1])
        except ValueError:
            raise HttpError(f"bad status {parts[1][:10]!r}") from None
        headers = {}
        for h in lines[1:]:
            k, sep, v = h.partition(":")
            if sep:
                headers[k.strip().lower()] = v.strip()
        framed = "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers
        close = "close" in (t.strip().lower() for t in headers.get("connection", "").split(","))
        self.keep_alive = parts[0] == "HTTP/1.1" and framed and not close
        self.cb.on_headers_complete()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = "size"
        elif "content-length" in headers:
            try:
                self.left = int(headers["content-length"])
            except ValueError:
                raise HttpError("bad Content-Length") from None
            self.state = "sized"
            if self.left == 0:
                self.state = "done"
                self.cb.on_message_complete()
        else:
            self.state = "close"


def response_parser(cb, pure: bool = False):
    if httptools is not None and not pure:
        return httptools.HttpResponseParser(cb)
    return PyResponseParser(cb)
