"""`validate --quality`: the quality A/B of a KV cache dtype, two launches of one deployment.

1. plan the reference (the profile's kv_cache_dtype) and the candidate at the same limits (only
   the KV dtype differs; both must fit);
2. launch the reference, cross-check its start-up against its plan, size the prompts with its
   tokenizer, generate them, reset the prefix cache, generate them again (the determinism
   control), stop it;
3. launch the candidate, cross-check its start-up against its own plan, reset, generate once,
   stop it;
4. judge the run directory (validator/judging.py reads quality/ back, as `--report` does).

Run directory: the reference's plan.json, startup.json and vllm.log as in any run; quality/
holds prompts.json, reference.json, control.json, candidate.json, candidate-plan.json,
candidate-startup.json and candidate/vllm.log.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from loadgen import net
from loadgen.safefile import make_dirs
from validator.errors import EXIT_FAIL, EXIT_INFRA, InfraError, InputError
from validator.judge.startup import cross_check
from validator.judging import finish, judge_run_dir, meta_of, show
from validator.observe import quality as q
from validator.observe.schedule import schedule_of
from validator.plan.limits import make_plan
from validator.plan.result import Plan
from validator.profile import Profile
from validator.quality.prompts import Prompt, TaskKind, builtin_tasks
from validator.report.text import plan_text
from validator.rundir.files import redacted, run_dir_for, write_json, write_plan
from validator.serve.argv import api_key_of, launch_spec, plan_record
from validator.serve.facts import model_name, server_facts, server_version
from validator.serve.launch import Server, ServerFailed, install_signal_handlers, run_loop
from validator.serve.startup_log import parse_log

# a run's generations are held whole (a few hundred bytes an entry): at most about 1 GiB for three runs
MAX_LOGPROB_ENTRIES = 1_000_000


def candidate_plan(profile: Profile, plan: Plan) -> Plan:
    """The reference's deployment with the candidate KV dtype: the same limits, its own blocks."""
    dtype = profile.quality.candidate_kv_cache_dtype
    assert dtype is not None  # run_session comes here only with a candidate
    inp = replace(
        plan.inp,
        kv_cache_dtype=dtype,
        max_model_len=plan.max_model_len,
        max_num_seqs=plan.max_num_seqs,
        max_num_batched_tokens=plan.max_num_batched_tokens,
    )
    return make_plan(inp)


def run_quality(opts: Any, profile: Profile, plan: Plan, say) -> int:
    if opts.url:
        raise InputError("--quality: the A/B launches vLLM twice (reference and candidate KV dtype); drop --url")
    if opts.launch_only:
        raise InputError("--quality: --launch-only launches once; drop one of the two")
    same = {plan.inp.kv_cache_dtype, profile.quality.candidate_kv_cache_dtype}
    if len(same) == 1 or same == {"fp8", "fp8_e4m3"}:  # (auto may be a ModelOpt checkpoint's fp8_e4m3)
        raise InputError("quality.candidate_kv_cache_dtype: the same as cache.kv_cache_dtype; compare two dtypes")
    cand = candidate_plan(profile, plan)
    for label, p in (("reference", plan), ("candidate", cand)):
        if not p.fits:
            show(plan_text(plan_record(p, profile).to_json()))
            say(f"the {label} plan does not fit: not launching (exit 1)")
            return EXIT_FAIL
    prompts_given = q.prompts_from_file(profile.quality.dataset_path) if profile.quality.dataset_path else None
    n_prompts = len(prompts_given) if prompts_given is not None else len(builtin_tasks())
    entries = n_prompts * profile.quality.max_tokens * (profile.quality.logprobs + 1)
    if entries > MAX_LOGPROB_ENTRIES:  # the three runs' records are held in memory until judged
        raise InputError(
            f"quality: {n_prompts} prompts x {profile.quality.max_tokens} tokens x {profile.quality.logprobs + 1} "
            f"logprobs = {entries:,} entries a run, over {MAX_LOGPROB_ENTRIES:,}; use fewer prompts, "
            "quality.max_tokens or quality.logprobs"
        )
    specs = (launch_spec(profile, plan), launch_spec(profile, cand))  # bad input refused before anything is written
    record = plan_record(plan, profile)
    run_dir = run_dir_for(opts.out, profile.name)
    qdir = run_dir / "quality"
    make_dirs(qdir / "candidate")
    saved_profile = {"name": profile.name, "values": redacted(profile.values)}
    write_plan(run_dir, record, schedule_of([], server_started=True, freezes=False))
    write_json(run_dir / "profile.json", saved_profile)
    write_json(qdir / "candidate-plan.json", plan_record(cand, profile).to_json())
    install_signal_handlers()
    startup: dict = {}
    code = EXIT_INFRA
    try:
        budget = profile.quality.max_prompt_tokens or plan.max_model_len - profile.quality.max_tokens
        if budget > plan.max_model_len - profile.quality.max_tokens:
            raise InputError(
                f"quality.max_prompt_tokens: {budget} + {profile.quality.max_tokens} output tokens exceed "
                f"max_model_len {plan.max_model_len}"
            )
        startup = _launch(
            specs[0], plan, run_dir, run_dir / "startup.json", profile, say, "reference", qdir, budget, prompts_given
        )
        _launch(
            specs[1],
            cand,
            qdir / "candidate",
            qdir / "candidate-startup.json",
            profile,
            say,
            "candidate",
            qdir,
            budget,
            None,
        )
        code = 0
    except InfraError as e:
        say(f"error: {e}")
        _note_error(run_dir / "startup.json", str(e))
    finally:
        say("judging the A/B")
        rep = judge_run_dir(run_dir, meta=meta_of(opts.argv, saved_profile, startup, record))
    rep_code = finish(rep, run_dir, opts.as_json)
    return EXIT_INFRA if code == EXIT_INFRA else rep_code


