"""One `validate` run: plan -> launch (or --url) -> start-up cross-check -> cold, warm and
probe runs -> checks -> verdict and report.

Everything recorded goes to the run directory as it happens (plan.json, profile.json,
vllm.log, startup.json, runs/*, metrics.jsonl), so an interrupted or failed run keeps
what it saw, and `validate --report DIR` can judge it again without a server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from validator import report
from validator.errors import EXIT_FAIL, EXIT_INFRA, EXIT_OK, InfraError, InputError
from validator.launch import (LaunchSpec, Server, ServerFailed, install_signal_handlers, validate_env,
                             validate_extra_args)
from validator.render import plan_text
from validator.startup import StartupFacts, cross_check, parse_cache_config_info, parse_log


def _say(msg: str) -> None:
    print(f"[kvgate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def safe_name(name: str) -> str:
    """A profile name as one path component: letters, digits, '.', '_' and '-' only, no leading dot."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".") or "profile"
    return clean[:80]


def run_dir_for(args, profile) -> Path:
    """--out, which must be new or empty (a run never mixes with another's records), else a fresh
    directory under runs/ named after the profile."""
    if args.out:
        out = Path(args.out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"--out: {out} exists and is not an empty directory; give a new one "
                             "(kvgate never mixes two runs' records)")
        return out
    base = Path("runs") / f"{safe_name(profile.name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


SECRET_KEYS = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)


def redacted(values: dict) -> dict:
    """The profile as saved in the run directory: secret-looking environment values replaced."""
    out = {s: dict(f) for s, f in values.items()}
    env = out.get("vllm", {}).get("env") or {}
    out["vllm"]["env"] = {k: ("<redacted>" if SECRET_KEYS.search(k) else v) for k, v in env.items()}
    return out


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def http_get(url: str, timeout: float = 5.0, api_key: str | None = None) -> str:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode(errors="replace")


def server_facts(base_url: str, api_key: str | None, facts: StartupFacts | None = None) -> StartupFacts:
    """What a running server says: /metrics (cache_config_info) and /v1/models (max_model_len)."""
    f = facts or StartupFacts()
    try:
        parse_cache_config_info(http_get(base_url + "/metrics"), f)
    except (urllib.error.URLError, OSError) as e:
        raise InfraError(f"cannot read {base_url}/metrics: {e}") from None
    try:
        models = json.loads(http_get(base_url + "/v1/models", api_key=api_key))
        data = models.get("data") or []
        if data and isinstance(data[0].get("max_model_len"), int):
            f.max_model_len = data[0]["max_model_len"]
            f.served_model = data[0].get("id")
        else:
            f.models_error = "GET /v1/models: no model with a max_model_len"
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):  # every request of the load would be refused the same way
            raise InputError(f"vllm.api_key_env: the server refused {'the key' if api_key else 'a request without a key'}"
                             f" (HTTP {e.code} from /v1/models); name the environment variable that holds its "
                             "API key") from None
        f.models_error = f"GET /v1/models: HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as e:
        f.models_error = f"GET /v1/models: {type(e).__name__}: {e}"[:200]
    return f


_WORD = {"pass": "pass", "fail": "FAIL", "not_measured": "not measured", "not_judged": "not judged"}


def print_checks(checks: list[dict]) -> None:
    w = max(len(c["name"]) for c in checks)
    print(f"{'check':<{w}}  {'expected':>22}  {'observed':>22}  result")
    for c in checks:
        res = _WORD[report.status_of(c)]
        print(f"{c['name']:<{w}}  {report._fmt(c['expected'])[:22]:>22}  {report._fmt(c['observed'])[:22]:>22}  {res}")
    # what needs attention, repeated last so it is the first thing a reader sees
    for st in ("fail", "not_measured"):
        for c in checks:
            if report.status_of(c) == st:
                print(f"{_WORD[st]}: {c['name']}: expected {report._fmt(c['expected'])}, observed "
                      f"{report._fmt(c['observed'])} ({c['explanation']})")


