"""Judging a run directory and saying the verdict: the live session ends here once everything is
written, and `validate --report DIR` starts here. Both read the directory back (rundir/), judge it
(judge/, pure) and write the report (report/): a live verdict and a re-judged one cannot differ."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from validator import provenance
from validator.errors import EXIT_FAIL, EXIT_INFRA, EXIT_OK
from validator.judge.check import Check
from validator.judge.checkpoints import SERVED_MATCH_UNIT, SERVED_RETENTION
from validator.judge.compare import judge
from validator.judge.freezestate import LAUNCHED_ARGV
from validator.judge.quality_run import judge_quality
from validator.judge.startup import cross_check
from validator.judge.sweep import sweep_summary
from validator.judge.utilization import SERVED_CONCURRENCY
from validator.judge.verdict import counts_line
from validator.plan.record import PlanRecord
from validator.profile import from_dict
from validator.redact import redact
from validator.report.console import checks_lines
from validator.report.markdown import DEV_MODE_NOTE, dev_mode_of, quality_line
from validator.report.summary import build
from validator.report.write import write_all, write_bench_results
from validator.rundir.files import keep_original_report
from validator.rundir.quality import read_quality
from validator.rundir.rundata import load_runs
from validator.rundir.saved import Saved, read_saved
from validator.rundir.startup import StartupFacts
from validator.serve.argv import dev_mode_wanted


def show(text: str) -> None:
    """Standard output, with the one rule for secrets applied (validator.redact)."""
    print(redact(text))


def meta_of(argv, saved_profile: dict, startup: dict, record: PlanRecord) -> dict:
    return provenance.meta(
        argv=list(argv),
        profile_saved=saved_profile,
        startup=startup,
        vllm_version=startup.get("vllm_version"),
        platform_kind=record.platform.value,
    )


def startup_checks(saved: Saved, dev: bool) -> list[Check]:
    """The start-up cross-check from startup.json's facts; without them (the file or its facts
    missing), every check is there, `not measured`, saying so. `dev`: the saved profile asked for
    dev mode (a server kvgate started then had to tell its scheduler's limits)."""
    facts = saved.startup.get("facts")
    started_here = saved.schedule.server_started if saved.schedule else "argv" in saved.startup
    told = StartupFacts.from_json(facts) if isinstance(facts, dict) else StartupFacts()
    # facts a kvgate wrote before it read /server_info have none of its keys (a newer one writes them
    # all): the limits are not judged there, not made a missing reading of an old run
    older = isinstance(facts, dict) and not {"max_num_seqs", "server_config_json", "server_config_error"} & set(facts)
    if older:
        told.server_config_error = "startup.json was written by a kvgate that did not read /server_info"
    checks = cross_check(
        saved.record, told, started_here=started_here, config_required=started_here and dev and not older
    )
    why = saved.startup_missing or (None if isinstance(facts, dict) else "startup.json holds no start-up facts")
    return [replace(c, explanation=f"{why}: {c.explanation}") if why and c.passed is None else c for c in checks]


def with_server_word(record: PlanRecord, startup: dict) -> PlanRecord:
    """The plan with what the server and its launch said, from startup.json only: a key of that name
    in plan.json is no evidence (absent from startup.json: None), so a doctored plan.json cannot
    supply it."""
    facts = startup.get("facts")
    said = facts if isinstance(facts, dict) else {}
    return replace(
        record,
        shown={
            **record.shown,
            SERVED_RETENTION: said.get("prefix_cache_retention_interval"),  # judge/checkpoints.py
            SERVED_MATCH_UNIT: said.get("prefix_match_unit"),  # judge/checkpoints.py
            SERVED_CONCURRENCY: said.get("kv_cache_max_concurrency"),  # judge/utilization.py
            LAUNCHED_ARGV: startup.get("argv"),  # the step's budget: judge/freezestate.py
        },
    )


def judge_run_dir(run_dir: Path, meta: dict | None = None, rejudged: dict | None = None) -> dict:
    """Judge what run_dir holds and write the report (with its provenance, `meta`). The live session
    and `validate --report` both come here, after everything was written: a verdict is the
    directory's."""
    saved = read_saved(run_dir)
    # re-validated, so a run saved by an older kvgate gets today's defaults for new fields
    profile = from_dict({**saved.profile_values.get("", {}), **{k: v for k, v in saved.profile_values.items() if k}})
    runs = load_runs(run_dir, saved.schedule, profile.observe.freezes)
    facts = saved.startup.get("facts")
    blocks = facts.get("num_gpu_blocks") if isinstance(facts, dict) else None
    record = saved.record
    record = with_server_word(record, saved.startup)
    checks, figures = (
        judge(record, runs, profile.slo, profile.tolerances, blocks if isinstance(blocks, int) else None)
        if runs
        else ([], {})
    )
    quality = read_quality(run_dir)  # a quality A/B (validate --quality): its own checks
    q_checks, q_figures = judge_quality(quality, profile.quality) if quality is not None else ([], None)
    all_checks = startup_checks(saved, dev_mode_wanted(profile)) + checks + q_checks
    error = saved.startup_error
    if not error and not runs and quality is None:
        error = "no run was recorded"
    rep = build(
        record, saved.startup or None, runs, figures, all_checks, error, saved.profile_name, rejudged, saved.notes
    )
    rep["sweep"] = sweep_summary(runs, figures, record, profile.slo) if runs else None
    rep["quality"] = q_figures
    rep["meta"] = meta
    latency = {r.name: {"ttft": figures[r.name].ttft_ms, "itl": figures[r.name].itl_ms} for r in runs}
    write_all(run_dir, rep, latency)
    slo = {k: v for k, v in (("ttft", profile.slo.ttft_p99_ms), ("tpot", profile.slo.itl_p99_ms)) if v is not None}
    write_bench_results(run_dir, runs, profile.model.served_name or profile.model.path or "model", slo)
    return rep


def finish(rep: dict, run_dir: Path, as_json: bool) -> int:
    if as_json:
        show(json.dumps(rep, indent=1, default=str))
    else:
        lines = checks_lines(rep["checks"]) if rep["checks"] else []
        lines += [f"note: {note}" for note in rep.get("notes") or []]
        lines += [f"prompt-template audit ({r['name']}): {r['audit']['line']}" for r in rep["runs"] if r.get("audit")]
        if rep.get("sweep"):
            lines.append(f"sweep: {rep['sweep']['line']}")
        if rep.get("quality"):
            lines.append(f"quality: {quality_line(rep['quality'])}")
        lines.append(
            f"verdict: {rep['verdict']}"
            + (f" ({rep['error']})" if rep.get("error") else "")
            + f"; {counts_line(rep['counts'])}; report {run_dir / 'report.html'}"
        )
        if dev_mode_of(rep):
            lines.append(f"note: {DEV_MODE_NOTE}")
        if rep.get("rejudged"):
            lines.append(
                f"(judged again; the live run said {rep['rejudged']['original_verdict']}, kept in "
                f"{rep['rejudged']['original_report']})"
            )
        show("\n".join(lines))
    return {"pass": EXIT_OK, "fail": EXIT_FAIL, "inconclusive": EXIT_FAIL}.get(rep["verdict"], EXIT_INFRA)


def rejudge(run_dir: str, as_json: bool) -> int:
    """`validate --report DIR`: judge a saved run again, from the directory alone. The live run's
    report is kept next to the new one, never overwritten (the first report written in this
    directory is the original, however often it is judged again)."""
    d = Path(run_dir)
    saved = read_saved(d)  # the basics first: a directory that is not a run is refused before anything moves
    first = keep_original_report(d)
    rejudged = None
    if first is not None:
        rejudged = {
            "original_verdict": first.get("verdict"),
            "original_report": "report.original.json",
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    prof = {"name": saved.profile_name, "values": saved.profile_values}
    rep = judge_run_dir(
        d, meta_of(["--report", run_dir, *(["--json"] if as_json else [])], prof, saved.startup, saved.record), rejudged
    )
    return finish(rep, d, as_json)
