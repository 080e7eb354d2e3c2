"""What the server holds in memory now, for the samples of a run (the seeds: "watch queueing delay
and peak memory"): on a GPU, the memory used on the devices the server was given (NVML, when the
pynvml module of the official vLLM install is importable); on the CPU, the resident memory of the
API server and its engine processes. Read in-process: nothing is started."""

from __future__ import annotations

import os
from collections.abc import Callable

import psutil


def rss_of(procs: Callable[[], list[psutil.Process]]) -> Callable[[], float | None]:
    """A probe: the summed RSS of the processes (None when none can be read)."""

    def probe() -> float | None:
        total, seen = 0, 0
        for p in procs():
            try:
                total += p.memory_info().rss
                seen += 1
            except psutil.Error:
                continue
        return float(total) if seen else None

    return probe


def nvml_used() -> Callable[[], float | None] | None:
    """A probe of the memory used on the visible GPUs; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
    except Exception:  # no module, no driver, no device: not measured
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        index = [int(x) for x in visible.split(",") if x.strip()] if visible else list(range(n))
    except ValueError:  # UUIDs: every device
        index = list(range(n))
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in index if i < n]

    def probe() -> float | None:
        try:
            return float(sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles))
        except Exception:
            return None

    return probe