def launch_spec(profile, plan) -> LaunchSpec:
    g = profile.get
    extra = g("vllm", "extra_args") or []
    validate_extra_args(extra)
    api_key = _api_key(profile)
    env = g("vllm", "env") or {}
    validate_env(env)
    dev = dev_mode_wanted(profile)
    if dev and not _is_loopback_host(g("vllm", "host")):
        raise InputError(f"vllm.host: {g('vllm', 'host')} is not a loopback address, and dev mode (freeze-frames, "
                         "prefix-cache reset) opens routes vLLM's API key does not guard; use 127.0.0.1, or set "
                         "observe.freezes: false")
    return LaunchSpec(
        model=g("model", "path"), served_name=g("model", "served_name"), vllm_args=list(plan.vllm_args),
        env={**plan.vllm_env, **({"VLLM_SERVER_DEV_MODE": "1"} if dev else {}), **env},
        extra_args=extra, python=g("vllm", "python"), command=g("vllm", "command"), host=g("vllm", "host"),
        port=g("vllm", "port"), api_key=api_key, startup_timeout_s=g("vllm", "startup_timeout_s"),
        nice=g("vllm", "nice"), cpus=g("vllm", "cpus"))


def dev_mode_wanted(profile) -> bool:
    """Dev mode only when a feature needs it: freeze-frames (and with them the cache reset; without
    it the cold run is isolated by a fresh salt)."""
    return bool(profile.get("observe", "freezes"))


def _is_loopback_host(host: str) -> bool:
    """The same rule as the load generator's: every address the host resolves to is loopback."""
    from loadgen.cli import UsageError, require_loopback
    try:
        require_loopback(f"http://{'[' + host + ']' if ':' in host and not host.startswith('[') else host}:80")
        return True
    except UsageError:
        return False


def _plan_for_server_version(url: str, profile, plan):
    """A server kvgate did not start says which vLLM it runs (/version): on a GPU the plan follows
    that version's start-up accounting unless the profile names one."""
    if plan.inp.platform != "gpu" or profile.get("vllm", "version"):
        return plan
    try:
        version = json.loads(http_get(url + "/version")).get("version")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return plan
    if not isinstance(version, str) or version.split("+")[0] == plan.inp.vllm_version.split("+")[0]:
        return plan
    from dataclasses import replace

    from validator.gpu_memory import parse_version
    from validator.plan import make_plan
    try:
        parse_version(version)
    except InputError:
        return plan
    _say(f"the server runs vLLM {version}: planning with its start-up accounting")
    return make_plan(replace(plan.inp, vllm_version=version))


def _check_device(plan) -> dict | None:
    """On a GPU host: what nvidia-smi says, and a refusal (exit 3) before launching when the GPUs
    cannot give vLLM what it will request."""
    from validator.gpu_device import check_free
    from validator.launch import read_gpus
    seen = read_gpus()
    if seen is None:
        _say("nvidia-smi not found: the GPUs are not checked before launch")
        return None
    gpus, apps = seen
    ranks = plan.inp.tensor_parallel_size * plan.inp.pipeline_parallel_size
    L = plan.ledger
    requested = L.get("budget_bytes") or 0
    check_free(gpus, ranks, requested, apps)
    return {"gpus": [g.to_json() for g in gpus[:ranks]], "other_processes": apps}


def _api_key(profile) -> str | None:
    key_env = profile.get("vllm", "api_key_env")
    if not key_env:
        return None
    key = os.environ.get(key_env)
    if not key:
        raise InputError(f"vllm.api_key_env: the environment variable {key_env} is empty or not set")
    return key


def _require_loopback(url: str) -> None:
    from loadgen.cli import UsageError, require_loopback  # one rule for both tools
    try:
        require_loopback(url)
    except UsageError as e:
        raise InputError(str(e)) from None


