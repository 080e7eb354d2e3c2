"""The quality A/B in report.html: the figures per task kind, and two plots by prompt length (the
share of positions that agree up to the first divergence, and the mean |delta logprob| of the
reference token), since a quantized cache's error grows with the context it holds."""

from __future__ import annotations

import html

from validator.report import svg
from validator.report.numbers import fmt


def _n(v) -> str:
    return "—" if v is None else fmt(round(v, 4) if isinstance(v, float) else v)


def quality_html(qf: dict | None) -> list[str]:
    if not qf:
        return []
    cand = qf.get("candidate_kv_cache_dtype") or "candidate"
    out = [f"<h2>KV cache quality: reference vs {html.escape(cand)}</h2>"]
    out.append(
        "<p>"
        + html.escape(
            f"{qf['prompts']} prompts, greedy; control (reference twice): "
            f"{'identical' if qf['control_identical'] else 'differs: the A/B is not judged'}; "
            f"identical outputs {_n(qf['ab_exact_match'])}, top-1 agreement {_n(qf['top1_agreement'])}, "
            f"mean |Δ logprob| {_n(qf['mean_abs_logprob_delta'])}; first divergence "
            f"{qf['first_divergence']['count']} prompts (min {_n(qf['first_divergence']['min'])}, median "
            f"{_n(qf['first_divergence']['median'])}, max {_n(qf['first_divergence']['max'])}); answers right: "
            f"reference {_n(qf['reference_accuracy'])}, candidate {_n(qf['candidate_accuracy'])}"
        )
        + "</p>"
    )
    head = ["task", "prompts", "identical", "top-1 agreement", "mean |Δ logprob|", "answers: reference", "candidate"]
    rows = "".join(
        "<tr><td>"
        + html.escape(kind)
        + "</td>"
        + "".join(
            f"<td class='n'>{html.escape(_n(v.get(k)))}</td>"
            for k in (
                "prompts",
                "ab_exact_match",
                "top1_agreement",
                "mean_abs_logprob_delta",
                "reference_accuracy",
                "candidate_accuracy",
            )
        )
        + "</tr>"
        for kind, v in sorted((qf.get("by_kind") or {}).items())
    )
    out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + f"</tr>{rows}</table>")
    by = [p for p in qf.get("by_prompt") or [] if p.get("prompt_tokens") is not None]
    kinds = sorted({p["kind"] for p in by})
    if by:
        agree = [
            (
                k,
                sorted(
                    (p["prompt_tokens"], p["agreement"]) for p in by if p["kind"] == k and p["agreement"] is not None
                ),
            )
            for k in kinds
        ]
        delta = [
            (
                k,
                sorted(
                    (p["prompt_tokens"], p["mean_abs_logprob_delta"])
                    for p in by
                    if p["kind"] == k and p["mean_abs_logprob_delta"] is not None
                ),
            )
            for k in kinds
        ]
        plots = [svg.lines("Top-1 agreement by prompt length", agree, "prompt tokens", "share of positions", y_max=1.0)]
        if any(s for _, s in delta):
            plots.append(
                svg.lines(
                    "Mean |Δ logprob| of the reference token by prompt length", delta, "prompt tokens", "|Δ logprob|"
                )
            )
        out.append("<div class='sweep'>" + "".join(plots) + "</div>")
    return out
