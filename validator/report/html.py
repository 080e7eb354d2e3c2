"""report.html: verdict, checks, ledger and charts, for a person doing an acceptance run."""

from __future__ import annotations

import html
import json

from validator.judge.verdict import counts_line, status_of
from validator.report import svg
from validator.report.markdown import DEV_MODE_NOTE, dev_mode_of, fmt, freeze_summary
from validator.units import GiB


def report_html(rep: dict, latency_values: dict | None = None) -> str:
    latency_values = latency_values or {}
    p = rep["plan"]
    L = p["ledger"]
    esc = html.escape
    parts = [f"<h1>kvgate: <span class='{rep['verdict']}'>{rep['verdict'].upper()}</span> — {esc(rep['profile'])}</h1>"]
    if rep.get("error"):
        parts.append(f"<p class='fail'>error: {esc(rep['error'])}</p>")
    parts.append(f"<p>Plan: {p['max_num_seqs']} sequences × {p['max_model_len']:,} tokens; "
                 f"{p['kv_bytes_per_token']:,} B per token; {p['num_blocks']:,} blocks of {p['block_size']} tokens "
                 f"({p['usable_blocks']:,} usable); vLLM args <code>{esc(' '.join(p['vllm_args']))}</code></p>")
    parts.append(f"<p><b>{esc(counts_line(rep))}</b></p>")
    if dev_mode_of(rep):
        parts.append(f"<p class='note'>{esc(DEV_MODE_NOTE)}</p>")
    parts.append("<h2>Checks</h2>" + _checks_html(rep["checks"]))
    parts.append("<h2>Memory ledger</h2>")
    pool = p["num_blocks"] * p["bytes_per_block"]
    if L.get("budget_bytes"):  # GPU: everything the engine holds against the budget
        keys, budget, title = ("weights_bytes", "workspace_bytes", "kv_bytes_at_limits", "null_block_bytes"), \
            L["budget_bytes"], "GPU memory budget"
    else:  # KV given directly: the pool only
        keys, budget, title = ("kv_bytes_at_limits", "null_block_bytes"), pool, "KV pool"
    unit, div = ("GiB", GiB) if budget >= GiB else ("MiB", 1024 ** 2)
    ledger = [(k.replace("_bytes", "").replace("_", " "), L[k] / div) for k in keys if L.get(k)]
    headroom = L.get("kv_headroom_bytes")
    if headroom and headroom > 0:
        ledger.append(("KV headroom", headroom / div))
    parts.append(svg.stacked_bar(f"Memory ledger: {title}", ledger, budget / div, unit))
    parts.append("<table>" + "".join(f"<tr><td>{esc(k)}</td><td>{esc(fmt(v))}</td></tr>" for k, v in L.items())
                 + "</table>")
    parts.append("<h2>KV blocks over time</h2>")
    for r in rep["runs"]:
        tl = r["kv_timeline"]
        if not r["measured"]:
            continue
        obs = [(x["t"], x["observed"]) for x in tl if x["observed"] is not None]
        pred = [(x["t"], x["predicted"]) for x in tl]
        parts.append(f"<h3>{esc(r['name'])} ({esc(r['cache'])})</h3><p>{esc(r['purpose'])}; "
                     f"{esc(freeze_summary(r))}</p>")
        series = [("predicted (client view)", pred), ("sampled (kv_cache_usage_perc x usable)", obs)]
        frozen = [(x["t"], x["observed"]) for x in r.get("freezes") or [] if x["t"] is not None
                  and x["observed"] is not None]
        if frozen:
            series.append(("at a freeze (exact)", frozen))
        parts.append(svg.lines(f"KV blocks in use: {r['name']}", series,
                               "seconds since the run started", "blocks",
                               hline=("usable blocks", r["kv"]["usable_blocks"]), step=True,
                               markers=("at a freeze (exact)",)))
    parts.append("<h2>Latency: cold vs warm</h2>")
    by_name = {r["name"]: r for r in rep["runs"]}
    for metric, label in (("ttft", "TTFT (ms)"), ("itl", "ITL (ms)")):
        series = [(n, latency_values.get(n, {}).get(metric, [])) for n in ("cold", "warm")
                  if n in by_name]
        if any(v for _, v in series):
            parts.append(svg.cdf(f"{label}: cold vs warm", series, label))
    bw = p.get("bandwidth") or {}
    if bw.get("decode_step_floor_ms") is not None:
        parts.append(f"<p>Decode-step floor at the limits: {bw['decode_step_floor_ms']:.2f} ms "
                     f"(weights + KV read once at {bw['memory_bandwidth_bytes_per_s'] / 1e12:g} TB/s).</p>")
    parts.append("<h2>Runs</h2>")
    for r in rep["runs"]:
        parts.append(f"<h3>{esc(r['name'])}</h3><pre>{esc(json.dumps({k: r[k] for k in ('client', 'server', 'kv', 'prefix', 'workload')}, indent=1, default=str))}</pre>")
    style = ("body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}"
             ".pass{color:#1a7f37}.fail{color:#c62828}.na{color:#888}pre{background:#f6f6f6;padding:8px;"
             "font-size:12px;overflow:auto}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>kvgate report: {esc(rep['profile'])}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def _checks_html(checks: list[dict]) -> str:
    rows = ["<table class='checks'><tr><th>check</th><th>expected</th><th>observed</th><th>tolerance</th>"
            "<th>result</th><th>why</th></tr>"]
    for c in checks:
        st = status_of(c)
        cls = {"pass": "pass", "fail": "fail"}.get(st, "na")
        word = {"pass": "pass", "fail": "FAIL", "not_measured": "not measured", "not_judged": "not judged"}[st]
        rows.append(f"<tr class='{cls}'><td>{html.escape(c['name'])}</td><td>{html.escape(fmt(c['expected']))}</td>"
                    f"<td>{html.escape(fmt(c['observed']))}</td><td>{html.escape(str(c['tolerance']))}</td>"
                    f"<td class='{cls}'>{word}</td>"
                    f"<td>{html.escape(c['explanation'])}</td></tr>")
    return "".join(rows) + "</table>"
