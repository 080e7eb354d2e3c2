"""How a figure reads, the same in every rendering: None as a dash (never a 0), counters (which
come as floats) as integers, other floats to 4 significant digits; `grouped` adds thousands
separators (the HTML report's tables)."""

from __future__ import annotations

from typing import Any


def fmt(v: Any, grouped: bool = False) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:  # a counter: 11520.0 reads 11520
        v = int(v)
    if isinstance(v, int):
        return f"{v:,}" if grouped else str(v)
    if isinstance(v, float):
        return f"{v:,.4g}" if grouped else f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt(x, grouped)}" for k, x in v.items())
    return str(v)


def slo_word(row: dict[str, Any]) -> str:
    """A sweep step against the SLOs: held, or missed (saying how many requests failed, if any)."""
    if row.get("within_slo"):
        return "held"
    return f"missed ({row['errors']} failed)" if row.get("errors") else "missed"
