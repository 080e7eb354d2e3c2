"""The sampler: scrapes /metrics every interval while a run is in flight and saves each sample."""

from __future__ import annotations

import asyncio
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from loadgen import net
from loadgen.safefile import open_append
from validator.rundir.samples import MEMORY, Sample, missing, parse_metrics, wanted_lines


async def scrape_once(session, url: str, with_histograms: bool, timeout: float) -> tuple[Sample | None, str | None]:
    """One /metrics scrape (loadgen.net.get): the sample, stamped with when it was sent and when it
    returned, or None and what went wrong."""
    t_sent = time.time()
    status, text = await net.get(session, url, timeout)
    if status != 200:
        return None, text if status is None else f"HTTP {status}"
    try:
        s = parse_metrics(wanted_lines(text, with_histograms), t=time.time(), with_histograms=with_histograms)
    except (ValueError, KeyError, IndexError) as e:
        return None, f"not Prometheus text: {type(e).__name__}"
    s.t_sent = t_sent
    return s, None


class Sampler:
    """Scrapes /metrics every `interval` seconds into memory and a JSONL file, until stopped.

    Light samples (gauges and counters) every interval; histograms only on
    `snapshot()` calls, which the caller makes at run boundaries.
    """

    def __init__(
        self,
        session,
        base_url: str,
        path: Path | None = None,
        interval: float = 0.25,
        timeout: float = 5.0,
        memory: Callable[[], float | None] | None = None,
    ):
        self.session = session
        self.memory = memory  # the server's memory now (validator.serve.memory), kept in each sample
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval = interval
        self.timeout = timeout
        self.samples: list[Sample] = []
        self.errors: list[dict] = []  # failed scrapes: {t, error}
        self._file = open_append(path) if path else None
        self._task: asyncio.Task | None = None
        self._warned: set[str] = set()

    async def scrape(self, with_histograms: bool = False) -> Sample | None:
        s, error = await scrape_once(self.session, self.url, with_histograms, self.timeout)
        if s is None:
            err = {"t": time.time(), "error": (error or "")[:300]}
            self.errors.append(err)
            if self._file:  # saved next to the samples: the judge counts the gaps
                self._file.write(json.dumps(err) + "\n")
                self._file.flush()
            return None
        if self.memory is not None:
            s.values[MEMORY] = self.memory()
        for m in missing(s):
            if m not in self._warned:
                self._warned.add(m)
                warnings.warn(f"/metrics has no {m}; it is reported as not measured", stacklevel=2)
        self.samples.append(s)
        if self._file:
            self._file.write(json.dumps(s.to_json(), separators=(",", ":")) + "\n")
            self._file.flush()
        return s

    async def snapshot(self) -> Sample | None:
        return await self.scrape(with_histograms=True)

    async def _loop(self) -> None:
        while True:
            t = time.monotonic()
            await self.scrape()
            await asyncio.sleep(max(self.interval - (time.monotonic() - t), 0.0))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._file:
            self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()
            self._file = None
