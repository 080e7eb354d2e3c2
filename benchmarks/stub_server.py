"""A loopback stub of vLLM's streaming /v1/completions, for two jobs real vLLM cannot do:
measuring the load generator's own overhead (tokens as fast as the client reads them, or
at a set pace) and injecting faults on demand.

Plain asyncio HTTP/1.1 with keep-alive and chunked SSE, events shaped exactly like
vLLM 0.32's. Run: python benchmarks/stub_server.py --port 0 [--ttft-ms 0 --itl-ms 0]
(prints "listening on PORT"). Faults: --fault 5xx|malformed|cut|slow-headers|more-tokens|
fewer-tokens|error-event|drop|close-after|close-header [--fault-every N: the requests whose id ends in
a number n with (n + 1) % N == 0, else every N-th to arrive] (drop: the request is read, then the
connection closed with no answer; close-after: the whole response, then the connection closed at
once, unannounced; close-header: the response says "Connection: close" and the connection is closed
50 ms later). Every request's X-Kvgate-Request-Id is kept in `seen`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time

FAULTS = (
    "none",
    "drop",
    "5xx",
    "malformed",
    "cut",
    "slow-headers",
    "more-tokens",
    "fewer-tokens",
    "error-event",
    "close-after",
    "close-header",
)


class Stub:
    def __init__(
        self, ttft_ms: float = 0.0, itl_ms: float = 0.0, fault: str = "none", fault_every: int = 1, batch: int = 64
    ):
        self.ttft = ttft_ms / 1e3
        self.itl = itl_ms / 1e3
        self.fault = fault
        self.fault_every = max(fault_every, 1)
        self.batch = batch  # events written per drain when not paced
        self.n = 0
        self.events_sent = 0
        self.prompt_total = 0
        self.generation_total = 0
        self.seen: list[str | None] = []  # the client's request ids, one entry per request received
        self.stamps = None  # a file: one line per paced request with each event's send time

    def metrics(self) -> bytes:
        """A few of vLLM's metrics, deliberately not all of them (kvgate must report the rest as missing)."""
        return (
            f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine="0"}} 0.0\n'
            f'# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine="0"}} {self.prompt_total}\n'
            f"# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {self.generation_total}\n'
        ).encode()

    def token_event(self, rid: str, model: str, finish: str | None, text: str = " tok") -> bytes:
        fr = "null" if finish is None else json.dumps(finish)
        return (
            f'data: {{"id":"{rid}","object":"text_completion","created":0,"model":"{model}",'
            f'"choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{fr},'
            f'"stop_reason":null,"prompt_token_ids":null,"token_ids":null}}]}}\n\n'
        ).encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        linger = None
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                got = time.perf_counter()  # the request's head is read: the stamp of its arrival
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if path == "/health":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    continue
                if method == "GET" and path in ("/metrics", "/v1/models"):
                    body_out = (
                        self.metrics()
                        if path == "/metrics"
                        else json.dumps(
                            {"object": "list", "data": [{"id": "stub", "object": "model", "max_model_len": 512}]}
                        ).encode()
                    )
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body_out), body_out))
                    continue
                if method != "POST" or not path.endswith("/completions"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                self.seen.append(headers.get("x-kvgate-request-id"))
                linger = await self.stream(json.loads(body), writer, headers.get("x-kvgate-request-id"), got)
                if writer.transport.is_closing():
                    return
                if linger:  # read nothing more; close a moment later
                    asyncio.get_running_loop().call_later(linger, writer.close)
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            if not linger:
                writer.close()

    async def stream(
        self, req: dict, writer: asyncio.StreamWriter, client_id: str | None = None, got: float | None = None
    ) -> float | None:
        """Write the response; the seconds after which the connection is to be closed, if it is."""
        got = got if got is not None else time.perf_counter()  # when the request arrived
        self.n += 1
        # the fault follows the request, not its arrival: with several in flight two requests may
        # arrive in either order, and a comparison of two clients must fault the same ones
        m = re.search(r"(\d+)$", client_id or "")
        key = int(m.group(1)) + 1 if m else self.n
        fault = self.fault if key % self.fault_every == 0 else "none"
        rid = f"cmpl-{self.n}"
        model = req.get("model", "stub")
        prompt = req.get("prompt", "")
        p_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        g = int(req.get("max_tokens", 16))
        if fault == "drop":  # read, then gone: the client cannot know whether it was acted on
            writer.transport.abort()
            return
        if fault == "5xx":
            msg = b'{"error":"stub: injected 503"}'
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)
            )
            return
        if fault == "slow-headers":
            await asyncio.sleep(3600)
        close = b"Connection: close\r\n" if fault == "close-header" else b""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%sTransfer-Encoding: chunked\r\n\r\n" % close
        )
        served = g + 2 if fault == "more-tokens" else (max(g - 2, 1) if fault == "fewer-tokens" else g)

        def chunk(data: bytes) -> None:
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        if self.ttft:
            await asyncio.sleep(self.ttft)
        pending: list[bytes] = []
        if fault == "none" and not self.itl:
            # the fast path for throughput runs: identical events, pre-built HTTP chunks
            ev = self.token_event(rid, model, None)
            full = b"".join([ev] * self.batch)
            full_chunk = b"%x\r\n%s\r\n" % (len(full), full)
            k, rest = divmod(served - 1, self.batch)
            for _ in range(k):
                writer.write(full_chunk)
                if writer.transport.get_write_buffer_size() > 1 << 20:
                    await writer.drain()
            self.events_sent += k * self.batch
            pending = [ev] * rest + [self.token_event(rid, model, "length")]
        else:
            # stamped (paced runs): each event's send time on the machine-wide monotonic clock, the
            # first event's text carries the stub's request id so any client's output can be paired
            sent_at = [] if self.stamps is not None and self.itl else None
            for i in range(served):
                if fault == "cut" and i == served // 2:
                    await writer.drain()
                    writer.transport.abort()  # the connection drops mid-stream
                    return
                if fault == "malformed" and i == 1:
                    pending.append(b'data: {"id": "broken", "choices": [{\n\n')
                    continue
                if fault == "error-event" and i == 1:
                    pending.append(b'data: {"error": {"message": "stub: injected error", "code": 500}}\n\n')
                    break
                pending.append(
                    self.token_event(
                        rid,
                        model,
                        "length" if i == served - 1 else None,
                        f" {rid}" if i == 0 and sent_at is not None else " tok",
                    )
                )
                if self.itl or len(pending) >= self.batch:
                    chunk(b"".join(pending))
                    self.events_sent += len(pending)
                    pending = []
                    await writer.drain()
                    if sent_at is not None:
                        sent_at.append(time.perf_counter())
                    if self.itl:
                        await asyncio.sleep(self.itl)
            if sent_at is not None:
                self.stamps.write(json.dumps({"tag": rid, "client_id": client_id, "got": got, "sent": sent_at}) + "\n")
        usage = {"prompt_tokens": p_tokens, "total_tokens": p_tokens + served, "completion_tokens": served}
        self.prompt_total += p_tokens
        self.generation_total += served
        pending.append(
            f'data: {{"id":"{rid}","object":"text_completion","created":0,"model":"{model}",'
            f'"choices":[],"usage":{json.dumps(usage, separators=(",", ":"))},'
            f'"system_fingerprint":"stub"}}\n\n'.encode()
        )
        pending.append(b"data: [DONE]\n\n")
        chunk(b"".join(pending))
        self.events_sent += len(pending)
        writer.write(b"0\r\n\r\n")
        if fault == "close-after":  # the response whole, then the FIN right behind it, unannounced
            writer.transport.close()
        return 0.05 if fault == "close-header" else None  # announced; closed a moment later


