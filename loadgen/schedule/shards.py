"""One schedule over several event loops: shard i of k sends items i, i+k, ... of the one workload
(open loop: at their times in the one arrival schedule), with its share of the concurrency and of
the warm-up, so together the shards send exactly what one process would."""

from __future__ import annotations


def share(total: int, i: int, k: int) -> int:
    """Worker i's part of `total` (the first total % k workers take one more)."""
    return total // k + (1 if i < total % k else 0)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        i, k = -1, 0
    if not 0 <= i < k:
        raise ValueError(f"--worker-shard: {text!r}; write I/N with 0 <= I < N")
    return i, k


def shard_config(cfg, i: int, k: int) -> None:
    """Worker i of k: its part of the schedule, the concurrency and the warm-up."""
    cfg.shard = (i, k)
    if cfg.concurrency is not None:
        cfg.concurrency = share(cfg.concurrency, i, k)
    else:
        cfg.max_in_flight = max(share(cfg.max_in_flight, i, k), 1)
    cfg.warmup = len(range(i, cfg.warmup, k))
