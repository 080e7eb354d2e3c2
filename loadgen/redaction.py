"""URL user and password never shown (pure: imported by loadgen.net and validator.redact)."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s:]*(?::[^/@\s]*)?@")


def redact_url(text: str) -> str:
    """URL user and password, wherever they appear in the text, replaced."""
    return _USERINFO.sub(r"\1<redacted>@", text)
