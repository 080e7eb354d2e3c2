"""One `validate` run: plan -> launch (or --url) -> start-up cross-check.

Everything recorded goes to the run directory as it happens (plan.json,
vllm.log, startup.json), so an interrupted run keeps what it saw.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from validator.errors import EXIT_FAIL, EXIT_INFRA, EXIT_OK, InfraError, InputError
from validator.launch import LaunchSpec, Server, ServerFailed, install_signal_handlers, validate_extra_args
from validator.render import plan_text
from validator.startup import StartupFacts, cross_check, parse_cache_config_info, parse_log

LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def _say(msg: str) -> None:
    print(f"[kvgate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_dir_for(args, profile) -> Path:
    if args.out:
        return Path(args.out)
    return Path("runs") / f"{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}"


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
        raise InfraError(f"--url: cannot read {base_url}/metrics: {e}") from None
    try:
        models = json.loads(http_get(base_url + "/v1/models", api_key=api_key))
        data = models.get("data") or []
        if data and isinstance(data[0].get("max_model_len"), int):
            f.max_model_len = data[0]["max_model_len"]
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        pass
    return f


def _print_checks(checks) -> None:
    w = max(len(c.name) for c in checks)
    print(f"{'check':<{w}}  {'predicted':>20}  {'reported':>20}  result")
    for c in checks:
        res = "n/a" if c.passed is None else ("ok" if c.passed else "MISMATCH")
        obs = "not reported" if c.observed is None else c.observed
        print(f"{c.name:<{w}}  {c.expected!s:>20}  {obs!s:>20}  {res}")


def launch_spec(profile, plan) -> LaunchSpec:
    g = profile.get
    extra = g("vllm", "extra_args") or []
    validate_extra_args(extra)
    key_env = g("vllm", "api_key_env")
    api_key = None
    if key_env:
        api_key = os.environ.get(key_env)
        if not api_key:
            raise InputError(f"vllm.api_key_env: the environment variable {key_env} is empty or not set")
    host = g("vllm", "host")
    return LaunchSpec(
        model=g("model", "path"), served_name=g("model", "served_name"), vllm_args=list(plan.vllm_args),
        env={**plan.vllm_env, "VLLM_SERVER_DEV_MODE": "1", **(g("vllm", "env") or {})},
        extra_args=extra, python=g("vllm", "python"), command=g("vllm", "command"), host=host,
        port=g("vllm", "port"), api_key=api_key, startup_timeout_s=g("vllm", "startup_timeout_s"))


def run_session(args, profile, plan) -> int:
    pj = plan.to_json()
    if not plan.fits:
        print(json.dumps(pj, indent=2) if args.json else plan_text(pj))
        _say("the plan does not fit: not launching (exit 1)")
        return EXIT_FAIL
    run_dir = run_dir_for(args, profile)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "plan.json", pj)
    install_signal_handlers()
    result = {"verdict": "error", "plan": pj, "startup": None, "checks": [], "run_dir": str(run_dir)}
    try:
        if args.url:
            facts, checks = _check_url(args.url, profile)
            result["startup"] = {"url": args.url, "facts": facts.to_json()}
        else:
            spec = launch_spec(profile, plan)
            server = Server(spec, run_dir, progress=_say)
            try:
                server.start()
                result["startup"] = {"argv": server.saved_argv, "url": server.url}
                write_json(run_dir / "startup.json", result["startup"])
                try:
                    server.wait_ready()
                except ServerFailed as e:
                    facts = e.facts or StartupFacts()
                    result["startup"]["facts"] = facts.to_json()
                    _refusal(plan, facts, result)
                    raise
                facts = parse_log(server.log_text())
                facts = server_facts(server.url, spec.api_key, facts)
                result["startup"]["facts"] = facts.to_json()
                checks = cross_check(pj, facts)
            finally:
                server.stop()
                _say(f"vLLM stopped (pids {server.pids})")
        result["checks"] = [c.to_json() for c in checks]
        failed = [c for c in checks if c.passed is False]
        result["verdict"] = "fail" if failed else "pass"
        if args.json:
            print(json.dumps(result, indent=2, default=str))
        else:
            _print_checks(checks)
            print(f"verdict: {result['verdict']} ({len(failed)} of {len(checks)} checks failed); run dir {run_dir}")
        return EXIT_FAIL if failed else EXIT_OK
    except InfraError as e:
        result["error"] = str(e)
        _say(f"error: {e}")
        return EXIT_INFRA
    finally:
        write_json(run_dir / "startup.json", result)


def _refusal(plan, facts: StartupFacts, result: dict) -> None:
    """When vLLM refuses to start, put what it said next to what the plan said."""
    said = facts.fatal_error or "no error line"
    _say(f"vLLM said: {said}")
    if facts.refused_estimated_max_model_len is not None:
        _say(f"vLLM's estimated maximum model length {facts.refused_estimated_max_model_len}; "
             f"the plan: max_model_len {plan.max_model_len}, fits={plan.fits}")
    result["refusal"] = {"vllm_said": said, "vllm_estimated_max_model_len": facts.refused_estimated_max_model_len,
                         "plan_fits": plan.fits, "plan_reasons": plan.reasons}


def _check_url(url: str, profile):
    host = urlparse(url).hostname or ""
    if not (host.startswith("127.") or host in ("localhost", "::1")):
        raise InputError(f"--url: {url} is not a loopback address; kvgate only loads servers on this machine")
    key_env = profile.get("vllm", "api_key_env")
    facts = server_facts(url.rstrip("/"), os.environ.get(key_env) if key_env else None)
    from validator.plan import make_plan, plan_input_from_profile
    plan = make_plan(plan_input_from_profile(profile))
    return facts, cross_check(plan.to_json(), facts)