async def serve(stub: Stub, host: str = "127.0.0.1", port: int = 0, ready=None):
    server = await asyncio.start_server(stub.handle, host, port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    if ready:
        ready(port)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--uvloop", action="store_true", help="run on uvloop (the lag benchmark's lean stub)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--fault-every", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, default=3600.0, help="the stub stops by itself after this")
    ap.add_argument(
        "--stamp-log", help="paced runs: write each event's send time (perf_counter) here, a line a request"
    )
    a = ap.parse_args()
    if a.host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit("stub_server: binds loopback only")
    stub = Stub(a.ttft_ms, a.itl_ms, a.fault, a.fault_every)
    if a.stamp_log:
        stub.stamps = open(a.stamp_log, "w", buffering=1 << 16)

    async def run():
        task = asyncio.create_task(serve(stub, a.host, a.port, lambda p: print(f"listening on {p}", flush=True)))
        await asyncio.sleep(a.max_seconds)
        task.cancel()

    import signal

    def stop(*_):
        raise KeyboardInterrupt  # TERM ends the stub like Ctrl-C: the stamp log is closed whole

    signal.signal(signal.SIGTERM, stop)
    try:
        if a.uvloop:  # a leaner loop: less of the stub's own queueing in what it stamps
            import uvloop

            uvloop.run(run())
        else:
            asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        if stub.stamps:
            stub.stamps.close()


if __name__ == "__main__":
    main()
