"""Loading a profile: the YAML file read (bounded: a regular file, at most 1 MiB), every field
checked against its rule (sections.py), defaults filled in, and the typed Profile built once."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from validator.cpulist import parse_cpus
from validator.errors import InputError
from validator.profile.dataset import DATASET_RULES
from validator.profile.judged import QualitySection, SloSection, SweepSection, TolerancesSection
from validator.profile.schema import SCHEMA, SECTIONS
from validator.profile.sections import (
    CacheSection,
    Field,
    HardwareSection,
    LimitsSection,
    ModelSection,
    ObserveSection,
    VllmSection,
    WorkloadSection,
)
from validator.redact import brief
from validator.units import parse_bytes


@dataclass(frozen=True)
class Profile:
    """A validated profile: one typed value per section, and ``values[section][field]`` (defaults
    filled in) as profile.json saves it."""

    values: dict[str, dict[str, Any]]
    source: Path | None = None
    model: ModelSection = field(init=False)
    hardware: HardwareSection = field(init=False)
    cache: CacheSection = field(init=False)
    limits: LimitsSection = field(init=False)
    workload: WorkloadSection = field(init=False)
    slo: SloSection = field(init=False)
    vllm: VllmSection = field(init=False)
    observe: ObserveSection = field(init=False)
    tolerances: TolerancesSection = field(init=False)
    sweep: SweepSection = field(init=False)
    quality: QualitySection = field(init=False)

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            object.__setattr__(self, name, cls(**self.values[name]))

    @property
    def name(self) -> str:
        return self.values[""]["name"] or (self.source.stem if self.source else "profile")


def _check(path: str, rule: Field, value: Any, base: Path | None) -> Any:
    if value is None:
        return None
    k = rule.kind
    if k == "bytes":
        return parse_bytes(value, path)
    if k == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{path}: expected a whole number, got {brief(value)}")
    elif k == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{path}: expected a number, got {brief(value)}")
        value = float(value)
    elif k == "bool":
        if not isinstance(value, bool):
            raise InputError(f"{path}: expected true or false, got {brief(value)}")
    elif k in ("str", "path", "choice"):
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise InputError(f"{path}: expected a non-empty string, got {brief(value)}")
        if k == "choice" and value not in rule.choices:
            raise InputError(f"{path}: {brief(value)} is not one of {', '.join(rule.choices)}")
        if k == "path" and base is not None and not os.path.isabs(value):
            value = str((base / value).resolve())
    elif k == "cpus":
        return parse_cpus(value, path)
    elif k == "dataset":
        return _dataset(path, value, base)
    elif k == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) and "\x00" not in v for v in value):
            raise InputError(f"{path}: expected a list of strings, e.g. [--enforce-eager], got {brief(value)}")
    elif k == "dict[str,str]":
        if not isinstance(value, dict):
            raise InputError(f"{path}: expected a mapping of NAME: value, got a {type(value).__name__}")
        for a, b in value.items():  # the values may be secrets: a bad one is named by its key only
            if not (isinstance(a, str) and a and "=" not in a and "\x00" not in a and len(a) <= 256):
                raise InputError(f"{path}: {brief(a)} is not an environment variable name")
            if not isinstance(b, (str, int, float)) or isinstance(b, bool) or isinstance(b, str) and "\x00" in b:
                raise InputError(f"{path}.{a}: expected a string or a number, got a {type(b).__name__}")
        return {a: str(b) for a, b in value.items()}
    if rule.minimum is not None and value < rule.minimum:
        raise InputError(f"{path}: must be at least {rule.minimum:g}, got {brief(value)}")
    if rule.maximum is not None and value > rule.maximum:
        raise InputError(f"{path}: must be at most {rule.maximum:g}, got {brief(value)}")
    return value


def _dataset(path: str, value: Any, base: Path | None) -> dict[str, Any]:
    """A nested section (workload.dataset): its fields checked by their own rules, defaults filled."""
    if not isinstance(value, dict):
        raise InputError(f"{path}: expected a mapping such as {{name: sharegpt, path: FILE}}, got {brief(value)}")
    for key in value:
        if not isinstance(key, str) or key not in DATASET_RULES:
            raise InputError(f"{path}.{_key(key)}: unknown field; known: {', '.join(DATASET_RULES)}")
    out = {}
    for key, rule in DATASET_RULES.items():
        v = value.get(key)
        out[key] = _check(f"{path}.{key}", rule, v if v is not None else rule.default, base if v is not None else None)
    if out["name"] is None:
        raise InputError(f"{path}.name: give the dataset's kind: sharegpt, custom, timed_trace or prefix_repetition")
    if out["name"] != "prefix_repetition" and not out["path"]:
        raise InputError(f"{path}.path: a {out['name']} dataset needs its file")
    return out


def _key(key: Any) -> str:
    """A key as an error names it: as written when it is a short printable string, else bounded."""
    return key if isinstance(key, str) and len(key) <= 60 and key.isprintable() else brief(key)


def from_dict(raw: Any, source: Path | None = None) -> Profile:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InputError("profile: the top level must be a mapping of sections (model, hardware, cache, ...)")
    base = source.parent if source else None
    values: dict[str, dict[str, Any]] = {}
    top = {k: v for k, v in raw.items() if k not in SCHEMA or k == ""}
    sections = {k: v for k, v in raw.items() if k in SCHEMA and k != ""}
    for key in top:
        if key not in SCHEMA[""]:
            known = ", ".join(sorted([k for k in SCHEMA if k] + list(SCHEMA[""])))
            raise InputError(f"profile: unknown key {_key(key)!r}; known keys: {known}")
    for section, rules in SCHEMA.items():
        given = top if section == "" else sections.get(section)
        if given is None:
            given = {}
        if not isinstance(given, dict):
            raise InputError(f"{section}: expected a mapping of fields, got {brief(given)}")
        out = {}
        for key in given:
            if not isinstance(key, str) or key not in rules:
                raise InputError(f"{section}.{_key(key)}: unknown field; known: {', '.join(rules)}")
        for key, rule in rules.items():
            path = f"{section}.{key}" if section else key
            v = given.get(key)
            out[key] = (
                _check(path, rule, v, base)
                if v is not None
                else (_check(path, rule, rule.default, None) if rule.default is not None else None)
            )
        values[section] = out
    return Profile(values, source)


MAX_PROFILE_BYTES = 1 << 20


def load(path: str | os.PathLike) -> Profile:
    p = Path(path)
    try:
        if not p.exists():
            raise InputError(f"--profile: no such file {p}")
        if not p.is_file():
            raise InputError(f"--profile: {p} is not a regular file; give a YAML file")
        if p.stat().st_size > MAX_PROFILE_BYTES:
            raise InputError(
                f"--profile: {p} is larger than {MAX_PROFILE_BYTES >> 10} KiB; a profile is a short YAML file"
            )
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--profile: cannot read {p}: {type(e).__name__}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise InputError(f"--profile: {p} is not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise InputError(f"--profile: {p} is nested too deeply to be a profile") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise InputError(f"--profile: {p}: {str(e)[:120]}") from None
    return from_dict(raw, p.resolve())


def override(profile: Profile, changes: dict[tuple[str, str], Any]) -> Profile:
    """A copy with CLI flags applied; each value is validated like the file's."""
    values = {s: dict(f) for s, f in profile.values.items()}
    for (section, key), v in changes.items():
        if v is None:
            continue
        values[section][key] = _check(f"{section}.{key}", SCHEMA[section][key], v, Path.cwd())
    return Profile(values, profile.source)
