"""summary.md, and the number formatting shared by the renderings."""

from __future__ import annotations

import re

from validator.errors import one_line
from validator.judge.verdict import STATUS_WORD, counts_line
from validator.report.numbers import fmt, slo_word

_MD_SPECIAL = re.compile(r"([\\`*_\[\]{}()#+!|<>~-])")


def md(value) -> str:
    """Text from a run directory or a server as Markdown shows it: one line, every character
    Markdown would act on escaped (a name holding a newline and '# kvgate: PASS' stays text)."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(fmt(value)))


def checks_table(checks: list[dict]) -> str:
    rows = ["| check | expected | observed | tolerance | result |", "|---|---|---|---|---|"]
    for c in checks:
        st = c["status"]
        res = f"**{STATUS_WORD[st]}**" if st == "fail" else STATUS_WORD[st]
        rows.append(f"| {md(c['name'])} | {md(c['expected'])} | {md(c['observed'])} | {md(c['tolerance'])} | {res} |")
    return "\n".join(rows)


DEV_MODE_NOTE = (
    "vLLM ran in dev mode (VLLM_SERVER_DEV_MODE=1, for freeze-frames and the cache reset): its "
    "/pause, /sleep and /collective_rpc routes are not guarded by the API key; kvgate allows it only "
    "on a loopback address"
)


def dev_mode_of(rep: dict) -> bool:
    return bool((rep.get("startup") or {}).get("dev_mode"))


def summary_md(rep: dict) -> str:
    p = rep["plan"]
    failed = [c for c in rep["checks"] if c["passed"] is False]
    lines = [f"# kvgate: {rep['verdict'].upper()} ({md(rep['profile'])})", ""]
    if rep.get("error"):
        lines += [f"**error:** {md(rep['error'])}", ""]
    if dev_mode_of(rep):
        lines += [f"note: {DEV_MODE_NOTE}", ""]
    lines += [f"note: {md(n)}" for n in rep.get("notes") or []]
    lines += [
        f"plan: {p['max_num_seqs']} sequences x {p['max_model_len']:,} tokens, {p['num_blocks']:,} blocks of "
        f"{p['block_size']} ({p['usable_blocks']:,} usable), {p['kv_bytes_per_token']:,} B/token",
        "",
    ]
    for r in rep["runs"]:
        c = r["client"]
        ttft = c["ttft_ms"]["p99"] if c.get("ttft_ms") else None
        itl = c["itl_ms"]["p50"] if c.get("itl_ms") else None
        floor = r.get("decode_step_floor_ms")
        lines.append(
            f"- **{md(r['name'])}** ({md(r['cache'])}, cache {md(r['isolation'] or 'as left')}): "
            f"{c['ok']}/{c['requests']} ok, {md(freeze_summary(r))}, sampled KV peak "
            f"{fmt(r['kv']['kv_observed_peak'])} (bound {fmt(r['kv']['kv_upper_bound'])}) blocks, prefix hits "
            f"{fmt(r['prefix']['observed_hit_tokens'])} observed / "
            f"{fmt(r['prefix']['predicted_hit_tokens'])} predicted, TTFT p99 {fmt(ttft)} ms, ITL p50 "
            f"{fmt(itl)} ms"
            + (f" (decode-step floor {floor:.2f} ms)" if floor is not None else "")
            + (" — cut short" if r["interrupted"] else "")
        )
        if r.get("audit"):
            t = r["audit"].get("text_at_break")
            lines.append(
                f"  - prompt-template audit: {md(r['audit']['line'])}"
                + (f" (`…{md(t['before'])}` | `{md(t['after'])}…`)" if t else "")
            )
    sw = rep.get("sweep")
    if sw:
        lines += ["", f"Capacity sweep: {md(sw['line'])}", "", _sweep_table(sw["steps"])]
    if rep.get("quality"):
        lines += ["", f"KV cache quality: {md(quality_line(rep['quality']))}"]
    missing = [c for c in rep["checks"] if c["status"] == "not_measured"]
    lines += ["", checks_table(rep["checks"]), ""]
    if failed:
        lines.append("Failed: " + ", ".join(md(c["name"]) for c in failed))
    if missing:
        lines.append("Not measured: " + ", ".join(md(c["name"]) for c in missing))
    lines.append(f"**{rep['verdict']}**: {counts_line(rep['counts'])}.")
    return "\n".join(lines) + "\n"


def _sweep_table(rows: list[dict]) -> str:
    head = (
        "| in flight | running (predicted / at freeze) | waiting | preemptions | out tok/s | goodput req/s "
        "| TTFT p99 ms | queue ms | peak memory GiB | SLOs |"
    )
    out = [head, "|" + "---|" * 10]
    for r in rows:
        out.append(
            f"| {fmt(r['n'])} | {fmt(r['admitted_predicted'])}"
            f"{' (not judged)' if r.get('admission_judged') is False else ''} / {fmt(r['running_at_freeze'])} | "
            f"{fmt(r['waiting_at_freeze'])} | {fmt(r['preemptions'])} | {fmt(r['output_tokens_per_s'])} | "
            f"{fmt(r.get('goodput_requests_per_s'))} | {fmt(r['ttft_p99_ms'])} | {fmt(r['queue_mean_ms'])} | "
            f"{fmt(r.get('peak_server_memory_gib'))} | {slo_word(r)} |"
        )
    return "\n".join(out)


def freeze_summary(r: dict) -> str:
    fz = r.get("freezes") or []
    if r.get("freeze_note"):
        return f"no freezes ({r['freeze_note']})"
    if not fz:
        return "no freezes"
    return (
        f"{sum(1 for f in fz if f['settled'])} freeze(s) at "
        + ", ".join(f"{fmt(f['observed'])}" for f in fz)
        + " blocks"
    )


def quality_line(qf: dict) -> str:
    def g(v):
        return "not measured" if v is None else f"{v:.4g}"

    return (
        f"reference vs {qf.get('candidate_kv_cache_dtype')} on {qf['prompts']} prompts: control "
        f"{'identical' if qf['control_identical'] else 'NOT identical (A/B not judged)'}, identical outputs "
        f"{g(qf['ab_exact_match'])}, top-1 agreement {g(qf['top1_agreement'])}, mean |delta logprob| "
        f"{g(qf['mean_abs_logprob_delta'])}, first divergence in {qf['first_divergence']['count']} prompts"
    )
