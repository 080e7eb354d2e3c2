"""One rule for secrets, wherever a value is printed or saved: URL user and password, the value of
any environment variable whose name looks secret, and every secret kvgate was given (the API key)
replaced by `<redacted>`. And `brief()`: a value as an error message may show it, bounded in size
and depth whatever the value (a YAML alias bomb expands to gigabytes when printed whole)."""

from __future__ import annotations

import re
import reprlib

from loadgen.redaction import redact_url

SECRET_NAMES = re.compile(r"KEY|TOKEN|SECRET|PASS|AUTH|CREDENTIAL|PRIVATE|SESSION|COOKIE|SIGNATURE", re.I)
HIDDEN = "<redacted>"
_KNOWN: set[str] = set()


def register(secret: str | None) -> None:
    """A value that must never be shown (a key read from the environment)."""
    if secret and len(secret) >= 4:
        _KNOWN.add(secret)


def secret_name(name: str) -> bool:
    return bool(SECRET_NAMES.search(name))


def redact(text: str) -> str:
    out = redact_url(text)
    for s in _KNOWN:
        if s in out:
            out = out.replace(s, HIDDEN)
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (HIDDEN if secret_name(k) else v) for k, v in env.items()}


_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxdict, _BRIEF.maxlist, _BRIEF.maxstring, _BRIEF.maxother = 2, 4, 4, 40, 40
_BRIEF.maxlong = 40


def brief(value: object) -> str:
    """repr() bounded: at most 2 levels, 4 items a level, 40 characters a string or number."""
    try:
        return redact(_BRIEF.repr(value))[:120]
    except (RecursionError, ValueError):
        return f"<{type(value).__name__}>"