def run_session(args, profile, plan) -> int:
    if args.url:
        _require_loopback(args.url)
        plan = _plan_for_server_version(args.url.rstrip("/"), profile, plan)
    pj = plan.to_json()
    if not plan.fits:
        print(json.dumps(pj, indent=2) if args.json else plan_text(pj))
        _say("the plan does not fit: not launching (exit 1)")
        return EXIT_FAIL
    spec = None if args.url else launch_spec(profile, plan)  # bad input is refused before anything is written
    run_dir = run_dir_for(args, profile)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "plan.json", pj)
    write_json(run_dir / "profile.json", {"name": profile.name, "values": redacted(profile.values)})
    install_signal_handlers()
    state = {"startup": None, "startup_checks": [], "error": None}
    code = EXIT_INFRA
    try:
        if args.url:
            code = _with_server(args, profile, plan, run_dir, state, None, args.url.rstrip("/"))
        else:
            device = _check_device(plan) if plan.inp.platform == "gpu" else None
            server = Server(spec, run_dir, progress=_say)
            try:
                server.start()
                state["startup"] = {"argv": server.saved_argv, "url": server.url, "device": device,
                                    "dev_mode": spec.env.get("VLLM_SERVER_DEV_MODE") == "1"}
                write_json(run_dir / "startup.json", state["startup"])
                try:
                    server.wait_ready()
                except ServerFailed as e:
                    facts = e.facts or StartupFacts()
                    state["startup"]["facts"] = facts.to_json()
                    state["startup"]["refusal"] = _refusal(plan, facts)
                    raise
                code = _with_server(args, profile, plan, run_dir, state, server, server.url)
            finally:
                server.stop()
                _say(f"vLLM stopped (pids {server.pids})")
    except InfraError as e:
        state["error"] = str(e)
        _say(f"error: {e}")
        code = EXIT_INFRA
    except KeyboardInterrupt as e:  # Ctrl-C, or Terminated (SIGTERM/SIGHUP)
        state["error"] = f"interrupted ({type(e).__name__})"
        raise
    finally:
        write_json(run_dir / "startup.json", {**(state["startup"] or {}), "checks": state["startup_checks"],
                                              "error": state["error"]})
        if not args.launch_only:
            _final_report(run_dir, plan.to_json(), profile.name, profile.values, state)
    if args.launch_only:
        return code
    rep_code = finish(state["report"], run_dir, args.json)
    return EXIT_INFRA if code == EXIT_INFRA else rep_code


def _with_server(args, profile, plan, run_dir: Path, state: dict, server: Server | None, url: str) -> int:
    api_key = _api_key(profile)
    facts = parse_log(server.log_text()) if server else StartupFacts()
    facts = server_facts(url, api_key, facts)
    state["startup"] = {**(state["startup"] or {"url": url}), "facts": facts.to_json()}
    checks = [c.to_json() for c in cross_check(plan.to_json(), facts, started_here=server is not None)]
    state["startup_checks"] = checks
    if args.launch_only:
        verdict = report.verdict_of(checks, None)
        if args.json:
            print(json.dumps({"verdict": verdict, "counts": report.counts_of(checks), "plan": plan.to_json(),
                              "startup": state["startup"], "checks": checks, "run_dir": str(run_dir)},
                             indent=2, default=str))
        else:
            print_checks(checks)
            print(f"verdict: {verdict} ({report.counts_line({'checks': checks})}); run dir {run_dir}")
        return EXIT_OK if verdict == "pass" else EXIT_FAIL
    from validator.runs import execute, plan_runs
    model = profile.get("model", "served_name") or facts.served_model or profile.get("model", "path")
    specs = plan_runs(plan.to_json(), profile)
    alive = server.alive if server else None
    asyncio.run(execute(specs, url, model, run_dir, profile, _say, api_key=api_key, alive=alive))
    return EXIT_OK  # the verdict is decided by _final_report


