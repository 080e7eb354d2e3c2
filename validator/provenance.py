"""Provenance: what produced a report (report.json's `meta`): kvgate, vLLM, Python, machine,
device, date, the command line (secrets redacted) and a hash of the profile as saved."""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time

from loadgen import __version__
from validator.redact import redact, secret_name


def redact_argv(argv: list[str]) -> list[str]:
    """The command line as it may be shown: the value of any secret-looking flag and the user
    and password of a URL are replaced."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        flag, eq, value = a.partition("=")
        if flag.startswith("--") and secret_name(flag) and not flag.endswith("-env"):
            if eq:
                out.append(f"{flag}=<redacted>")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(redact(a))
    return out


def cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def device_name(startup: dict | None, platform_kind: str) -> str | None:
    """The GPU nvidia-smi named (with how many the plan used), else the CPU."""
    gpus = ((startup or {}).get("device") or {}).get("gpus") or []
    if gpus:
        return f"{len(gpus)} x {gpus[0].get('name')}"
    return cpu_name() if platform_kind == "cpu" else None


def meta(
    *, argv: list[str], profile_saved: dict, startup: dict | None, vllm_version: str | None, platform_kind: str
) -> dict:
    blob = json.dumps(profile_saved, sort_keys=True, default=str).encode()
    return {
        "kvgate_version": __version__,
        "vllm_version": vllm_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device_name(startup, platform_kind),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": ["validate", *redact_argv(argv)],
        "profile_sha256": hashlib.sha256(blob).hexdigest(),
        "executable": sys.executable,
    }
