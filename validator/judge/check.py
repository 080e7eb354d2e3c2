"""One comparison of a prediction with an observation, and its status."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_MEASURED = "not_measured"  # the check applies, its evidence is missing: never a pass
    NOT_JUDGED = "not_judged"  # the check does not apply here, with its reason


@dataclass(kw_only=True)
class Check:
    """One comparison. passed None is "not measured" (a required check without its evidence:
    the verdict cannot be pass) unless judged is False: a check this platform or profile does not
    judge, said with its reason (for example an SLO that was not set)."""

    name: str
    expected: Any
    observed: Any
    passed: bool | None  # None: not measured, or not judged
    tolerance: str = "exact"
    explanation: str = ""
    judged: bool = True

    @property
    def status(self) -> Status:
        if self.passed is True:
            return Status.PASS
        if self.passed is False:
            return Status.FAIL
        return Status.NOT_MEASURED if self.judged else Status.NOT_JUDGED

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d
