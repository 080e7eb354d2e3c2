"""One comparison of a prediction with an observation, and its status."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(kw_only=True)
class Check:
    """One comparison. passed None is "not measured" (a required check without its evidence:
    the verdict cannot be pass) unless judged is False: a check this platform or profile does not
    judge, said with its reason (for example an SLO that was not set)."""

    name: str
    expected: object
    observed: object
    passed: bool | None          # None: not measured, or not judged
    tolerance: str = "exact"
    explanation: str = ""
    judged: bool = True

    @property
    def status(self) -> str:
        if self.passed is True:
            return "pass"
        if self.passed is False:
            return "fail"
        return "not_measured" if self.judged else "not_judged"

    def to_json(self) -> dict:
        d = asdict(self)
        d["status"] = self.status
        return d
