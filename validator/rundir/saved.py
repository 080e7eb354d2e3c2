"""A run directory's session files read back for judging again (`validate --report DIR`): plan.json
(with the schedule), profile.json and startup.json. Bad or missing basics are one-line input errors;
what is missing beyond them is said, never a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from validator.errors import InputError
from validator.plan.record import PlanRecord
from validator.rundir.rundata import read_json
from validator.rundir.schedule import Schedule


@dataclass(kw_only=True)
class Saved:
    record: PlanRecord  # plan.json: the planner's record and the flags
    profile_name: str
    profile_values: dict  # profile.json's values, as saved (secrets redacted)
    startup: dict  # startup.json without its checks and error ({} when missing)
    startup_error: str | None  # what ended the live session early, as it recorded it
    startup_missing: str | None  # why startup.json cannot be used, when it cannot
    schedule: Schedule | None
    notes: list[str] = field(default_factory=list)


def schedule_of(record: dict) -> tuple[Schedule | None, str | None]:
    """The schedule in a plan record, or None and why."""
    raw = record.get("schedule")
    if raw is None:
        return None, (
            "plan.json has no schedule (written by a kvgate before schedules were saved): the runs are "
            "judged as found, and a missing run is not noticed"
        )
    try:
        return Schedule.from_json(raw), None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(
            f"--report: plan.json's schedule cannot be read ({type(e).__name__}: {str(e)[:120]})"
        ) from None


def read_saved(d: Path) -> Saved:
    if not d.is_dir():
        raise InputError(f"--report: {d} is not a directory; give a kvgate run directory")
    problems: list[str] = []
    missing: dict[str, str] = {}
    record = read_json(d / "plan.json", problems, missing, "plan.json")
    prof = read_json(d / "profile.json", problems, missing, "profile.json")
    if record is None or prof is None:
        why = "; ".join(problems + list(missing.values()))
        raise InputError(f"--report: {d} is not a kvgate run directory that can be judged ({why})")
    values = prof.get("values")
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        raise InputError(f"--report: {d}/profile.json has no profile values (a mapping of sections)")
    try:
        plan = PlanRecord.from_json(record)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"--report: {d}/plan.json is not a kvgate plan ({type(e).__name__}: {str(e)[:80]})") from None
    schedule, note = schedule_of(record)
    startup_problems: list[str] = []
    startup_missing: dict[str, str] = {}
    startup = read_json(d / "startup.json", startup_problems, startup_missing, "startup.json")
    error = None
    if startup is not None and isinstance(startup.get("error"), str):
        error = startup["error"]
    return Saved(
        record=plan,
        profile_name=str(prof.get("name") or "profile"),
        profile_values=values,
        startup={k: v for k, v in (startup or {}).items() if k not in ("checks", "error")},
        startup_error=error,
        startup_missing="; ".join(startup_problems + list(startup_missing.values())) or None,
        schedule=schedule,
        notes=[note] if note else [],
    )
