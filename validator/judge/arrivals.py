"""What the block pool replay (prefixsim.py) takes and gives, and the order it takes requests in:
one request as the client saw it, one request's predicted hit, and the arrival order FCFS follows
where the client cannot tell which of two close sends reached the engine first."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimRequest:
    id: str
    prompt: list[int]  # token ids as the server computed them
    output: int  # tokens generated
    sent: float  # seconds from the run's start
    token_times: tuple[float, ...]  # when the client had token 1, 2, ..., output (same clock)
    observed: int | None = None  # usage.prompt_tokens_details.cached_tokens
    lead: float | None = None  # seconds from its lookup to its first token, by vLLM's clock (per-request TTFT)


@dataclass(frozen=True)
class Prediction:
    id: str
    hits: int  # predicted cached tokens
    upper: int  # >= hits: the hit the request could also have had if scheduled earlier
    prompt_tokens: int
    order: int  # its place in the arrival order the judge assumed
    # for a request a freeze caught: per kind of group ("full", "window"), its blocks past the hit whose
    # copy it cached first (predict.Lookup's), as the pool held them; None for the others
    first_copy: dict[str, frozenset[int]] | None = None

    @property
    def exact(self) -> bool:
        return self.hits == self.upper

    def admits(self, observed: int) -> bool:
        return self.hits <= observed <= self.upper and observed % 1 == 0


TIE_S = 0.05  # sends closer than this may reach the engine in either order (the API server's own jitter)


def arrival_order(reqs: list[SimRequest]) -> list[SimRequest]:
    """By send time. Requests sent within TIE_S of each other, each before the earlier ones had a
    first token, may have reached the engine in either order: within such a group the one with fewer
    observed hits goes first (a later send cannot overtake an earlier request by more than that)."""
    by_sent = sorted(reqs, key=lambda r: r.sent)
    out: list[SimRequest] = []
    group: list[SimRequest] = []
    horizon = float("-inf")

    def close() -> None:
        out.extend(sorted(group, key=lambda g: (g.observed if g.observed is not None else -1, g.sent)))
        group.clear()

    for r in by_sent:
        if group and (r.sent >= horizon or r.sent - group[-1].sent > TIE_S):
            close()
            horizon = float("-inf")
        group.append(r)
        horizon = max(horizon, r.token_times[0] if r.token_times else float("inf"))
    close()
    return out
