"""One `validate` run, the pipeline in order: plan -> launch (or --url) -> start-up facts and
checks -> cold, warm and probe runs -> judge -> report.

Everything recorded goes to the run directory as it happens (plan.json, profile.json,
vllm.log, startup.json, runs/*, metrics.jsonl), so an interrupted or failed run keeps
what it saw. The judge always reads the runs back from that directory, live or with
`validate --report DIR`: the directory is the only contract between observing and judging,
so a live verdict and a re-judged one cannot differ by construction.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from validator import provenance
from validator.errors import EXIT_FAIL, EXIT_INFRA, EXIT_OK, InfraError, InputError
from validator.judge.compare import judge
from validator.judge.startup import cross_check
from validator.judge.summary import build
from validator.judge.verdict import counts_line, counts_of, verdict_of
from validator.plan.limits import Plan, make_plan
from validator.profile import Profile, from_dict
from validator.report.console import print_checks
from validator.report.markdown import DEV_MODE_NOTE, dev_mode_of
from validator.report.text import plan_text
from validator.report.write import write_all, write_bench_results
from validator.rundir.files import redacted, run_dir_for, write_json
from validator.rundir.rundata import load_runs
from validator.rundir.startup import StartupFacts
from validator.serve.argv import api_key_of, launch_spec, plan_record
from validator.serve.facts import server_facts, server_version
from validator.serve.launch import Server, ServerFailed, install_signal_handlers, run_loop


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What the command line asks of a session (the CLI builds it; nothing below reads argparse)."""

    argv: tuple[str, ...] = ()      # the command line, for the report's provenance (redacted there)
    url: str | None = None          # a server kvgate did not start
    out: str | None = None          # the run directory (new or empty)
    as_json: bool = False
    launch_only: bool = False


@dataclass(kw_only=True)
class Outcome:
    """What a session learned, filled as it goes; saved to startup.json and report.json."""

    startup: dict = field(default_factory=dict)
    startup_checks: list[dict] = field(default_factory=list)
    error: str | None = None
    rejudged: dict | None = None


