"""A pure parser for OpenAI-style streaming responses (Server-Sent Events).

``feed(data, t)`` takes bytes as they arrive with their arrival time and keeps
what a load test needs: one timestamp per token-carrying event (an event whose
``choices`` is non-empty, even when its text is empty: the same rule as
``vllm bench serve``), the usage chunk, the finish reason, an error, ``[DONE]``.

Fast path: vLLM sends one small JSON object per event; most carry nothing but a
token, so complete events are counted with ``bytes.count`` and only events that
may carry more (usage, a finish reason, an error, token ids) are decoded.
Anything unusual falls back to decoding every event, so the fast path changes
speed, never results.
"""

from __future__ import annotations

import json
from array import array
from itertools import repeat

# one event's bytes at most (vLLM's largest: a first event with a long prompt's token ids, about 7 MB
# for a million tokens)
EVENT_MAX = 64 << 20
_TOKEN_MARKS = (b'"choices":[{', b'"choices": [{')
_EMPTY_TEXT = (b'"text":""', b'"text": ""', b'"content":""', b'"content": ""')
# events that need decoding: usage, finish reason, [DONE], errors
_SLOW_MARKS = (b'"finish_reason":"', b'"finish_reason": "', b'"usage":{', b'"usage": {', b"[DONE]", b"error")


class StreamParser:
    __slots__ = (
        "_buf",
        "token_times",
        "usage",
        "finish_reason",
        "error",
        "done",
        "token_ids",
        "want_token_ids",
        "text_events",
        "bad_events",
        "want_counts",
        "token_counts",
        "server_metrics",
    )

    def __init__(self, want_token_ids: bool = False, want_counts: bool = False) -> None:
        self._buf = b""
        self.token_times = array("d")  # arrival time of each token-carrying event (8 bytes each)
        self.usage: dict | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False
        self.want_token_ids = want_token_ids
        self.token_ids: list[int] | None = [] if want_token_ids else None
        self.text_events = 0  # token events with non-empty text
        self.bad_events = 0  # events that were not valid JSON
        self.want_counts = want_counts
        self.token_counts: list[int | None] = []  # completion tokens so far, at each token event (want_counts)
        self.server_metrics: dict | None = None  # the final chunk's `metrics` (vLLM --enable-per-request-metrics)

    def feed(self, data: bytes, t: float) -> None:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        end = buf.rfind(b"\n\n")
        if end < 0:
            if len(buf) > EVENT_MAX:  # an event that never ends: recorded, and memory stays bounded
                self.error = self.error or f"an SSE event over {EVENT_MAX >> 20} MiB without an end"
                buf = b""
            self._buf = buf
            return
        block = buf[:end]
        self._buf = buf[end + 2 :]
        if self.want_token_ids or self.want_counts:
            self._slow(block, t)
            return
        # the common case, vLLM's compact form: one-line token events with a null finish reason,
        # counted with a few C-speed scans; the stream's end (last token, usage, [DONE]) is
        # split off and decoded
        if self._all_tokens(block, t):
            return
        last = block.rfind(b'"finish_reason":null')
        if last >= 0:
            nl = block.find(b"\n\n", last)
            if nl >= 0 and self._all_tokens(block[:nl], t):
                self._slow(block[nl + 2 :], t)
                return
        # events before the first one that may carry more than a token are counted; the rest decoded
        cut = min((i for i in (block.find(m) for m in _SLOW_MARKS) if i >= 0), default=-1)
        if cut < 0:
            head, tail = block, b""
        else:
            start = block.rfind(b"\n\n", 0, cut)
            head, tail = (block[:start], block[start + 2 :]) if start >= 0 else (b"", block)
        if head and not self._count(head, t):
            self._slow(head, t)
        if tail:
            self._slow(tail, t)

    def _all_tokens(self, block: bytes, t: float) -> bool:
        """True (and counted) if every event is a one-line token event with a null finish reason.

        Five scans of the block (each at C speed): the events, as `data: {...}` lines separated by a
        blank line (the separator `}\n\ndata: {` counted once, the ends checked, no other newline);
        one choice and one null finish reason in each; and the empty texts, of the one kind the
        stream carries (completions' `text` or chat's `content`)."""
        k = block.count(b"}\n\ndata: {") + 1
        if (
            block.startswith(b"data: {")
            and block.endswith(b"}")
            and block.count(b"\n") == 2 * (k - 1)
            and block.count(b'"choices":[{') == k
            and block.count(b'"finish_reason":null') == k
        ):
            self.token_times.extend(repeat(t, k))
            empty = b'"text":""' if b'"text":' in block[:400] else b'"content":""'
            self.text_events += k - block.count(empty)
            return True
        return False

    def _count(self, block: bytes, t: float) -> bool:
        """Count token events in a block of plain one-line `data: {...}` events; False if not plain."""
        n_events = block.count(b"\n\n") + 1
        if (
            block.count(b"\n") != 2 * (n_events - 1)
            or block.count(b"\n\ndata: {") + block.startswith(b"data: {") != n_events
            or block.count(b"}\n\n") + block.endswith(b"}") != n_events
        ):
            return False  # named, multi-line, comment or truncated events: decode them
        n = block.count(_TOKEN_MARKS[0]) + block.count(_TOKEN_MARKS[1])
        if n:
            self.token_times.extend(repeat(t, n))
            self.text_events += n - sum(block.count(e) for e in _EMPTY_TEXT)
        return True

    def _slow(self, block: bytes, t: float) -> None:
        for event in block.split(b"\n\n"):
            self._event(event, t)

    def close(self, t: float) -> None:
        """The stream ended: decode a last event that had no blank line after it."""
        if self._buf.strip():
            buf, self._buf = self._buf, b""
            self._event(buf, t)

    def _event(self, event: bytes, t: float) -> None:
        data_lines = []
        name = None
        for line in event.split(b"\n"):
            if not line or line.startswith(b":"):
                continue  # comment / keep-alive
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                data_lines.append(value)
            elif field == b"event":
                name = value.decode(errors="replace")
        if not data_lines:
            return
        payload = b"\n".join(data_lines).strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.bad_events += 1
            self.error = self.error or f"malformed SSE data: {payload[:120]!r}"
            return
        if not isinstance(obj, dict):
            self.bad_events += 1
            self.error = self.error or f"unexpected SSE data: {payload[:120]!r}"
            return
        if name == "error" or "error" in obj or obj.get("object") == "error":
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            self.error = f"server error event: {msg}"
            return
        choices = obj.get("choices")
        if choices:
            self.token_times.append(t)
            c = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}
            text = c.get("text")
            if text is None and isinstance(c.get("delta"), dict):
                text = c["delta"].get("content")
            if text:
                self.text_events += 1
            if c.get("finish_reason") is not None:
                self.finish_reason = c["finish_reason"]
            if self.token_ids is not None and isinstance(c.get("token_ids"), list):
                self.token_ids.extend(c["token_ids"])
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            metrics = obj.get("metrics")  # rides on the usage chunk
            if isinstance(metrics, dict):
                self.server_metrics = metrics
        if choices and self.want_counts:
            # one entry per token event, so token_counts[i] belongs to token_times[i]; None: not said
            n = usage.get("completion_tokens") if isinstance(usage, dict) else None
            self.token_counts.append(n if isinstance(n, int) else None)
