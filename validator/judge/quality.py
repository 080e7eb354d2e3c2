"""The quality A/B judged (pure): the reference KV dtype's answers against its own repeat (the
determinism control) and against the candidate's, on the same prompts, greedy.

Outputs are compared token for token up to the first divergence; after it the two continue from
different text, so no later position is compared. Per prompt: identical or not, where they first
differ, how many positions agree of those compared (the first divergence included), and the
absolute difference of the reference token's logprob between the runs at each compared position
(at the divergence, when the candidate's top logprobs hold the reference token).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from validator.judge.check import Check
from validator.quality.prompts import answered


@dataclass(frozen=True)
class Generation:
    """One prompt's greedy output in one run, as recorded (quality/<run>.json)."""

    id: str
    tokens: tuple[str, ...]
    logprobs: tuple[float | None, ...] | None  # None: the server returned none
    top: tuple[dict[str, float], ...] | None
    text: str
    prompt_tokens: int | None
    error: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Generation:
        lp = d.get("logprobs")
        top = d.get("top")
        return cls(
            id=str(d["id"]),
            tokens=tuple(str(t) for t in d.get("tokens") or ()),
            logprobs=tuple(lp) if isinstance(lp, list) else None,
            top=tuple(t if isinstance(t, dict) else {} for t in top) if isinstance(top, list) else None,
            text=str(d.get("text") or ""),
            prompt_tokens=d.get("prompt_tokens"),
            error=d.get("error"),
        )


@dataclass(frozen=True)
class Pair:
    """Two generations of one prompt compared."""

    id: str
    identical: bool
    first_divergence: int | None  # token index; None when identical
    agreed: int
    compared: int
    abs_deltas: tuple[float, ...]  # |logprob of the reference token|, run a vs run b, per compared position


def compare(a: Generation, b: Generation) -> Pair:
    n = min(len(a.tokens), len(b.tokens))
    first = next((i for i in range(n) if a.tokens[i] != b.tokens[i]), None)
    if first is None and len(a.tokens) != len(b.tokens):
        first = n  # one stopped where the other went on
    identical = first is None
    agreed = n if first is None else first
    compared = agreed if first is None or first >= n else first + 1
    deltas: list[float] = []
    if a.logprobs is not None and b.logprobs is not None:
        for i in range(min(agreed, len(a.logprobs), len(b.logprobs))):
            la, lb = a.logprobs[i], b.logprobs[i]
            if la is not None and lb is not None:
                deltas.append(abs(la - lb))
        if first is not None and first < n and b.top is not None and first < len(b.top):
            la, lb = a.logprobs[first] if first < len(a.logprobs) else None, b.top[first].get(a.tokens[first])
            if la is not None and lb is not None:
                deltas.append(abs(la - lb))
    return Pair(a.id, identical, first, agreed, compared, tuple(deltas))


@dataclass(frozen=True)
class PromptFigures:
    id: str
    kind: str
    prompt_tokens: int | None
    ab: Pair
    reference_correct: bool | None
    candidate_correct: bool | None


@dataclass(frozen=True, kw_only=True)
class QualityFigures:
    prompts: tuple[PromptFigures, ...]
    control: tuple[Pair, ...]
    missing: tuple[str, ...]  # prompts without a generation in every run (an error, or not recorded)
    logprobs: bool  # every run returned logprobs
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def control_identical(self) -> bool:
        return bool(self.control) and all(p.identical for p in self.control)

    @property
    def ab_exact_match(self) -> float | None:
        return sum(p.ab.identical for p in self.prompts) / len(self.prompts) if self.prompts else None

    @property
    def top1_agreement(self) -> float | None:
        compared = sum(p.ab.compared for p in self.prompts)
        return sum(p.ab.agreed for p in self.prompts) / compared if compared else None

    @property
    def mean_abs_logprob_delta(self) -> float | None:
        d = [x for p in self.prompts for x in p.ab.abs_deltas]
        return statistics.fmean(d) if d and self.logprobs else None

    def accuracy(self, which: str) -> float | None:
        marks = [getattr(p, f"{which}_correct") for p in self.prompts]
        known = [m for m in marks if m is not None]
        return sum(known) / len(known) if known else None

    def agreement_by_position(self) -> list[float]:
        """Share of prompts whose outputs still agree at each token position."""
        longest = max((p.ab.compared for p in self.prompts), default=0)
        return [sum(p.ab.agreed > i for p in self.prompts) / len(self.prompts) for i in range(longest)]

    def to_json(self) -> dict[str, Any]:
        divs = [p.ab.first_divergence for p in self.prompts if p.ab.first_divergence is not None]
        return {
            "prompts": len(self.prompts),
            "missing": list(self.missing),
            "control_identical": self.control_identical,
            "control_differing": [p.id for p in self.control if not p.identical],
            "ab_exact_match": self.ab_exact_match,
            "top1_agreement": self.top1_agreement,
            "mean_abs_logprob_delta": self.mean_abs_logprob_delta,
            "first_divergence": {
                "count": len(divs),
                "min": min(divs) if divs else None,
                "median": statistics.median(divs) if divs else None,
                "max": max(divs) if divs else None,
            },
            "reference_accuracy": self.accuracy("reference"),
            "candidate_accuracy": self.accuracy("candidate"),
            "by_kind": self.by_kind,
            "agreement_by_position": self.agreement_by_position(),
            "by_prompt": [
                {
                    "id": p.id,
                    "kind": p.kind,
                    "prompt_tokens": p.prompt_tokens,
                    "identical": p.ab.identical,
                    "first_divergence": p.ab.first_divergence,
                    "agreement": p.ab.agreed / p.ab.compared if p.ab.compared else None,
                    "mean_abs_logprob_delta": statistics.fmean(p.ab.abs_deltas) if p.ab.abs_deltas else None,
                    "reference_correct": p.reference_correct,
                    "candidate_correct": p.candidate_correct,
                }
                for p in self.prompts
            ],
        }


