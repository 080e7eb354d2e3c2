"""report.html, for a person doing an acceptance run: the verdict with its counts first, then what
needs attention (failed and unmeasured checks), the plan, predicted against observed for each run
with its chart, the memory ledger, latency, every check, and where the report came from. Units
people read (GiB, %, ms); the raw figures are in report.json, linked, never pasted."""

from __future__ import annotations

import html

from validator.judge.verdict import STATUS_WORD, counts_line
from validator.report import svg
from validator.report.markdown import DEV_MODE_NOTE, dev_mode_of, freeze_summary
from validator.report.numbers import fmt
from validator.report.qualityhtml import quality_html
from validator.report.sweephtml import STYLE as SWEEP_STYLE
from validator.report.sweephtml import sweep_html
from validator.units import GiB

esc = html.escape
ORDER = {"fail": 0, "not_measured": 1, "pass": 2, "not_judged": 3}
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1000px;margin:1.5em auto;color:#222;line-height:1.4}"
    "h1{margin-bottom:.2em}table{border-collapse:collapse;margin:.4em 0}"
    "td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:left;vertical-align:top}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".pass{color:#1a7f37}.fail{color:#c62828;font-weight:600}.inconclusive,.na{color:#a15c00}"
    ".error{color:#c62828}.muted{color:#666;font-size:13px}.note{background:#fff8e1;padding:6px 8px}"
    ".attention{border-left:4px solid #c62828;padding-left:10px}" + SWEEP_STYLE
)


def fmt_g(v) -> str:
    """A figure in a table of the page: with thousands separators."""
    return fmt(v, grouped=True)


def gib(n) -> str:
    if n is None:
        return "—"
    return f"{n / GiB:,.2f} GiB" if abs(n) >= GiB / 10 else f"{n / 1024**2:,.1f} MiB"


def ms(v) -> str:
    return "—" if v is None else f"{v:,.1f} ms"


