"""Byte sizes: parse "22GiB" / "80GB" / 1024, and format for people."""

from __future__ import annotations

import re

from validator.errors import InputError

KiB = 1024
MiB = 1024**2
GiB = 1024**3

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: object, field: str) -> int:
    """An integer byte count from an int or a string like ``22GiB``; rounds down."""
    if isinstance(value, bool):
        raise InputError(f"{field}: expected a size like 22GiB or an integer byte count, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        n = int(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise InputError(
                f"{field}: cannot read size {value!r}; write an integer byte count or e.g. 22GiB, 80GB, 512MiB"
            )
        n = int(float(m.group(1)) * _UNITS[unit])
    else:
        raise InputError(f"{field}: expected a size like 22GiB or an integer byte count, got {value!r}")
    if n < 0:
        raise InputError(f"{field}: size must not be negative, got {value!r}")
    return n


def human(n: int | float | None) -> str:
    """Shortest exact-looking binary unit for a byte count (128 KiB, 2.25 MiB)."""
    if n is None:
        return "n/a"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.{0 if v == int(v) else 3}f} {unit}".replace(".000 ", " ")
    return f"{int(n)} B"


def cdiv(a: int, b: int) -> int:
    """Ceiling division of integers (blocks for tokens, shares for ranks)."""
    return -(-a // b)
