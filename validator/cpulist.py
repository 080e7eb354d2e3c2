"""Linux CPU lists ("0", "0-3,6"): vllm.cpus, the CPUs vLLM may run on."""

from __future__ import annotations

import os
import re
from typing import Any

from validator.errors import InputError
from validator.redact import brief


def parse_cpus(value: Any, path: str) -> str:
    """A Linux CPU list ("0", "0-3,6") naming CPUs this machine lets kvgate use, leaving one for
    kvgate itself; returned in canonical form."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f'{path}: expected a CPU list like "0" or "0-3,6", got {brief(value)}')
    cpus: set[int] = set()
    for part in value.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d{1,4})(?:-(\d{1,4}))?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise InputError(f'{path}: {brief(part)} is not a CPU number or range; write e.g. "0" or "0-3,6"')
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    have = set(range(os.cpu_count() or 1))
    if not cpus <= have:
        raise InputError(
            f"{path}: CPUs {sorted(cpus - have)} are not available here (this machine has "
            f"{format_cpus(have)}); pick among those"
        )
    if cpus == have:
        raise InputError(f"{path}: {format_cpus(cpus)} is every CPU here; leave at least one for kvgate")
    return format_cpus(cpus)


def format_cpus(cpus) -> str:
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)
