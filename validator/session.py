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
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from loadgen import net
from loadgen.safefile import make_dirs
from validator.errors import EXIT_FAIL, EXIT_INFRA, EXIT_OK, InfraError, InputError
from validator.judge.startup import cross_check, kv_shortfall
from validator.judge.verdict import counts_line, counts_of, verdict_of
from validator.judging import finish, judge_run_dir, meta_of, show
from validator.observe.dataset import session_runs
from validator.observe.schedule import schedule_of
from validator.plan.cpu_serving import cpu_cannot_serve
from validator.plan.limits import make_plan
from validator.plan.record import PlanRecord, Platform
from validator.plan.result import Plan
from validator.profile import Profile
from validator.redact import redact
from validator.report.console import checks_lines
from validator.report.text import plan_text
from validator.rundir.files import redacted, run_dir_for, write_json, write_plan
from validator.rundir.startup import StartupFacts
from validator.serve.argv import api_key_of, dev_mode_wanted, launch_spec, plan_record
from validator.serve.facts import model_name, server_facts, server_version
from validator.serve.launch import Server, ServerFailed, install_signal_handlers, run_loop
from validator.sweeping import sweep_bisection


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What the command line asks of a session (the CLI builds it; nothing below reads argparse)."""

    argv: tuple[str, ...] = ()  # the command line, for the report's provenance (redacted there)
    url: str | None = None  # a server kvgate did not start
    out: str | None = None  # the run directory (new or empty)
    as_json: bool = False
    launch_only: bool = False


@dataclass(kw_only=True)
class Outcome:
    """What a session learned, filled as it goes; saved to startup.json and report.json."""

    startup: dict = field(default_factory=dict)
    startup_checks: list[dict] = field(default_factory=list)
    error: str | None = None


def say(msg: str) -> None:
    print(redact(f"[kvgate {time.strftime('%H:%M:%S')}] {msg}"), file=sys.stderr, flush=True)


def run_session(opts: RunOptions, profile: Profile, plan: Plan) -> int:
    if not opts.url and not opts.launch_only and (why := cpu_cannot_serve(plan.inp, plan.layout)):
        raise InputError(why)  # the engine would start, then die at its first prefill (plan/cpu_serving.py)
    if profile.quality.candidate_kv_cache_dtype:
        if profile.sweep.steps is not None:
            raise InputError("--quality: the A/B replaces the load runs, as --sweep does; ask for one of the two")
        from validator.abtest import run_quality

        return run_quality(opts, profile, plan, say)
    url = opts.url.rstrip("/") if opts.url else None
    pin = None
    if url:
        pin = _pin(url)  # resolved once: everything connects to what was checked
        plan = _plan_for_server_version(url, profile, plan, pin)
    record = plan_record(plan, profile)
    if not plan.fits:
        show(json.dumps(record.to_json(), indent=2) if opts.as_json else plan_text(record.to_json()))
        say("the plan does not fit: not launching (exit 1)")
        return EXIT_FAIL
    # bad input is refused before anything is written: the profile's flags (plan_record, with --url
    # too), the launch, and the runs the session will make
    spec = None if url else launch_spec(profile, plan)
    specs = [] if opts.launch_only else session_runs(record, profile)
    schedule = schedule_of(specs, server_started=url is None, freezes=profile.observe.freezes)
    run_dir = run_dir_for(opts.out, profile.name)
    make_dirs(run_dir)
    saved_profile = {"name": profile.name, "values": redacted(profile.values)}
    write_plan(run_dir, record, schedule)  # before the first run: what the directory must hold
    write_json(run_dir / "profile.json", saved_profile)
    install_signal_handlers()
    outcome = Outcome()
    code = EXIT_INFRA
    judged = not opts.launch_only
    try:
        if url:
            outcome.startup = {"url": net.redact_url(url)}
            assert pin is not None
            code = _with_server(opts, profile, record, specs, run_dir, outcome, None, url, pin)
        else:
            assert spec is not None  # no --url: the launch was planned above
            device = _check_device(plan) if plan.inp.platform == "gpu" else None
            server = Server(spec, run_dir, progress=say)
            try:
                server.start()
                outcome.startup = {
                    "argv": server.saved_argv,
                    "url": server.url,
                    "device": device,
                    "dev_mode": spec.env.get("VLLM_SERVER_DEV_MODE") == "1",
                }
                _save_startup(run_dir, outcome)  # now, so a launch that hangs or is stopped keeps its argv
                try:
                    server.wait_ready()
                except ServerFailed as e:
                    facts = e.facts or StartupFacts()
                    outcome.startup["facts"] = facts.to_json()
                    outcome.startup["refusal"] = _refusal(plan, facts)
                    raise
                code = _with_server(
                    opts, profile, record, specs, run_dir, outcome, server, server.url, _pin(server.url)
                )
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
    except InputError as e:  # found at the server (a name it does not serve, ...): one line, no run, no report
        outcome.error = f"input: {e}"
        judged = False
        raise
    finally:
        _save_startup(run_dir, outcome)
        if judged:
            say("judging the runs")
            # from the directory alone, as `validate --report` does: the two cannot differ
            rep = judge_run_dir(run_dir, meta=meta_of(opts.argv, saved_profile, outcome.startup, record))
    if opts.launch_only:
        return code
    rep_code = finish(rep, run_dir, opts.as_json)
    return EXIT_INFRA if code == EXIT_INFRA else rep_code


def _save_startup(run_dir: Path, outcome: Outcome) -> None:
    write_json(run_dir / "startup.json", {**outcome.startup, "checks": outcome.startup_checks, "error": outcome.error})


def _with_server(
    opts: RunOptions,
    profile: Profile,
    record: PlanRecord,
    specs: list,
    run_dir: Path,
    outcome: Outcome,
    server: Server | None,
    url: str,
    pin: net.Pin,
) -> int:
    from validator.observe.runs import execute
    from validator.serve.startup_log import parse_log

    api_key = api_key_of(profile)
    facts = server_facts(
        url,
        api_key,
        parse_log(server.log_text()) if server else StartupFacts(),
        want=profile.model.served_name,
        pin=pin,
    )
    outcome.startup["facts"] = facts.to_json()
    if (facts.engines or 1) > 1:  # a data-parallel server: one KV pool, max_num_seqs and series per engine
        where, fix = ("vllm.extra_args / vllm.env", "start") if server else ("--url", "point it at")
        raise InputError(
            f"{where}: the server runs {facts.engines} engines (vllm:cache_config_info), each with its own KV "
            f"cache; kvgate plans and judges one engine's: {fix} a server of one engine"
        )
    model = model_name(profile, facts, url)  # before any load: a name the server does not serve is bad input
    outcome.startup["vllm_version"] = server_version(url, pin)
    checks = cross_check(
        record, facts, started_here=server is not None, config_required=server is not None and dev_mode_wanted(profile)
    )
    outcome.startup_checks = [c.to_json() for c in checks]
    if opts.launch_only:
        verdict = verdict_of(checks, None)
        if opts.as_json:
            show(
                json.dumps(
                    {
                        "verdict": verdict,
                        "counts": counts_of(checks),
                        "plan": record.to_json(),
                        "startup": outcome.startup,
                        "checks": outcome.startup_checks,
                        "run_dir": str(run_dir),
                    },
                    indent=2,
                    default=str,
                )
            )
        else:
            show(
                "\n".join(checks_lines(outcome.startup_checks)) + f"\nverdict: {verdict} "
                f"({counts_line(counts_of(checks))}); run dir {run_dir}"
            )
        return EXIT_OK if verdict == "pass" else EXIT_FAIL
    alive = server.alive if server else None
    if any(s.pending is not None for s in specs):  # a dataset: its prompts made exact by the server
        from validator.observe.dataset import resolve_pending

        run_loop(resolve_pending(specs, url, model, api_key, pin, say))
        # before the first run, with the counts the runs will send
        write_plan(
            run_dir, record, schedule_of(specs, server_started=server is not None, freezes=profile.observe.freezes)
        )
    memory = None
    if server is not None:
        from validator.serve.memory import nvml_used, rss_of

        # a GPU's memory only through NVML (without it: not measured), never the host RSS in its place
        memory = nvml_used() if record.platform is Platform.GPU else rss_of(server.processes)
    more = sweep_bisection(profile, record, specs, run_dir, say, server_started=server is not None)
    run_loop(
        execute(
            specs, url, model, run_dir, profile, say, api_key=api_key, alive=alive, pin=pin, more=more, memory=memory
        )
    )
    return EXIT_OK  # the verdict is decided by judge_run_dir


def _plan_for_server_version(url: str, profile: Profile, plan: Plan, pin: net.Pin) -> Plan:
    """A server kvgate did not start says which vLLM it runs (/version): on a GPU the plan follows
    that version's start-up accounting unless the profile names one."""
    if plan.inp.platform != "gpu" or profile.vllm.version:
        return plan
    version = server_version(url, pin)
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


def _pin(url: str) -> net.Pin:
    try:
        return net.pin(url)  # one rule for both tools
    except net.NotLoopback as e:
        raise InputError(str(e)) from None


def _refusal(plan: Plan, facts: StartupFacts) -> dict:
    """When vLLM refuses to start, put what it said next to what the plan said."""
    said = facts.fatal_error or "no error line"
    shortfall = kv_shortfall(plan.ledger, facts)
    if shortfall:  # the headline: the log's negative "Available KV cache memory", term by term
        say(shortfall)
    say(f"vLLM said: {said}")
    if facts.refused_estimated_max_model_len is not None:
        say(
            f"vLLM's estimated maximum model length {facts.refused_estimated_max_model_len}; "
            f"the plan: max_model_len {plan.max_model_len}, fits={plan.fits}"
        )
    return {
        "vllm_said": said,
        "kv_shortfall": shortfall,
        "vllm_estimated_max_model_len": facts.refused_estimated_max_model_len,
        "plan_fits": plan.fits,
        "plan_reasons": plan.reasons,
    }
