"""The sweep in report.html: one row a step, and four plots, two to a row (all four on one 800-pixel
screen): who runs against the concurrency and the KV blocks held at the freeze (each with the
ledger's prediction as a line, the freezes' readings as points, and the limit drawn: what the KV
cache holds at full length, the usable blocks), throughput against TTFT (the Pareto curve), and
queue time against the concurrency."""

from __future__ import annotations

import html

from validator.report import svg
from validator.report.numbers import fmt, slo_word

STYLE = ".sweep{display:flex;flex-wrap:wrap;gap:4px}.sweep svg{width:49%;height:auto}"


def _n(v) -> str:
    return "—" if v is None else fmt(v)


def _unjudged(row: dict) -> str:
    """A step whose wave vLLM preempts before a freeze can hold it: its admission shown, not judged."""
    return " (not judged)" if row.get("admission_judged") is False else ""


def _ledger_preempts(predicted: bool | None) -> str:
    return "not known" if predicted is None else ">= 1" if predicted else "0"


def sweep_html(sw: dict | None) -> list[str]:
    if not sw or not sw.get("steps"):
        return []
    rows = sw["steps"]
    head = ["in flight", "run (predicted / at freeze)", "wait at freeze", "KV blocks", "preemptions",
            "req/s", "goodput", "out tok/s", "TTFT p50 / p99", "ITL p99", "queue (mean)", "peak memory",
            "SLOs"]  # fmt: skip
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='n'>{html.escape(c)}</td>"
            for c in (
                _n(r["n"]),
                f"{_n(r['admitted_predicted'])}{_unjudged(r)} / {_n(r['running_at_freeze'])}",
                _n(r["waiting_at_freeze"]),
                _n(r["kv_blocks_at_freeze"]),
                f"{_n(r['preemptions'])} (ledger: {_ledger_preempts(r['preempts_predicted'])})",
                _n(r["requests_per_s"]),
                _n(r.get("goodput_requests_per_s")),
                _n(r["output_tokens_per_s"]),
                f"{_n(r['ttft_p50_ms'])} / {_n(r['ttft_p99_ms'])} ms",
                f"{_n(r['itl_p99_ms'])} ms",
                f"{_n(r['queue_mean_ms'])} ms",
                f"{_n(r.get('peak_server_memory_gib'))} GiB",
                slo_word(r),
            )
        )
        + "</tr>"
        for r in rows
    )
    table = "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{body}</table>"
    pts = [r for r in rows if r["n"] is not None]
    pareto = svg.lines(
        "Throughput vs TTFT p99 (one point a step)",
        [("TTFT p99", [(r["output_tokens_per_s"], r["ttft_p99_ms"]) for r in pts if r["ttft_p99_ms"] is not None])],
        "output tokens / s",
        "ms",
    )
    running = svg.lines(
        "Running vs in flight: the ledger and the engine",
        [
            (
                "predicted running",
                [
                    (r["n"], r["admitted_predicted"])
                    for r in pts
                    if r["admitted_predicted"] is not None and r.get("admission_judged") is not False
                ],
            ),
            (
                "running at the freeze",
                [(r["n"], r["running_at_freeze"]) for r in pts if r["running_at_freeze"] is not None],
            ),
            ("preemptions", [(r["n"], r["preemptions"]) for r in pts if r["preemptions"] is not None]),
        ],
        "requests in flight",
        "requests",
        hline=None
        if sw["kv_holds"] is None
        else (f"the KV cache holds {sw['kv_holds']} at full length", sw["kv_holds"]),
        markers=("running at the freeze",),
    )
    blocks = svg.lines(
        "KV blocks vs in flight: the ledger and the engine",
        [
            (
                "predicted at the freeze",
                [(r["n"], r["kv_blocks_predicted"]) for r in pts if r.get("kv_blocks_predicted") is not None],
            ),
            (
                "read at the freeze",
                [(r["n"], r["kv_blocks_at_freeze"]) for r in pts if r["kv_blocks_at_freeze"] is not None],
            ),
        ],
        "requests in flight",
        "blocks",
        hline=(f"{sw['usable_blocks']} usable blocks", sw["usable_blocks"] or 0),
        markers=("read at the freeze",),
    )
    queue = svg.lines(
        "Queue time vs in flight",
        [("mean queue time", [(r["n"], r["queue_mean_ms"]) for r in pts if r["queue_mean_ms"] is not None])],
        "requests in flight",
        "ms",
    )
    return [
        "<h2>Capacity sweep</h2>",
        f"<p><b>{html.escape(sw['line'])}</b></p>",
        f"<div class='sweep'>{running}{blocks}{pareto}{queue}</div>",
        table,
    ]
