"""The verdict from the checks: pass only when every judged check was measured and passed."""

from __future__ import annotations

from validator.judge.check import Check, Status


def counts_of(checks: list[Check]) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "not_measured": 0, "not_judged": 0}
    key = {
        Status.PASS: "passed",
        Status.FAIL: "failed",
        Status.NOT_MEASURED: "not_measured",
        Status.NOT_JUDGED: "not_judged",
    }
    for c in checks:
        out[key[c.status]] += 1
    return out


def verdict_of(checks: list[Check], error: str | None) -> str:
    """pass only when every check that is judged was measured and passed; a required check without
    its evidence makes the verdict inconclusive, and no check at all can never pass."""
    if error:
        return "error"
    st = {c.status for c in checks}
    if Status.FAIL in st:
        return "fail"
    if Status.NOT_MEASURED in st or Status.PASS not in st:
        return "inconclusive"
    return "pass"


def counts_line(counts: dict[str, int]) -> str:
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['not_measured']} not measured" + (
        f", {counts['not_judged']} not judged" if counts["not_judged"] else ""
    )


# one word per status, the same in the console, summary.md, report.html and the docs
STATUS_WORD = {"pass": "pass", "fail": "FAIL", "not_measured": "not measured", "not_judged": "not judged"}
