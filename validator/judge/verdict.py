"""The verdict from the checks: pass only when every judged check was measured and passed."""

from __future__ import annotations


def status_of(c: dict) -> str:
    """pass, fail, not_measured or not_judged (reports written before statuses existed: derived)."""
    if c.get("status"):
        return c["status"]
    if c["passed"] is None:
        return "not_measured" if c.get("judged", True) else "not_judged"
    return "pass" if c["passed"] else "fail"


def counts_of(checks: list[dict]) -> dict:
    out = {"passed": 0, "failed": 0, "not_measured": 0, "not_judged": 0}
    key = {"pass": "passed", "fail": "failed", "not_measured": "not_measured", "not_judged": "not_judged"}
    for c in checks:
        out[key[status_of(c)]] += 1
    return out


def verdict_of(checks: list[dict], error: str | None) -> str:
    """pass only when every check that is judged was measured and passed; a required check without
    its evidence makes the verdict inconclusive, and no check at all can never pass."""
    if error:
        return "error"
    st = [status_of(c) for c in checks]
    if "fail" in st:
        return "fail"
    if "not_measured" in st or "pass" not in st:
        return "inconclusive"
    return "pass"


def counts_line(rep: dict) -> str:
    c = rep.get("counts") or counts_of(rep["checks"])
    return (f"{c['passed']} passed, {c['failed']} failed, {c['not_measured']} not measured"
            + (f", {c['not_judged']} not judged" if c["not_judged"] else ""))


# one word per status, the same in the console, summary.md, report.html and the docs
STATUS_WORD = {"pass": "pass", "fail": "FAIL", "not_measured": "not measured", "not_judged": "not judged"}
