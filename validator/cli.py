"""`validate`: plan, launch, cross-check (and, as issues land, load and judge).

Exit codes: 0 fits / all checks pass, 1 does not fit / a check failed,
2 bad input, 3 infrastructure failure. Errors are one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from validator import profile as profiles
from validator.errors import EXIT_FAIL, EXIT_INPUT, EXIT_OK, InputError, KvgateError, one_line
from validator.launch import Terminated
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
    ap.add_argument("--profile", help=f"deployment profile (YAML); e.g. {DEFAULT_PROFILE}")
    ap.add_argument("--plan-only", action="store_true", help="print the plan and exit (0 fits, 1 does not)")
    ap.add_argument("--launch-only", action="store_true",
                    help="start vLLM with the plan, cross-check what it reports, stop it")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    ap.add_argument("--out", help="run directory for logs and reports (default: runs/<profile>-<time>)")
    ap.add_argument("--url", help="validate a server kvgate did not start (facts from its /metrics)")
    ap.add_argument("--report", metavar="DIR", help="judge a saved run directory again, without a server")
    g = ap.add_argument_group("plan overrides (flags win over the profile)")
    g.add_argument("--model", help="checkpoint directory or config.json")
    g.add_argument("--platform", choices=["cpu", "gpu"])
    g.add_argument("--kv-cache-bytes", type=_bytes("--kv-cache-bytes"), help="KV budget, e.g. 1GiB")
    g.add_argument("--gpu-memory-bytes", type=_bytes("--gpu-memory-bytes"), help="memory of one GPU, e.g. 80GB")
    g.add_argument("--gpu-memory-utilization", type=float)
    g.add_argument("--weights-bytes", type=_bytes("--weights-bytes"))
    g.add_argument("--workspace-bytes", type=_bytes("--workspace-bytes"))
    g.add_argument("--block-size", type=int)
    g.add_argument("--kv-cache-dtype")
    g.add_argument("--max-model-len", type=int)
    g.add_argument("--max-num-seqs", type=int)
    g.add_argument("--max-num-batched-tokens", type=int)
    g.add_argument("--tensor-parallel-size", type=int, help="GPUs one model is split across")
    g.add_argument("--pipeline-parallel-size", type=int, help="pipeline stages; the ledger is rank 0's")
    g.add_argument("--vllm-version", help="whose start-up memory accounting to follow on a GPU, e.g. 0.19.0 "
                   "(default: the installed vLLM, else 0.32.0)")
    g.add_argument("--num-gpu-blocks-override", type=int)
    g.add_argument("--prompt-tokens", type=int, help="workload prompt length (also: bandwidth figures)")
    g.add_argument("--output-tokens", type=int, help="workload output length (also: bandwidth figures)")
    return ap


_FLAG_FIELDS = {
    "model": ("model", "path"), "platform": ("hardware", "platform"),
    "kv_cache_bytes": ("cache", "kv_cache_bytes"), "gpu_memory_bytes": ("hardware", "gpu_memory"),
    "gpu_memory_utilization": ("hardware", "gpu_memory_utilization"),
    "weights_bytes": ("model", "weights_bytes"), "workspace_bytes": ("cache", "workspace"),
    "block_size": ("cache", "block_size"), "kv_cache_dtype": ("cache", "kv_cache_dtype"),
    "max_model_len": ("limits", "max_model_len"), "max_num_seqs": ("limits", "max_num_seqs"),
    "max_num_batched_tokens": ("limits", "max_num_batched_tokens"),
    "tensor_parallel_size": ("hardware", "tensor_parallel_size"),
    "pipeline_parallel_size": ("hardware", "pipeline_parallel_size"), "vllm_version": ("vllm", "version"),
    "num_gpu_blocks_override": ("cache", "num_gpu_blocks_override"),
    "prompt_tokens": ("workload", "prompt_tokens"), "output_tokens": ("workload", "output_tokens"),
}


def resolve_profile(args) -> profiles.Profile:
    if args.profile:
        prof = profiles.load(args.profile)
    elif args.model:
        prof = profiles.from_dict({})
    else:
        raise InputError("--profile: give a profile, or --model with the plan flags")
    changes = {_FLAG_FIELDS[k]: getattr(args, k) for k in _FLAG_FIELDS}
    return profiles.override(prof, changes)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report:
        from validator.session import rejudge
        return rejudge(args.report, args.json)
    from validator.plan import make_plan, plan_input_from_profile
    from validator.render import plan_text

    prof = resolve_profile(args)
    plan = make_plan(plan_input_from_profile(prof))
    pj = plan.to_json()
    if args.plan_only:
        print(json.dumps(pj, indent=2) if args.json else plan_text(pj))
        return EXIT_OK if plan.fits else EXIT_FAIL
    from validator.session import run_session  # launch / load / judge
    return run_session(args, prof, plan)


def main(argv: list[str] | None = None) -> int:
    try:
        code = run(argv)
    except KvgateError as e:
        print(f"validate: error: {one_line(e)}", file=sys.stderr)
        code = e.exit_code
    except Terminated as e:  # before KeyboardInterrupt, of which it is a kind
        print(f"validate: terminated ({e}); vLLM stopped, partial results kept", file=sys.stderr)
        code = 143
    except KeyboardInterrupt:
        print("validate: interrupted (Ctrl-C); vLLM stopped, partial results kept", file=sys.stderr)
        code = 130
    sys.exit(code)