def figures(
    prompts: list[dict[str, Any]],
    reference: list[Generation],
    control: list[Generation],
    candidate: list[Generation],
) -> QualityFigures:
    """prompts: quality/prompts.json's entries (id, kind, answer)."""
    ref, ctl, cand = ({g.id: g for g in run if g.error is None} for run in (reference, control, candidate))
    out, pairs, missing = [], [], []
    for p in prompts:
        pid = str(p["id"])
        if pid not in ref or pid not in ctl or pid not in cand:
            missing.append(pid)
            continue
        pairs.append(compare(ref[pid], ctl[pid]))
        out.append(
            PromptFigures(
                id=pid,
                kind=str(p.get("kind")),
                prompt_tokens=ref[pid].prompt_tokens,
                ab=compare(ref[pid], cand[pid]),
                reference_correct=answered(ref[pid].text, p.get("answer")),
                candidate_correct=answered(cand[pid].text, p.get("answer")),
            )
        )
    all_gens = [g for run in (ref, ctl, cand) for g in run.values()]
    logprobs = bool(all_gens) and all(g.logprobs is not None for g in all_gens)
    kinds: dict[str, dict[str, Any]] = {}
    for kind in sorted({p.kind for p in out}):
        sub = QualityFigures(prompts=tuple(p for p in out if p.kind == kind), control=(), missing=(), logprobs=logprobs)
        kinds[kind] = {
            "prompts": len(sub.prompts),
            "ab_exact_match": sub.ab_exact_match,
            "top1_agreement": sub.top1_agreement,
            "mean_abs_logprob_delta": sub.mean_abs_logprob_delta,
            "reference_accuracy": sub.accuracy("reference"),
            "candidate_accuracy": sub.accuracy("candidate"),
        }
    return QualityFigures(
        prompts=tuple(out), control=tuple(pairs), missing=tuple(missing), logprobs=logprobs, by_kind=kinds
    )


def quality_checks(f: QualityFigures, q: Any, candidate: str) -> list[Check]:
    """The control, then the A/B judged against the profile's `quality:` thresholds (q)."""
    checks: list[Check] = []
    differing = [p for p in f.control if not p.identical]
    if not f.control:
        control_why = "no prompt has a generation in all three runs"
        checks.append(
            Check(name="quality.control", expected="identical", observed=None, passed=None, explanation=control_why)
        )
    else:
        first = min((p.first_divergence for p in differing if p.first_divergence is not None), default=None)
        control_why = (
            f"the reference repeated itself on {len(f.control)} of {len(f.control)} prompts, token for token"
            if not differing
            else f"the reference did not repeat itself: {len(differing)} of {len(f.control)} prompts differ "
            f"(first at token {first}); a difference to the candidate could be noise"
        )
        checks.append(
            Check(
                name="quality.control",
                expected="reference = reference, every token",
                observed=f"{len(f.control) - len(differing)} of {len(f.control)} identical",
                passed=not differing,
                explanation=control_why,
            )
        )
    not_judged = None if f.control_identical else f"not judged: {control_why}"
    note = f" ({len(f.missing)} prompts missing from a run: {', '.join(f.missing[:5])})" if f.missing else ""

    def ab(
        name: str,
        observed: float | None,
        bound: float | None,
        higher_is_better: bool,
        what: str,
        unmeasured: str = "no prompt compared",
    ) -> Check:
        if not_judged:
            return Check(
                name=name, expected=bound, observed=observed, passed=None, explanation=not_judged, judged=False
            )
        if observed is None:
            return Check(
                name=name, expected=bound, observed=None, passed=None, explanation=f"not measured: {unmeasured}{note}"
            )
        if bound is None:
            return Check(
                name=name,
                expected=None,
                observed=observed,
                passed=None,
                judged=False,
                explanation=f"{what}; no threshold set",
            )
        ok = observed >= bound if higher_is_better else observed <= bound
        sign = ">=" if higher_is_better else "<="
        return Check(
            name=name,
            expected=bound,
            observed=round(observed, 6),
            passed=ok,
            tolerance=f"{sign} {bound:g}",
            explanation=f"{what}, {candidate} against the reference{note}",
        )

    checks.append(
        ab(
            "quality.ab_exact_match",
            f.ab_exact_match,
            q.min_ab_exact_match,
            True,
            "share of prompts with identical outputs",
        )
    )
    checks.append(
        ab(
            "quality.top1_agreement",
            f.top1_agreement,
            q.min_top1_agreement,
            True,
            "share of compared positions with the same greedy token",
        )
    )
    checks.append(
        ab(
            "quality.mean_abs_logprob_delta",
            f.mean_abs_logprob_delta if f.logprobs else None,
            q.max_mean_abs_logprob_delta,
            False,
            "mean |logprob of the reference token, reference - candidate|",
            unmeasured="the server returned no logprobs",
        )
    )
    ra, ca = f.accuracy("reference"), f.accuracy("candidate")
    drop = None if ra is None or ca is None else ra - ca
    checks.append(
        ab(
            "quality.answer_accuracy_drop",
            drop,
            q.max_answer_accuracy_drop,
            False,
            "known answers lost (reference accuracy - candidate accuracy)",
        )
    )
    return checks
