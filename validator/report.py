"""Reports: report.json for machines, summary.md for CI logs, report.html for people."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

from validator import svg
from validator.units import GiB


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


def build(plan: dict, startup: dict | None, runs: list, figures: dict, checks: list[dict], error: str | None,
          profile_name: str, extra: dict | None = None) -> dict:
    run_rows = []
    for r in runs:
        f = figures.get(r.name, {})
        run_rows.append({
            "name": r.name, "cache": r.cache, "purpose": r.purpose, "measured": r.measured,
            "isolation": r.isolation, "started_at": r.started_at, "ended_at": r.ended_at,
            "settled": r.settled, "interrupted": r.interrupted, "workload": r.workload,
            "client": _client_stats(r),
            # physics: a decode step cannot beat reading the weights and the KV once (None without a bandwidth)
            "decode_step_floor_ms": (plan.get("bandwidth") or {}).get("decode_step_floor_ms"),
            "server": _server_stats(r),
            "kv": {k: f.get(k) for k in ("kv_upper_bound", "kv_observed_peak", "usable_blocks", "max_running",
                                         "max_waiting", "preemptions")},
            "kv_timeline": f.get("kv_timeline", []),
            "freezes": f.get("freezes", []),
            "freeze_note": getattr(r, "freeze_note", None),
            "latency_left_out": {"ttft": f.get("paused_ttft_dropped"), "itl": f.get("paused_itl_dropped")},
            "prefix": {"predicted_hit_tokens": f.get("prefix_hits_predicted"),
                       "observed_hit_tokens": f.get("prefix_hits_observed"),
                       "query_tokens_observed": f.get("prefix_queries_observed"),
                       "prompt_tokens_sent": f.get("prompt_tokens_sent")},
        })
    counts = counts_of(checks)
    rep = {"verdict": verdict_of(checks, error), "counts": counts,
           "not_measured": [c["name"] for c in checks if status_of(c) == "not_measured"],
           "profile": profile_name, "plan": plan, "startup": startup, "runs": run_rows, "checks": checks}
    if error:
        rep["error"] = error
    if extra:
        rep.update(extra)
    return rep


def counts_line(rep: dict) -> str:
    c = rep.get("counts") or counts_of(rep["checks"])
    return (f"{c['passed']} passed, {c['failed']} failed, {c['not_measured']} not measured"
            + (f", {c['not_judged']} not judged" if c["not_judged"] else ""))


def _client_stats(run) -> dict:
    from loadgen.stats import summarize
    s = summarize(run.records, run.ended_at - run.started_at)
    return {k: s[k] for k in ("requests", "ok", "failed", "error_rate", "errors", "token_mismatches",
                              "prompt_tokens", "output_tokens", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")}


def _server_stats(run) -> dict:
    from validator.compare import _delta, bucket_of, hist_delta
    out = {}
    for key in ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits",
                "num_preemptions"):
        out[key] = _delta(run, key)
    for key in ("ttft", "itl", "e2e", "queue"):
        h = hist_delta(run, key)
        if h is None or h.count <= 0:
            out[f"{key}_s"] = None
            continue
        out[f"{key}_s"] = {"count": h.count, "mean": h.sum / h.count,
                           "p50_bucket": bucket_of(h, 0.5), "p99_bucket": bucket_of(h, 0.99)}
    return out


def write_all(run_dir: Path, rep: dict, latency_values: dict | None = None) -> None:
    _atomic(run_dir / "report.json", json.dumps(rep, indent=1, default=_json_default))
    _atomic(run_dir / "summary.md", summary_md(rep))
    _atomic(run_dir / "report.html", report_html(rep, latency_values or {}))


def _json_default(o):
    if isinstance(o, float) and o != o:
        return None
    return str(o)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:   # counters come as floats: 11520.0 reads as 11520
            return str(int(v))
        return f"{v:.4g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def checks_table(checks: list[dict]) -> str:
    rows = ["| check | expected | observed | tolerance | result |", "|---|---|---|---|---|"]
    for c in checks:
        res = {"pass": "pass", "fail": "**FAIL**", "not_measured": "not measured",
               "not_judged": "not judged"}[status_of(c)]
        rows.append(f"| {c['name']} | {_fmt(c['expected'])} | {_fmt(c['observed'])} | {c['tolerance']} | {res} |")
    return "\n".join(rows)


DEV_MODE_NOTE = ("vLLM ran in dev mode (VLLM_SERVER_DEV_MODE=1, for freeze-frames and the cache reset): its "
                 "/pause, /sleep and /collective_rpc routes are not guarded by the API key; kvgate allows it only "
                 "on a loopback address")


def dev_mode_of(rep: dict) -> bool:
    return bool((rep.get("startup") or {}).get("dev_mode"))


def summary_md(rep: dict) -> str:
    p = rep["plan"]
    failed = [c for c in rep["checks"] if c["passed"] is False]
    lines = [f"# kvgate: {rep['verdict'].upper()} ({rep['profile']})", ""]
    if rep.get("error"):
        lines += [f"**error:** {rep['error']}", ""]
    if dev_mode_of(rep):
        lines += [f"note: {DEV_MODE_NOTE}", ""]
    lines += [f"plan: {p['max_num_seqs']} sequences x {p['max_model_len']:,} tokens, {p['num_blocks']:,} blocks of "
              f"{p['block_size']} ({p['usable_blocks']:,} usable), {p['kv_bytes_per_token']:,} B/token", ""]
    for r in rep["runs"]:
        c = r["client"]
        ttft = c["ttft_ms"]["p99"] if c.get("ttft_ms") else None
        itl = c["itl_ms"]["p50"] if c.get("itl_ms") else None
        floor = r.get("decode_step_floor_ms")
        lines.append(f"- **{r['name']}** ({r['cache']}, cache {r['isolation'] or 'as left'}): {c['ok']}/{c['requests']} "
                     f"ok, {_freeze_summary(r)}, sampled KV peak {_fmt(r['kv']['kv_observed_peak'])} (bound "
                     f"{_fmt(r['kv']['kv_upper_bound'])}) blocks, prefix hits {_fmt(r['prefix']['observed_hit_tokens'])} observed / "
                     f"{_fmt(r['prefix']['predicted_hit_tokens'])} predicted, TTFT p99 {_fmt(ttft)} ms, ITL p50 "
                     f"{_fmt(itl)} ms" + (f" (decode-step floor {floor:.2f} ms)" if floor is not None else "")
                     + (" — cut short" if r["interrupted"] else ""))
    missing = [c for c in rep["checks"] if status_of(c) == "not_measured"]
    lines += ["", checks_table(rep["checks"]), ""]
    if failed:
        lines.append("Failed: " + ", ".join(c["name"] for c in failed))
    if missing:
        lines.append("Not measured: " + ", ".join(c["name"] for c in missing))
    lines.append(f"**{rep['verdict']}**: {counts_line(rep)}.")
    return "\n".join(lines) + "\n"


def _freeze_summary(r: dict) -> str:
    fz = r.get("freezes") or []
    if r.get("freeze_note"):
        return f"no freezes ({r['freeze_note']})"
    if not fz:
        return "no freezes"
    return f"{sum(1 for f in fz if f['settled'])} freeze(s) at " + ", ".join(
        f"{_fmt(f['observed'])}" for f in fz) + " blocks"


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
    parts.append("<table>" + "".join(f"<tr><td>{esc(k)}</td><td>{esc(_fmt(v))}</td></tr>" for k, v in L.items())
                 + "</table>")
    parts.append("<h2>KV blocks over time</h2>")
    for r in rep["runs"]:
        tl = r["kv_timeline"]
        if not r["measured"]:
            continue
        obs = [(x["t"], x["observed"]) for x in tl if x["observed"] is not None]
        pred = [(x["t"], x["predicted"]) for x in tl]
        parts.append(f"<h3>{esc(r['name'])} ({esc(r['cache'])})</h3><p>{esc(r['purpose'])}; "
                     f"{esc(_freeze_summary(r))}</p>")
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
        rows.append(f"<tr class='{cls}'><td>{html.escape(c['name'])}</td><td>{html.escape(_fmt(c['expected']))}</td>"
                    f"<td>{html.escape(_fmt(c['observed']))}</td><td>{html.escape(str(c['tolerance']))}</td>"
                    f"<td class='{cls}'>{word}</td>"
                    f"<td>{html.escape(c['explanation'])}</td></tr>")
    return "".join(rows) + "</table>"
