"""The checks table printed to the console."""

from __future__ import annotations

from validator.judge.verdict import status_of
from validator.report.markdown import fmt

_WORD = {"pass": "pass", "fail": "FAIL", "not_measured": "not measured", "not_judged": "not judged"}


def print_checks(checks: list[dict]) -> None:
    w = max(len(c["name"]) for c in checks)
    print(f"{'check':<{w}}  {'expected':>22}  {'observed':>22}  result")
    for c in checks:
        res = _WORD[status_of(c)]
        print(f"{c['name']:<{w}}  {fmt(c['expected'])[:22]:>22}  {fmt(c['observed'])[:22]:>22}  {res}")
    # what needs attention, repeated last so it is the first thing a reader sees
    for st in ("fail", "not_measured"):
        for c in checks:
            if status_of(c) == st:
                print(f"{_WORD[st]}: {c['name']}: expected {fmt(c['expected'])}, observed "
                      f"{fmt(c['observed'])} ({c['explanation']})")