def _note_error(path: Path, error: str) -> None:
    try:
        d = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        d = {}
    d.setdefault("error", None)
    d["error"] = d["error"] or error
    write_json(path, d)


def _launch(spec, plan, log_dir, startup_path, profile, say, label, qdir, budget, prompts_given) -> dict:
    """One launch: start, cross-check, generate (twice for the reference), stop; everything saved."""
    record = plan_record(plan, profile)
    server = Server(spec, log_dir, progress=say)
    startup: dict = {"label": label}
    try:
        server.start()
        startup.update(argv=server.saved_argv, url=server.url, dev_mode=spec.env.get("VLLM_SERVER_DEV_MODE") == "1")
        write_json(startup_path, {**startup, "checks": [], "error": None})
        try:
            server.wait_ready()
        except ServerFailed as e:
            startup["facts"] = e.facts.to_json() if e.facts else None
            startup["error"] = str(e)
            raise
        pin = net.pin(server.url)
        facts = server_facts(
            server.url, api_key_of(profile), parse_log(server.log_text()), want=profile.model.served_name, pin=pin
        )
        startup["facts"] = facts.to_json()
        startup["vllm_version"] = server_version(server.url, pin)
        startup["checks"] = [c.to_json() for c in cross_check(record, facts, True, config_required=True)]
        write_json(startup_path, {**startup, "error": None})
        model = model_name(profile, facts, server.url)
        run_loop(_generate(server.url, pin, model, profile, qdir, label, budget, prompts_given, say))
    finally:
        server.stop()
        say(f"vLLM ({label}) stopped (pids {server.pids})")
        write_json(startup_path, {"checks": [], "error": None, **startup})
    return startup


async def _generate(url, pin, model, profile, qdir: Path, label, budget, prompts_given, say) -> None:
    qs = profile.quality
    key = api_key_of(profile)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    timeout = profile.observe.request_timeout_s
    async with net.session(pin, timeout=aiohttp.ClientTimeout(total=timeout + 5)) as s:
        if label == "reference":
            prompts = prompts_given or await q.sized_prompts(s, url, model, budget, headers, timeout)
            write_json(
                qdir / "prompts.json",
                {
                    "source": qs.dataset_path or "built-in",
                    "prompts": [
                        {
                            "id": p.id,
                            "kind": p.kind.value,
                            "answer": p.answer,
                            "target_tokens": p.target_tokens,
                            "text": p.text,
                        }
                        for p in prompts
                    ],
                },
            )
        else:
            saved = json.loads((qdir / "prompts.json").read_text())["prompts"]
            prompts = [Prompt(p["id"], TaskKind(p["kind"]), p["text"], p["answer"], p["target_tokens"]) for p in saved]
        runs = ("reference", "control") if label == "reference" else ("candidate",)
        for name in runs:
            isolation = await q.reset_cache(s, url)
            t0 = time.time()
            say(f"quality A/B: {name} run, {len(prompts)} prompts greedy with logprobs")
            recs = await q.generate(s, url, model, prompts, qs.max_tokens, qs.logprobs, headers, timeout)
            write_json(
                qdir / f"{name}.json",
                {
                    "name": name,
                    "kv_cache_dtype": profile.cache.kv_cache_dtype
                    if label == "reference"
                    else qs.candidate_kv_cache_dtype,
                    "isolation": isolation,
                    "seconds": round(time.time() - t0, 3),
                    "records": recs,
                },
            )