def say(msg: str) -> None:
    print(f"[kvgate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_session(opts: RunOptions, profile: Profile, plan: Plan) -> int:
    url = opts.url.rstrip("/") if opts.url else None
    if url:
        _require_loopback(url)
        plan = _plan_for_server_version(url, profile, plan)
    record = plan_record(plan)
    if not plan.fits:
        print(json.dumps(record, indent=2) if opts.as_json else plan_text(record))
        say("the plan does not fit: not launching (exit 1)")
        return EXIT_FAIL
    spec = None if url else launch_spec(profile, plan)  # bad input is refused before anything is written
    run_dir = run_dir_for(opts.out, profile.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    saved_profile = {"name": profile.name, "values": redacted(profile.values)}
    write_json(run_dir / "plan.json", record)
    write_json(run_dir / "profile.json", saved_profile)
    install_signal_handlers()
    outcome = Outcome()
    code = EXIT_INFRA
    try:
        if url:
            outcome.startup = {"url": url}
            code = _with_server(opts, profile, record, run_dir, outcome, None, url)
        else:
            device = _check_device(plan) if plan.inp.platform == "gpu" else None
            server = Server(spec, run_dir, progress=say)
            try:
                server.start()
                outcome.startup = {"argv": server.saved_argv, "url": server.url, "device": device,
                                   "dev_mode": spec.env.get("VLLM_SERVER_DEV_MODE") == "1"}
                _save_startup(run_dir, outcome)  # now, so a launch that hangs or is stopped keeps its argv
                try:
                    server.wait_ready()
                except ServerFailed as e:
                    facts = e.facts or StartupFacts()
                    outcome.startup["facts"] = facts.to_json()
                    outcome.startup["refusal"] = _refusal(plan, facts)
                    raise
                code = _with_server(opts, profile, record, run_dir, outcome, server, server.url)
            finally:
                server.stop()
                say(f"vLLM stopped (pids {server.pids})")
    except InfraError as e:
        outcome.error = str(e)
        say(f"error: {e}")
        code = EXIT_INFRA
    except KeyboardInterrupt as e:  # Ctrl-C, or Terminated (SIGTERM/SIGHUP)
        outcome.error = f"interrupted ({type(e).__name__})"
        raise
    finally:
        _save_startup(run_dir, outcome)
        rep = None if opts.launch_only else judge_run_dir(
            run_dir, record, profile.name, profile.values, outcome,
            _meta(opts.argv, saved_profile, outcome, record))
    if opts.launch_only:
        return code
    rep_code = finish(rep, run_dir, opts.as_json)
    return EXIT_INFRA if code == EXIT_INFRA else rep_code


def _save_startup(run_dir: Path, outcome: Outcome) -> None:
    write_json(run_dir / "startup.json", {**outcome.startup, "checks": outcome.startup_checks,
                                          "error": outcome.error})


def _with_server(opts: RunOptions, profile: Profile, record: dict, run_dir: Path, outcome: Outcome,
                 server: Server | None, url: str) -> int:
    from validator.observe.runs import execute
    from validator.observe.schedule import plan_runs
    from validator.serve.startup_log import parse_log
    api_key = api_key_of(profile)
    facts = server_facts(url, api_key, parse_log(server.log_text()) if server else StartupFacts())
    outcome.startup["facts"] = facts.to_json()
    outcome.startup["vllm_version"] = server_version(url)
    checks = [c.to_json() for c in cross_check(record, facts, started_here=server is not None)]
    outcome.startup_checks = checks
    if opts.launch_only:
        verdict = verdict_of(checks, None)
        if opts.as_json:
            print(json.dumps({"verdict": verdict, "counts": counts_of(checks), "plan": record,
                              "startup": outcome.startup, "checks": checks, "run_dir": str(run_dir)},
                             indent=2, default=str))
        else:
            print_checks(checks)
            print(f"verdict: {verdict} ({counts_line({'checks': checks})}); run dir {run_dir}")
        return EXIT_OK if verdict == "pass" else EXIT_FAIL
    model = profile.get("model", "served_name") or facts.served_model or profile.get("model", "path")
    specs = plan_runs(record, profile)
    alive = server.alive if server else None
    run_loop(execute(specs, url, model, run_dir, profile, say, api_key=api_key, alive=alive))
    return EXIT_OK  # the verdict is decided by judge_run_dir


def _meta(argv, saved_profile: dict, outcome: Outcome, record: dict) -> dict:
    return provenance.meta(argv=list(argv), profile_saved=saved_profile, startup=outcome.startup,
                           vllm_version=outcome.startup.get("vllm_version"), platform_kind=record.get("platform", "gpu"))


def judge_run_dir(run_dir: Path, record: dict, profile_name: str, profile_values: dict, outcome: Outcome,
                  meta: dict | None = None) -> dict:
    """Judge the runs saved in run_dir and write the report (with its provenance, `meta`)."""
    runs = load_runs(run_dir)
    blocks = (outcome.startup.get("facts") or {}).get("num_gpu_blocks")
    checks, figures = judge(record, runs, profile_values, blocks) if runs else ([], {})
    all_checks = outcome.startup_checks + [c.to_json() for c in checks]
    error = outcome.error
    if not error and not runs:
        error = "no run was recorded"
    rep = build(record, outcome.startup or None, runs, figures, all_checks, error, profile_name,
                outcome.rejudged)
    rep["meta"] = meta
    latency = {r.name: {"ttft": figures[r.name]["ttft_ms"], "itl": figures[r.name]["itl_ms"]} for r in runs}
    write_all(run_dir, rep, latency)
    write_bench_results(run_dir, runs, profile_values)
    return rep


def finish(rep: dict, run_dir: Path, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rep, indent=1, default=str))
    else:
        if rep["checks"]:
            print_checks(rep["checks"])
        print(f"verdict: {rep['verdict']}" + (f" ({rep['error']})" if rep.get("error") else "")
              + f"; {counts_line(rep)}; report {run_dir / 'report.html'}")
        if dev_mode_of(rep):
            print(f"note: {DEV_MODE_NOTE}")
        if rep.get("rejudged"):
            print(f"(judged again; the live run said {rep['rejudged']['original_verdict']}, kept in "
                  f"{rep['rejudged']['original_report']})")
    return {"pass": EXIT_OK, "fail": EXIT_FAIL, "inconclusive": EXIT_FAIL}.get(rep["verdict"], EXIT_INFRA)


def rejudge(run_dir: str, as_json: bool) -> int:
    """`validate --report DIR`: judge a saved run again, from the directory alone."""
    d = Path(run_dir)
    try:
        record = json.loads((d / "plan.json").read_text())
        prof = json.loads((d / "profile.json").read_text())
    except FileNotFoundError as e:
        raise InputError(f"--report: {d} is not a kvgate run directory (no {Path(e.filename).name})") from None
    except ValueError as e:
        raise InputError(f"--report: {d}: unreadable JSON: {e}") from None
    startup = json.loads((d / "startup.json").read_text()) if (d / "startup.json").exists() else {}
    saved = prof["values"]
    # re-validated, so a run saved by an older kvgate gets today's defaults for new fields
    values = from_dict({**saved.get("", {}), **{k: v for k, v in saved.items() if k}}).values
    outcome = Outcome(startup={k: v for k, v in startup.items() if k not in ("checks", "error")})
    if startup.get("facts"):
        facts = StartupFacts.from_json(startup["facts"])
        outcome.startup_checks = [c.to_json() for c in cross_check(record, facts, started_here="argv" in startup)]
    # the live run's verdict is kept next to the new one, never overwritten (the first report
    # written in this directory is the original, however often it is judged again)
    old, original = d / "report.json", d / "report.original.json"
    if old.exists() and not original.exists():
        os.replace(old, original)
    try:
        first = json.loads(original.read_text()) if original.exists() else None
    except ValueError:
        first = None
    if first:
        outcome.error = first.get("error")
        outcome.rejudged = {"original_verdict": first.get("verdict"), "original_report": original.name,
                            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rep = judge_run_dir(d, record, prof["name"], values, outcome,
                        _meta(["--report", run_dir, *(["--json"] if as_json else [])], prof, outcome, record))
    return finish(rep, d, as_json)


def _plan_for_server_version(url: str, profile: Profile, plan: Plan) -> Plan:
    """A server kvgate did not start says which vLLM it runs (/version): on a GPU the plan follows
    that version's start-up accounting unless the profile names one."""
    if plan.inp.platform != "gpu" or profile.get("vllm", "version"):
        return plan
    version = server_version(url)
    if version is None or version.split("+")[0] == plan.inp.vllm_version.split("+")[0]:
        return plan
    try:
        new = make_plan(replace(plan.inp, vllm_version=version))
    except InputError:  # a version string the planner cannot read: keep the profile's
        return plan
    say(f"the server runs vLLM {version}: planning with its start-up accounting")
    return new


def _check_device(plan: Plan) -> dict | None:
    """On a GPU host: what nvidia-smi says, and a refusal (exit 3) before launching when the GPUs
    cannot give vLLM what it will request."""
    from validator.serve.gpu_device import check_free
    from validator.serve.launch import read_gpus
    seen = read_gpus()
    if seen is None:
        say("nvidia-smi not found: the GPUs are not checked before launch")
        return None
    gpus, apps = seen
    ranks = plan.inp.tensor_parallel_size * plan.inp.pipeline_parallel_size
    check_free(gpus, ranks, plan.ledger.get("budget_bytes") or 0, apps)
    return {"gpus": [g.to_json() for g in gpus[:ranks]], "other_processes": apps}


def _require_loopback(url: str) -> None:
    from loadgen.cli import UsageError, require_loopback  # one rule for both tools
    try:
        require_loopback(url)
    except UsageError as e:
        raise InputError(str(e)) from None


def _refusal(plan: Plan, facts: StartupFacts) -> dict:
    """When vLLM refuses to start, put what it said next to what the plan said."""
    said = facts.fatal_error or "no error line"
    say(f"vLLM said: {said}")
    if facts.refused_estimated_max_model_len is not None:
        say(f"vLLM's estimated maximum model length {facts.refused_estimated_max_model_len}; "
            f"the plan: max_model_len {plan.max_model_len}, fits={plan.fits}")
    return {"vllm_said": said, "vllm_estimated_max_model_len": facts.refused_estimated_max_model_len,
            "plan_fits": plan.fits, "plan_reasons": plan.reasons}
