"""The checks table printed to the console: columns as wide as their content, the tolerance of
each check, and what needs attention (failed, not measured) repeated last with its count."""

from __future__ import annotations

from validator.judge.verdict import STATUS_WORD as WORD
from validator.report.numbers import fmt

MAX_CELL = 60  # a cell longer than this is cut with "..." (the full value is in report.json)


def _cell(v) -> str:
    s = fmt(v)
    return s if len(s) <= MAX_CELL else s[: MAX_CELL - 3] + "..."


def checks_lines(checks: list[dict]) -> list[str]:
    rows = [("check", "expected", "observed", "tolerance", "result")]
    rows += [
        (c["name"], _cell(c["expected"]), _cell(c["observed"]), str(c.get("tolerance") or ""), WORD[c["status"]])
        for c in checks
    ]
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}  {r[3]:<{w[3]}}  {r[4]}" for r in rows]
    for st in ("fail", "not_measured"):
        these = [c for c in checks if c["status"] == st]
        if these:
            lines.append(f"{WORD[st]} ({len(these)}):")
            lines += [
                f"  {c['name']}: expected {fmt(c['expected'])}, observed {fmt(c['observed'])} ({c['explanation']})"
                for c in these
            ]
    return lines


def print_checks(checks: list[dict]) -> None:
    print("\n".join(checks_lines(checks)))
