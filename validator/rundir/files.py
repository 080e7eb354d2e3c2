"""The run directory itself: where it is, its name, the profile as saved (secrets
redacted), and atomic JSON writes."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from loadgen.safefile import write_atomic
from validator.errors import InputError
from validator.plan.record import PlanRecord
from validator.redact import redact, redact_env
from validator.rundir.schedule import Schedule


def safe_name(name: str) -> str:
    """A profile name as one path component: letters, digits, '.', '_' and '-' only, no leading dot."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "profile"
    return clean[:80]


def run_dir_for(out: str | None, profile_name: str) -> Path:
    """--out, which must be new or empty (a run never mixes with another's records), else a fresh
    directory under runs/ named after the profile."""
    if out:
        given = Path(out)
        if given.is_symlink() and not given.exists():
            raise InputError(f"--out: {given} is a symlink to nothing; give a new directory")
        if given.exists() and (not given.is_dir() or any(given.iterdir())):
            raise InputError(
                f"--out: {given} exists and is not an empty directory; give a new one "
                "(kvgate never mixes two runs' records)"
            )
        return given
    base = Path("runs") / f"{safe_name(profile_name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    fresh, n = base, 1
    while fresh.exists():
        n += 1
        fresh = base.with_name(f"{base.name}-{n}")
    return fresh


def redacted(values: dict) -> dict:
    """The profile as saved in the run directory: secret-looking environment values replaced."""
    out = {s: dict(f) for s, f in values.items()}
    out["vllm"]["env"] = redact_env(out.get("vllm", {}).get("env") or {})
    return out


def write_text(path: Path, text: str) -> None:
    """Whole or not at all, never through a symlink (loadgen.safefile), 0600, secrets redacted."""
    write_atomic(path, redact(text))


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, default=str))


def keep_original_report(d: Path) -> dict | None:
    """Before a run directory is judged again: its live report moved to report.original.json (once:
    the first report written in a directory stays the original), and that report read back."""
    from validator.rundir.rundata import read_json

    old, original = d / "report.json", d / "report.original.json"
    if old.is_file() and not old.is_symlink() and not original.exists() and not original.is_symlink():
        os.replace(old, original)
    return read_json(original, [], {}, original.name)


def write_plan(run_dir: Path, record: PlanRecord, schedule: Schedule) -> None:
    """plan.json, before the first run: the plan's record and what the session will do."""
    write_json(run_dir / "plan.json", {**record.to_json(), "schedule": schedule.to_json()})