def pct(v) -> str:
    return "—" if v is None else f"{v:.1%}"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    th = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>" if any(head) else ""
    body = "".join("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='{cls}'>{th}{body}</table>"


def _checks(checks: list[dict], cls: str = "checks") -> str:
    rows = []
    for c in sorted(checks, key=lambda c: ORDER[c["status"]]):
        st = c["status"]
        k = {"pass": "pass", "fail": "fail"}.get(st, "na")
        rows.append(
            [
                f"<td class='name'>{esc(c['name'])}</td>",
                esc(fmt(c["expected"])),
                esc(fmt(c["observed"])),
                esc(str(c.get("tolerance") or "")),
                f"<td class='{k}'>{STATUS_WORD[st]}</td>",
                esc(c.get("explanation") or ""),
            ]
        )
    return _table(["check", "expected", "observed", "tolerance", "result", "why"], rows, cls)


def _header(rep: dict) -> list[str]:
    v = rep["verdict"]
    meta = rep.get("meta") or {}
    out = [
        f"<h1>kvgate: <span class='{v}'>{v.upper()}</span> — {esc(rep['profile'])}</h1>",
        f"<p><b>{esc(counts_line(rep['counts']))}</b></p>",
    ]
    if rep.get("error"):
        out.append(f"<p class='error'>error: {esc(rep['error'])}</p>")
    bits = [
        meta.get("date_utc"),
        meta.get("device"),
        meta.get("vllm_version") and f"vLLM {meta['vllm_version']}",
        meta.get("kvgate_version") and f"kvgate {meta['kvgate_version']}",
    ]
    out.append(
        "<p class='muted'>"
        + esc(" · ".join(b for b in bits if b))
        + " · raw figures: <a href='report.json'>report.json</a>, <a href='summary.md'>summary.md</a></p>"
    )
    if dev_mode_of(rep):
        out.append(f"<p class='note'>{esc(DEV_MODE_NOTE)}</p>")
    for note in rep.get("notes") or []:
        out.append(f"<p class='note'>{esc(note)}</p>")
    attention = [c for c in rep["checks"] if c["status"] in ("fail", "not_measured")]
    if attention:
        out.append(
            f"<section class='attention'><h2>Needs attention ({len(attention)})</h2>"
            + _checks(attention, "attention")
            + "</section>"
        )
    return out


def _plan(p: dict) -> str:
    L = p["ledger"]
    rows = [
        ["max_model_len", f"<td class='n'>{fmt_g(p['max_model_len'])} tokens</td>"],
        ["max_num_seqs", f"<td class='n'>{fmt_g(p['max_num_seqs'])}</td>"],
        ["KV per token", f"<td class='n'>{p['kv_bytes_per_token'] / 1024:,.1f} KiB</td>"],
        ["KV cache", f"<td class='n'>{gib(L.get('kv_cache_bytes'))}</td>"],
        [
            "blocks",
            f"<td class='n'>{fmt_g(p['num_blocks'])} of {p['block_size']} tokens "
            f"({fmt_g(p['usable_blocks'])} usable)</td>",
        ],
        ["blocks per sequence at the limit", f"<td class='n'>{fmt_g(p['blocks_per_seq'])}</td>"],
        ["KV at the limits", f"<td class='n'>{gib(p.get('kv_bytes_at_limits'))}</td>"],
        ["fits", "yes" if p["fits"] else "<b class='fail'>no</b>"],
    ]
    args = " ".join(p.get("vllm_args") or [])
    return (
        "<h2>Plan</h2>"
        + _table(["", ""], rows)
        + (f"<p class='muted'>vLLM flags: <code>{esc(args)}</code></p>" if args else "")
    )


def _run(r: dict, checks: list[dict]) -> list[str]:
    c, s, kv, pre = r["client"], r["server"], r["kv"], r["prefix"]
    fz = [f for f in r.get("freezes") or [] if f.get("settled")]

    def lat(d, key):
        return ms((d or {}).get(key))

    def bucket(x):
        b = (s.get(x) or {}).get("p99_bucket")
        return "—" if not b else f"{b[0] * 1e3:,.0f}–{b[1] * 1e3:,.0f} ms"

    rows = [
        ["requests ok", f"{fmt_g(c['requests'])}", f"{fmt_g(c['ok'])} ({fmt_g(c['failed'])} failed)"],
        [
            "KV blocks at each freeze (exact)",
            ", ".join(fmt_g(f.get("expected")) for f in fz) or "—",
            ", ".join(fmt_g(f.get("observed")) for f in fz) or "—",
        ],
        ["KV blocks, sampled peak (bound)", fmt_g(kv.get("kv_upper_bound")), fmt_g(kv.get("kv_observed_peak"))],
        ["prefix-cache hit tokens", fmt_g(pre.get("predicted_hit_tokens")), fmt_g(pre.get("observed_hit_tokens"))],
        [
            "prompt tokens (prefix-cache queries)",
            fmt_g(pre.get("prompt_tokens_sent")),
            fmt_g(pre.get("query_tokens_observed")),
        ],
        ["preemptions", "0", fmt_g(kv.get("preemptions"))],
        ["TTFT p50 / p99 (client)", "—", f"{lat(c.get('ttft_ms'), 'p50')} / {lat(c.get('ttft_ms'), 'p99')}"],
        ["TTFT p99 (server histogram bucket)", "—", bucket("ttft_s")],
        [
            "ITL p50 / p99 (client)",
            ms(r.get("decode_step_floor_ms")) + " floor" if r.get("decode_step_floor_ms") else "—",
            f"{lat(c.get('itl_ms'), 'p50')} / {lat(c.get('itl_ms'), 'p99')}",
        ],
    ]
    mine = [x for x in checks if x["name"].startswith(r["name"] + ".")]
    bad = sum(x["status"] in ("fail", "not_measured") for x in mine)
    title = (
        f"<h3>{esc(r['name'])} — {esc(r['purpose'])}</h3><p class='muted'>cache {esc(r['cache'])}"
        f" ({esc(r['isolation'] or 'as left')}), {esc(freeze_summary(r))}; {len(mine)} checks"
        + (f", <span class='fail'>{bad} need attention</span>" if bad else ", all passed")
        + (", <span class='fail'>cut short</span>" if r["interrupted"] else "")
        + "</p>"
    )
    out = [title, _table(["", "predicted", "observed"], rows)]
    a = r.get("audit")
    if a:
        t = a.get("text_at_break")
        out.append(
            f"<p><b>Prompt-template audit:</b> {esc(a['line'])}"
            + (f" — <code>…{esc(t['before'])}</code>|<code>{esc(t['after'])}…</code>" if t else "")
            + "</p>"
        )
        out.append(svg.prompt_bars(f"Prompts of {r['name']}: blocks hit and own", a["bars"], a.get("block_size") or 0))
    tl = r["kv_timeline"]
    if r["measured"] and tl:
        series = [
            ("predicted (client view)", [(x["t"], x["predicted"]) for x in tl]),
            (
                "sampled (kv_cache_usage_perc x usable)",
                [(x["t"], x["observed"]) for x in tl if x["observed"] is not None],
            ),
        ]
        at = [f for f in fz if f["t"] is not None]
        markers: tuple[str, ...] = ()
        if at:
            series += [
                ("at a freeze: observed (exact)", [(f["t"], f["observed"]) for f in at if f["observed"] is not None]),
                ("at a freeze: predicted", [(f["t"], f["expected"]) for f in at if f.get("expected") is not None]),
            ]
            markers = ("at a freeze: observed (exact)", "at a freeze: predicted")
        out.append(
            svg.lines(
                f"KV blocks in use: {r['name']}",
                series,
                "seconds since the run started",
                "blocks",
                hline=("usable blocks", kv["usable_blocks"]),
                step=True,
                markers=markers,
            )
        )
    return out


def _ledger(p: dict) -> list[str]:
    L = p["ledger"]
    pool = p["num_blocks"] * p["bytes_per_block"]
    keys: tuple[str, ...]
    if L.get("budget_bytes"):  # GPU: everything the engine holds against the budget
        keys, budget, title = (
            ("weights_bytes", "workspace_bytes", "kv_bytes_at_limits", "null_block_bytes"),
            L["budget_bytes"],
            "GPU memory budget",
        )
    else:  # KV given directly: the pool only
        keys, budget, title = ("kv_bytes_at_limits", "null_block_bytes"), pool, "KV pool"
    unit, div = ("GiB", GiB) if budget >= GiB else ("MiB", 1024**2)
    parts = [(k.replace("_bytes", "").replace("_", " "), L[k] / div) for k in keys if L.get(k)]
    if (L.get("kv_headroom_bytes") or 0) > 0:
        parts.append(("KV headroom", L["kv_headroom_bytes"] / div))
    src = L.get("sources") or {}
    rows = [
        [esc(k.replace("_bytes", "").replace("_", " ")), f"<td class='n'>{gib(v)}</td>", esc(src.get(k, ""))]
        for k, v in L.items()
        if k.endswith("_bytes") and isinstance(v, (int, float))
    ]
    if L.get("gpu_memory_utilization") is not None:
        rows.insert(0, ["gpu memory utilization", f"<td class='n'>{pct(L['gpu_memory_utilization'])}</td>", ""])
    return [
        "<h2>Memory ledger</h2>",
        svg.stacked_bar(f"Memory ledger: {title}", parts, budget / div, unit),
        _table(["term", "size", "source"], rows),
    ]


def report_html(rep: dict, latency_values: dict | None = None) -> str:
    latency_values = latency_values or {}
    p = rep["plan"]
    parts = _header(rep)
    parts.append(_plan(p))
    parts += sweep_html(rep.get("sweep"))
    parts += quality_html(rep.get("quality"))
    if rep["runs"]:
        parts.append("<h2>Predicted vs observed</h2>")
        for r in rep["runs"]:
            parts += _run(r, rep["checks"])
    parts += _ledger(p)
    by_name = {r["name"]: r for r in rep["runs"]}
    lat = []
    for metric, label in (("ttft", "TTFT (ms)"), ("itl", "ITL (ms)")):
        names = [n for n in ("cold", "warm", "latency") if n in by_name]
        series = [(n, latency_values.get(n, {}).get(metric, [])) for n in names]
        if any(v for _, v in series):
            lat.append(svg.cdf(f"{label}: {' vs '.join(names)}", series, label))
    if lat:
        parts += [f"<h2>Latency: {' vs '.join(names)}</h2>", *lat]
    parts.append(f"<h2>All checks ({len(rep['checks'])})</h2>" + _checks(rep["checks"]))
    meta = rep.get("meta") or {}
    if meta:
        rows = [
            [esc(k.replace("_", " ")), esc(" ".join(v) if isinstance(v, list) else fmt(v))] for k, v in meta.items()
        ]
        parts.append("<h2>Provenance</h2>" + _table(["", ""], rows))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>kvgate {esc(rep['verdict'])}: "
        f"{esc(rep['profile'])}</title><style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )
