"""`validate`: the command line. It parses, builds the profile and the run options, and prints;
planning, the session and the report do the rest.

Exit codes: 0 fits / all checks pass, 1 does not fit / a check failed,
2 bad input, 3 infrastructure failure. Errors are one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from loadgen import __version__
from loadgen.safefile import restrict_umask
from validator import profile as profiles
from validator.errors import (
    EXIT_FAIL,
    EXIT_INPUT,
    EXIT_OK,
    InputError,
    KvgateError,
    one_line,
)
from validator.profile.dataset import DATASET_RULES
from validator.redact import redact
from validator.serve.launch import Terminated
from validator.units import parse_bytes

DEFAULT_PROFILE = "profiles/tiny-cpu.yaml"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        self.exit(EXIT_INPUT, f"validate: error: {one_line(message)} (see validate --help)\n")


def _bytes(field: str):
    def conv(s: str) -> int:
        try:
            return parse_bytes(int(s) if s.isdigit() else s, field)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return conv


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="validate", description="Plan, launch and validate a vLLM deployment.")
    ap.add_argument("--version", action="version", version=f"validate (kvgate) {__version__}")
    ap.add_argument("--profile", help=f"deployment profile (YAML); e.g. {DEFAULT_PROFILE}")
    ap.add_argument("--plan-only", action="store_true", help="print the plan and exit (0 fits, 1 does not)")
    ap.add_argument(
        "--launch-only", action="store_true", help="start vLLM with the plan, cross-check what it reports, stop it"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--out", help="run directory for logs and reports (default: runs/<profile>-<time>)")
    ap.add_argument("--url", help="validate a server kvgate did not start (facts from its /metrics)")
    ap.add_argument("--report", metavar="DIR", help="judge a saved run directory again, without a server")
    ap.add_argument(
        "--sweep",
        nargs="?",
        const="auto",
        metavar="STEPS",
        help="load steps across the KV limit instead of the near-limit runs: auto, or concurrencies as 1,2,4,8 "
        "(profile: sweep.steps)",
    )
    ap.add_argument(
        "--quality",
        nargs="?",
        const="fp8",
        metavar="DTYPE",
        help="quality A/B instead of the load runs: the deployment launched with cache.kv_cache_dtype and with "
        "DTYPE (default fp8), the same prompts greedy with logprobs, compared token for token "
        "(profile: quality.candidate_kv_cache_dtype)",
    )
    g = ap.add_argument_group("plan overrides (flags win over the profile)")
    g.add_argument(
        "--enforce-eager",
        action="store_true",
        default=None,
        help="serve without CUDA graphs (vLLM --enforce-eager): the plan drops the CUDA-graph memory term "
        "(profile: vllm.extra_args)",
    )
    g.add_argument(
        "--enable-expert-parallel",
        action="store_true",
        default=None,
        help="MoE experts whole on each rank instead of split by TP (vLLM --enable-expert-parallel); the plan "
        "then allows a TP size the FP8 weight blocks of split experts would forbid (profile: vllm.extra_args)",
    )
    g.add_argument(
        "--moe-backend",
        default=None,
        metavar="NAME",
        help="vLLM's MoE kernels (vLLM --moe-backend): from 0.32 a backend other than auto or triton pads each "
        "rank's slice of block-FP8 experts to whole blocks, which the plan's weights then hold "
        "(profile: vllm.extra_args)",
    )
    g.add_argument(
        "--gpu-arch",
        choices=profiles.SCHEMA["hardware"]["gpu_arch"].choices,
        default=None,
        help="GPU generation, for MXFP4 experts' kernel padding (profile: hardware.gpu_arch)",
    )
    for flag, (section, name) in PLAN_FLAGS.items():
        f = profiles.SCHEMA[section][name]
        kind: Any = {"bytes": _bytes(flag), "int": int, "float": float}.get(f.kind)
        listed = f" One of: {', '.join(f.choices)}." if f.choices and flag != "--platform" else ""
        names = [flag, *ALIASES.get(flag, ())]
        # the profile validates values (its errors name the field); argparse only for --platform, as before
        g.add_argument(
            *names,
            dest=flag[2:].replace("-", "_"),
            type=kind,
            choices=f.choices if flag == "--platform" else None,
            help=f"{f.doc}{listed} (profile: {section}.{name})",
        )
    d = ap.add_argument_group("your traffic: a `dataset` run (profile: workload.dataset; vllm bench serve's names)")
    for flag, name in DATASET_FLAGS.items():
        f = DATASET_RULES[name]
        kind = {"int": int, "float": float}.get(f.kind)
        d.add_argument(flag, dest=f"ds_{name}", metavar=name.split("_")[-1].upper(), type=kind, help=f.doc)
    return ap


# workload.dataset's fields as flags: vllm bench serve's spelling of each
DATASET_FLAGS = {
    "--dataset-name": "name",
    "--dataset-path": "path",
    "--num-prompts": "requests",
    "--max-concurrency": "concurrency",
    **{"--" + n.replace("_", "-"): n for n in DATASET_RULES if n not in ("name", "path", "requests", "concurrency")},
}


# older names kept working (flags are a contract): vLLM's name first, kvgate's earlier one after it
ALIASES = {"--kv-cache-memory-bytes": ("--kv-cache-bytes",)}

# each plan flag sets one profile field: declared once here, typed and documented by the schema
PLAN_FLAGS = {
    "--model": ("model", "path"),
    "--platform": ("hardware", "platform"),
    "--kv-cache-memory-bytes": ("cache", "kv_cache_bytes"),
    "--gpu-memory-bytes": ("hardware", "gpu_memory"),
    "--gpu-memory-utilization": ("hardware", "gpu_memory_utilization"),
    "--weights-bytes": ("model", "weights_bytes"),
    "--workspace-bytes": ("cache", "workspace"),
    "--block-size": ("cache", "block_size"),
    "--kv-cache-dtype": ("cache", "kv_cache_dtype"),
    "--max-model-len": ("limits", "max_model_len"),
    "--max-num-seqs": ("limits", "max_num_seqs"),
    "--max-num-batched-tokens": ("limits", "max_num_batched_tokens"),
    "--tensor-parallel-size": ("hardware", "tensor_parallel_size"),
    "--pipeline-parallel-size": ("hardware", "pipeline_parallel_size"),
    "--vllm-version": ("vllm", "version"),
    "--num-gpu-blocks-override": ("cache", "num_gpu_blocks_override"),
    "--prompt-tokens": ("workload", "prompt_tokens"),
    "--output-tokens": ("workload", "output_tokens"),
}


def resolve_profile(args) -> profiles.Profile:
    if args.profile:
        prof = profiles.load(args.profile)
    elif args.model:
        prof = profiles.from_dict({})
    else:
        raise InputError("--profile: give a profile, or --model with the plan flags")
    changes = {field: getattr(args, flag[2:].replace("-", "_")) for flag, field in PLAN_FLAGS.items()}
    changes[("sweep", "steps")] = args.sweep
    changes[("hardware", "gpu_arch")] = args.gpu_arch
    changes[("quality", "candidate_kv_cache_dtype")] = args.quality
    extra = list(prof.vllm.extra_args or [])
    for flag in ("--enforce-eager", "--enable-expert-parallel"):
        if getattr(args, flag[2:].replace("-", "_")) and flag not in extra:
            extra.append(flag)
            changes[("vllm", "extra_args")] = extra
    if args.moe_backend is not None:  # the last one given is the one vLLM's parser keeps
        changes[("vllm", "extra_args")] = extra = [*extra, "--moe-backend", args.moe_backend]
    given = {
        name: getattr(args, f"ds_{name}") for name in DATASET_FLAGS.values() if getattr(args, f"ds_{name}") is not None
    }
    if given:  # flags win over the profile's workload.dataset, field by field
        base = prof.values["workload"].get("dataset") or {}
        if "name" in given and given["name"] != base.get("name"):
            base = {}  # another kind of dataset: none of the profile's dataset fields carries over
        changes[("workload", "dataset")] = {**{k: v for k, v in base.items() if v is not None}, **given}
    return profiles.override(prof, changes)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report:
        from validator.judging import rejudge

        return rejudge(args.report, args.json)
    from validator.inputs import plan_input_from_profile
    from validator.plan.limits import make_plan
    from validator.report.text import plan_text
    from validator.serve.argv import plan_record

    prof = resolve_profile(args)
    plan = make_plan(plan_input_from_profile(prof))
    if args.plan_only:
        rec = plan_record(plan, prof)
        steps = []
        if prof.sweep.steps:  # where the plan fits, each step previewed; where not, its steps still checked
            from validator.observe.sweep import preview, steps_of

            if plan.fits:
                steps = preview(rec, prof.sweep)
            else:
                steps_of(prof.sweep.steps, 1, 1)
        record = {**rec.to_json(), **({"sweep": steps} if steps else {})}
        print(json.dumps(record, indent=2) if args.json else plan_text(record))
        return EXIT_OK if plan.fits else EXIT_FAIL
    from validator.session import RunOptions, run_session  # launch / load / judge

    opts = RunOptions(
        argv=tuple(argv if argv is not None else sys.argv[1:]),
        url=args.url,
        out=args.out,
        as_json=args.json,
        launch_only=args.launch_only,
    )
    return run_session(opts, prof, plan)


def main(argv: list[str] | None = None) -> int:
    restrict_umask()  # run files hold logs and profiles: 0600 and 0700
    try:
        code = run(argv)
    except KvgateError as e:
        print(f"validate: error: {redact(one_line(str(e)))}", file=sys.stderr)
        code = e.exit_code
    except Terminated as e:  # before KeyboardInterrupt, of which it is a kind
        print(f"validate: terminated ({e}); vLLM stopped, partial results kept", file=sys.stderr)
        code = 143
    except KeyboardInterrupt:
        print("validate: interrupted (Ctrl-C); vLLM stopped, partial results kept", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # `validate --plan-only | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
