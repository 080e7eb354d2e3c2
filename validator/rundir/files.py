"""The run directory itself: where it is, its name, the profile as saved (secrets
redacted), and atomic JSON writes."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from validator.errors import InputError


def safe_name(name: str) -> str:
    """A profile name as one path component: letters, digits, '.', '_' and '-' only, no leading dot."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "profile"
    return clean[:80]


def run_dir_for(out: str | None, profile_name: str) -> Path:
    """--out, which must be new or empty (a run never mixes with another's records), else a fresh
    directory under runs/ named after the profile."""
    if out:
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"--out: {out} exists and is not an empty directory; give a new one "
                             "(kvgate never mixes two runs' records)")
        return out
    base = Path("runs") / f"{safe_name(profile_name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


SECRET_KEYS = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


def redacted(values: dict) -> dict:
    """The profile as saved in the run directory: secret-looking environment values replaced."""
    out = {s: dict(f) for s, f in values.items()}
    env = out.get("vllm", {}).get("env") or {}
    out["vllm"]["env"] = {k: ("<redacted>" if SECRET_KEYS.search(k) else v) for k, v in env.items()}
    return out


def write_text(path: Path, text: str) -> None:
    """Whole or not at all: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str))
