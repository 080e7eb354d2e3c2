"""Open-loop arrivals: when each request starts."""

from __future__ import annotations

import numpy as np


def arrival_times(n: int, rate: float, burstiness: float, ramp_up: float, seed: int) -> list[float]:
    """Open-loop start times: gamma inter-arrivals (shape = burstiness, mean 1/rate), rate ramping
    linearly from 0 over `ramp_up` seconds."""
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    out, t = [], 0.0
    for g in gaps:
        factor = 1.0 if ramp_up <= 0 else max(min(1.0, t / ramp_up), 0.05)
        t += g / factor
        out.append(t)
    return out
