"""Summary statistics over records (derived later, never stored in the records)."""

from __future__ import annotations

import numpy as np

from loadgen.results.records import RequestRecord

PERCENTILES = (50, 90, 95, 99)


def describe(values_s) -> dict | None:
    """mean / p50 / p90 / p95 / p99 / max in milliseconds; None when nothing was measured."""
    if len(values_s) == 0:
        return None
    a = np.asarray(values_s, dtype=float) * 1e3
    out = {"count": int(a.size), "mean": float(a.mean())}
    for p, v in zip(PERCENTILES, np.percentile(a, PERCENTILES)):
        out[f"p{p}"] = float(v)
    out["max"] = float(a.max())
    return out


def summarize(records: list[RequestRecord], elapsed_s: float | None = None) -> dict:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    # every gap of every request, in one array (a list of floats costs 4x the memory)
    itl = np.concatenate([np.diff(np.asarray(r.chunk_times, dtype=float)) for r in ok]) if ok else np.empty(0)
    out_tokens = [r.output_tokens for r in ok if r.output_tokens is not None]
    errors: dict[str, int] = {}
    for r in failed:
        key = (r.error or f"HTTP {r.status}").split(":")[0]
        errors[key] = errors.get(key, 0) + 1
    s = {
        "requests": len(measured),
        "warmup_requests": len(records) - len(measured),
        "ok": len(ok),
        "failed": len(failed),
        "error_rate": (len(failed) / len(measured)) if measured else None,
        "errors": errors,
        "token_mismatches": sum(1 for r in measured if r.token_mismatch),
        "prompt_tokens": sum(r.prompt_tokens for r in ok if r.prompt_tokens is not None) if ok else None,
        "output_tokens": sum(out_tokens) if out_tokens else None,
        "ttft_ms": describe([r.ttft for r in ok]),
        "itl_ms": describe(itl),
        "tpot_ms": describe([t for r in ok if (t := r.tpot) is not None]),
        "e2e_ms": describe([r.e2e for r in ok]),
        "elapsed_s": elapsed_s,
    }
    if elapsed_s and elapsed_s > 0:
        s["request_throughput"] = len(ok) / elapsed_s
        s["output_token_throughput"] = (sum(out_tokens) / elapsed_s) if out_tokens else None
        s["chunks_per_s"] = sum(len(r.chunk_times) for r in measured) / elapsed_s
    return s


def format_summary(s: dict) -> str:
    lines = [
        f"requests {s['requests']} (ok {s['ok']}, failed {s['failed']}, warm-up {s['warmup_requests']})"
        + (f", error rate {s['error_rate']:.2%}" if s["error_rate"] is not None else "")
    ]
    if s["errors"]:
        lines.append("errors: " + ", ".join(f"{k} x{v}" for k, v in s["errors"].items()))
    if s["token_mismatches"]:
        lines.append(f"token count mismatches (asked vs served): {s['token_mismatches']}")
    if s.get("request_throughput") is not None:
        lines.append(
            f"throughput {s['request_throughput']:.2f} req/s, "
            + (f"{s['output_token_throughput']:.1f} output tok/s, " if s.get("output_token_throughput") else "")
            + f"elapsed {s['elapsed_s']:.2f} s"
        )
    lines.append(f"{'ms':<6}{'mean':>10}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}{'max':>10}")
    for name in ("ttft", "itl", "tpot", "e2e"):
        d = s[f"{name}_ms"]
        if d is None:
            lines.append(f"{name.upper():<6}{'not measured':>20}")
            continue
        lines.append(
            f"{name.upper():<6}" + "".join(f"{d[k]:>10.2f}" for k in ("mean", "p50", "p90", "p95", "p99", "max"))
        )
    return "\n".join(lines)
