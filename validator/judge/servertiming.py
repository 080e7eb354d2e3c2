"""Client against server, request by request (pure): vLLM's own timing of each request
(--enable-per-request-metrics: queued -> scheduled -> first token, on the engine's clock) lies
inside the client's TTFT, so client TTFT - (queue time + server TTFT) is what the API server and the
transport add: never negative, and small. A client whose clock runs late or early fails it, on the
CPU too, where the server's histogram buckets are too coarse to judge the percentiles."""

from __future__ import annotations

import numpy as np

from validator.judge.check import Check
from validator.rundir.rundata import RunData

CLOCK_MS = 1.0  # two clocks of 1 ms resolution or better: a share below -1 ms is a wrong clock


def shares_ms(run: RunData) -> list[float]:
    """Each successful request's client TTFT less the engine's queue time and TTFT, in ms."""
    return [
        1e3 * r.chunk_times[0] - (r.server_queue_ms + r.server_ttft_ms)
        for r in run.records
        if r.ok and r.chunk_times and r.server_queue_ms is not None and r.server_ttft_ms is not None
    ]


def server_timing_check(run: RunData, median_ms: float) -> Check:
    name = f"{run.name}.ttft_client_vs_server_each"
    ok = [r for r in run.records if r.ok]
    got = shares_ms(run)
    if not got:
        started_here = run.server_started is not False
        return Check(
            name=name,
            expected=f"0 <= share, median <= {median_ms:g} ms",
            observed=None,
            passed=None,
            tolerance="ms",
            judged=started_here,
            explanation="no response carried vLLM's per-request metrics"
            + (
                " (kvgate starts vLLM with --enable-per-request-metrics: they were expected)"
                if started_here
                else "; start the server at --url with --enable-per-request-metrics to judge this"
            ),
        )
    a = np.asarray(got)
    low, mid, high = float(a.min()), float(np.median(a)), float(a.max())
    passed = low >= -CLOCK_MS and mid <= median_ms and len(got) == len(ok)
    return Check(
        name=name,
        expected=f"0 <= share, median <= {median_ms:g} ms",
        observed=f"{low:.1f} / {mid:.1f} / {high:.1f} ms",
        passed=passed,
        tolerance="ms",
        explanation=f"client TTFT - (server queue + server TTFT), min / median / max over {len(got)} requests"
        + (f"; {len(ok) - len(got)} responses without the metrics" if len(got) != len(ok) else "")
        + ("; negative: the client's clock or records are wrong" if low < -CLOCK_MS else ""),
    )
