"""Freeze-frames: hold vLLM still mid-run and read its KV state exactly.

With ``VLLM_SERVER_DEV_MODE=1`` vLLM serves ``POST /pause?mode=keep``: in-flight requests
keep their KV blocks and stop stepping until ``POST /resume``. While the engine is held,
the client has every token the engine produced (vLLM flushes its outputs before the pause
answers), so the blocks in use can be computed from what the client received and compared
with ``kv_cache_usage_perc`` x usable blocks with tolerance 0 (docs/kv-accounting.md).

A ``Freezer`` watches the runner's live requests; when the set in flight matches a planned
point (for example: max_num_seqs requests all decoding, each with at least k tokens), it
holds the runner (no new request is sent), pauses the engine, scrapes /metrics until the
reading is settled, snapshots what the client has received, resumes, and appends one raw
record per freeze to ``runs/<run>/freezes.jsonl`` (validator.rundir.freezes). Judging happens
later, from that file.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp

from loadgen import net
from loadgen.safefile import open_append
from validator.observe.scrape import scrape_once
from validator.rundir.freezes import SETTLE_KEYS, FreezePoint, FreezeRecord
from validator.rundir.samples import Sample

FREEZE_BUDGET_S = 2.0  # a freeze holds the engine at most about this long, retries included
# readings a paused state gets even past the budget: a pause answered late (the engine finishing a
# long prefill step on a busy CPU: 2.4 s measured) must still be compared with a second reading
SETTLE_MIN_READS = 2


POLL_S = 0.002  # how often the live requests are looked at


INTAKE_RETRIES = 3  # re-freezes when the engine has not yet queued every request sent


INTAKE_STEP_S = 0.03  # how long the engine runs between two such attempts


def classify(live: dict) -> tuple[list, list]:
    """(decoding, pending) among live records: decoding have >= 1 token and fewer than asked;
    pending have none. Records that already have all their tokens are finished on the server."""
    decoding, pending = [], []
    for rec in list(live.values()):
        d = rec.delivered
        if d == 0:
            pending.append(rec)
        elif rec.asked_output_tokens is None or d < rec.asked_output_tokens:
            decoding.append(rec)
    return decoding, pending


def matches(
    point: FreezePoint, live: dict, now: float | None = None, relaxed: bool = False, sent: int | None = None
) -> bool:
    """The live set is the point's: `running` decoding with enough tokens and `waiting` without
    one; or all of them in flight for `patience_s` (clock: the records') with no token seen.
    Relaxed (a whole wave went by unmatched, as when the client was starved of CPU and saw the
    wave in one burst): any set with a request decoding, and one waiting if the point wants it."""
    decoding, pending = classify(live)
    if point.running == 0:  # any traffic: the client's view settles when nothing is in prefill
        return bool(decoding) and not pending and (sent is None or sent >= point.after_sent)
    enough_waiting = len(pending) >= point.waiting if point.waiting else not pending
    if len(decoding) == point.running and enough_waiting and all(r.delivered >= point.min_tokens for r in decoding):
        return True
    if relaxed and decoding and (len(pending) >= 1 if point.waiting else not pending):
        return True
    sent_at = [r.sent for r in pending if r.sent is not None]
    return (
        now is not None
        and not decoding
        and len(pending) >= point.running + point.waiting
        and len(sent_at) == len(pending)
        and now - max(sent_at) >= point.patience_s
    )


def client_view(live: dict, records: list) -> tuple[list[dict], int]:
    """What the client holds now: each live request's asked lengths and delivered tokens, and the
    tokens of the run's finished requests."""
    reqs = [
        {
            "id": r.id,
            "prompt_tokens": r.asked_prompt_tokens,
            "output_tokens": r.asked_output_tokens,
            "delivered": r.delivered,
            "exact_counts": not r.chunk_times or (bool(r.chunk_tokens) and r.chunk_tokens[-1] is not None),
        }
        for r in list(live.values())
    ]
    finished = sum(r.delivered for r in records)
    return reqs, finished


class Freezer:
    """Takes the planned freezes of one run, in order, while the runner runs."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        runner,
        run: str,
        points: list[FreezePoint],
        path: Path,
        before: Sample | None,
        say=None,
    ):
        self.session = session
        self.base = base_url.rstrip("/")
        self.runner = runner
        self.run_name = run
        self.points = points
        self.path = path
        self.before = before
        self.say = say or (lambda msg: None)
        self.taken: list[FreezeRecord] = []
        self.unavailable: str | None = None

    def _t(self) -> float:
        return time.perf_counter() - self.runner.t0

    async def run(self) -> None:
        """Wait for each point and freeze there; returns when all are taken or on cancellation."""
        for point in self.points:
            done_before = len(self.runner.records)
            while not (
                hasattr(self.runner, "t0")
                and matches(
                    point,
                    self.runner.live,
                    self._t(),
                    len(self.runner.records) - done_before >= point.running,
                    self.runner.issued,
                )
            ):
                await asyncio.sleep(POLL_S)
            rec = await self.freeze(point)
            self.taken.append(rec)
            self._write(rec)
            if self.unavailable:
                return

    async def freeze(self, point: FreezePoint) -> FreezeRecord:
        rec = FreezeRecord(run=self.run_name, name=point.name, point=point.to_json())
        self.runner.hold()
        paused = False
        deadline = time.monotonic() + FREEZE_BUDGET_S
        try:
            for attempt in range(INTAKE_RETRIES + 1):
                if attempt:  # let the engine take a step, so the requests it was sent are in its queue
                    await self._post("/resume")
                    paused = False
                    await asyncio.sleep(INTAKE_STEP_S)
                rec.t_pause = rec.t_pause if rec.t_pause is not None else self._t()
                paused = True  # from here on a resume is owed, even if the answer never comes
                status, text = await self._landed(self._post("/pause?mode=keep&clear_cache=false"))
                rec.t_paused = self._t()
                if status != 200:
                    paused = status is None  # a timeout may still have paused it
                    self.unavailable = rec.error = f"POST /pause: {status or text}"
                    return rec
                rec.readings, rec.settled, rec.error = [], False, None
                await self._settle(rec, deadline)
                if not rec.settled or self._intake_complete(rec) or time.monotonic() > deadline:
                    break
                rec.retries = attempt + 1
            if rec.settled and not self._intake_complete(rec):
                rec.settled = False
                rec.error = (
                    f"the server's waiting queue never showed every request the client had sent ({rec.retries} retries)"
                )
        finally:
            if paused:  # never leave the engine held: shielded, so a cancelled run still resumes it
                rec.t_resume = self._t()
                status, text = await asyncio.shield(self._post("/resume"))
                rec.t_resumed = self._t()
                if status != 200:
                    rec.error = f"POST /resume: {status or text}"
                    self.say(f"freeze {point.name}: resume failed ({rec.error})")
            self.runner.release()
        return rec

    @staticmethod
    async def _landed(coro):
        """Await a pause even through a cancellation: the resume sent afterwards must reach the
        server after it, or a pause stuck behind a busy API server would hold the engine for good."""
        task = asyncio.ensure_future(coro)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task}, timeout=15)
            raise

    @staticmethod
    def _intake_complete(rec: FreezeRecord) -> bool:
        """While the engine is held it publishes no new stats, so a request that reached it after its
        last step is in no gauge yet: the reading is complete only when the waiting gauge holds at
        least every request the client has in flight without a token."""
        sample = rec.reading
        w = sample.values.get("num_requests_waiting") if sample is not None else None
        pending = sum(1 for r in rec.requests if r["delivered"] == 0)
        return w is None or w >= pending

    async def _settle(self, rec: FreezeRecord, deadline: float) -> None:
        """Scrape until two readings agree, the client's view did not move between them, and the
        server's token counter equals what the client received."""
        prev = None
        reads = 0
        while True:
            sample = await self._scrape()
            reads += 1
            reqs, finished = client_view(self.runner.live, self.runner.records)
            if sample is not None:
                rec.readings.append(sample.to_json())
                rec.requests, rec.finished_tokens = reqs, finished
                key = (tuple(sample.values.get(k) for k in SETTLE_KEYS), tuple(r["delivered"] for r in reqs), finished)
                if key == prev and self._counts_agree(sample, reqs, finished):
                    rec.settled = True
                    return
                prev = key
            if time.monotonic() > deadline and reads >= SETTLE_MIN_READS:
                rec.error = rec.error or "the paused state did not settle"
                return
            await asyncio.sleep(0.01)

    def _counts_agree(self, sample: Sample, reqs: list[dict], finished: int) -> bool:
        """The server's generated-token counter has grown by exactly what the client received:
        no token is still on its way (skipped when the server does not export the counter)."""
        g0 = self.before.values.get("generation_tokens") if self.before else None
        g1 = sample.values.get("generation_tokens")
        if g0 is None or g1 is None:
            return True
        return g1 - g0 == finished + sum(r["delivered"] for r in reqs)

    async def _scrape(self) -> Sample | None:
        return (await scrape_once(self.session, self.base + "/metrics", False, 5.0))[0]

    async def _post(self, path: str) -> tuple[int | None, str]:
        return await net.post(self.session, self.base + path, 10.0)

    def _write(self, rec: FreezeRecord) -> None:
        with open_append(self.path) as f:
            f.write(json.dumps(rec.to_json(), separators=(",", ":")) + "\n")