def _final_report(run_dir: Path, plan: dict, profile_name: str, profile_values: dict, state: dict) -> dict:
    from validator.compare import judge
    from validator.runs import load_runs
    runs = load_runs(run_dir)
    facts = (state.get("startup") or {}).get("facts") or {}
    checks, figures = judge(plan, runs, profile_values, facts.get("num_gpu_blocks")) if runs else ([], {})
    all_checks = state["startup_checks"] + [c.to_json() for c in checks]
    error = state.get("error")
    if not error and not runs:
        error = "no run was recorded"
    rep = report.build(plan, state.get("startup"), runs, figures, all_checks, error, profile_name,
                       {"rejudged": state["rejudged"]} if state.get("rejudged") else None)
    latency = {r.name: {"ttft": figures[r.name]["ttft_ms"], "itl": figures[r.name]["itl_ms"]} for r in runs}
    report.write_all(run_dir, rep, latency)
    state["report"] = rep
    return rep


def finish(rep: dict, run_dir: Path, as_json: bool) -> int:
    if as_json:
        print(json.dumps(rep, indent=1, default=str))
    else:
        if rep["checks"]:
            print_checks(rep["checks"])
        print(f"verdict: {rep['verdict']}" + (f" ({rep['error']})" if rep.get("error") else "")
              + f"; {report.counts_line(rep)}; report {run_dir / 'report.html'}")
        if report.dev_mode_of(rep):
            print(f"note: {report.DEV_MODE_NOTE}")
        if rep.get("rejudged"):
            print(f"(judged again; the live run said {rep['rejudged']['original_verdict']}, kept in "
                  f"{rep['rejudged']['original_report']})")
    return {"pass": EXIT_OK, "fail": EXIT_FAIL, "inconclusive": EXIT_FAIL}.get(rep["verdict"], EXIT_INFRA)


def rejudge(run_dir: str, as_json: bool) -> int:
    """`validate --report DIR`: judge a saved run again, without a server."""
    d = Path(run_dir)
    try:
        plan = json.loads((d / "plan.json").read_text())
        prof = json.loads((d / "profile.json").read_text())
    except FileNotFoundError as e:
        raise InputError(f"--report: {d} is not a kvgate run directory (no {Path(e.filename).name})") from None
    except ValueError as e:
        raise InputError(f"--report: {d}: unreadable JSON: {e}") from None
    startup = {}
    if (d / "startup.json").exists():
        startup = json.loads((d / "startup.json").read_text())
    from validator.profile import from_dict
    saved = prof["values"]
    # re-validated, so a run saved by an older kvgate gets today's defaults for new fields
    values = from_dict({**saved.get("", {}), **{k: v for k, v in saved.items() if k}}).values
    facts = StartupFacts(**{k: v for k, v in (startup.get("facts") or {}).items()
                            if k in StartupFacts.__dataclass_fields__})
    state = {"startup": startup, "startup_checks": [c.to_json() for c in cross_check(plan, facts, started_here="argv" in startup)]
             if startup.get("facts") else [], "error": None}
    # the live run's verdict is kept next to the new one, never overwritten (the first report
    # written in this directory is the original, however often it is judged again)
    old, original = d / "report.json", d / "report.original.json"
    if old.exists() and not original.exists():
        os.replace(old, original)
    first = None
    if original.exists():
        try:
            first = json.loads(original.read_text())
        except ValueError:
            first = None
    if first:
        state["error"] = first.get("error")
        state["rejudged"] = {"original_verdict": first.get("verdict"), "original_report": original.name,
                             "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rep = _final_report(d, plan, prof["name"], values, state)
    return finish(rep, d, as_json)


def _refusal(plan, facts: StartupFacts) -> dict:
    """When vLLM refuses to start, put what it said next to what the plan said."""
    said = facts.fatal_error or "no error line"
    _say(f"vLLM said: {said}")
    if facts.refused_estimated_max_model_len is not None:
        _say(f"vLLM's estimated maximum model length {facts.refused_estimated_max_model_len}; "
             f"the plan: max_model_len {plan.max_model_len}, fits={plan.fits}")
    return {"vllm_said": said, "vllm_estimated_max_model_len": facts.refused_estimated_max_model_len,
            "plan_fits": plan.fits, "plan_reasons": plan.reasons}
