"""`loadgen`'s dataset flags, `vllm bench serve`'s names and defaults: --dataset-name and
--dataset-path, --sharegpt-output-len, --custom-output-len, the --timed-trace-* and
--prefix-repetition-* options (argparse only: they become one DatasetOptions)."""

from __future__ import annotations

import argparse

from loadgen.dataset_options import DatasetName, DatasetOptions, TraceLabels
from loadgen.loadrun import UsageError


def add_dataset_flags(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("datasets (vllm bench serve's names)")
    g.add_argument(
        "--dataset-name",
        choices=[n.value for n in DatasetName],
        help="random (default: --prompt-tokens/--output-tokens), sharegpt, custom, timed_trace, prefix_repetition",
    )
    g.add_argument("--dataset-path", help="the dataset file (sharegpt, custom, timed_trace)")
    g.add_argument(
        "--sharegpt-output-len", type=int, help="output tokens of every ShareGPT request (default: the reply's)"
    )
    g.add_argument(
        "--custom-output-len", type=int, default=256, help="custom lines without output_tokens (default 256)"
    )
    g.add_argument(
        "--timed-trace-chunk-hash-size", type=int, default=16, help="tokens a hash id stands for (default 16)"
    )
    g.add_argument(
        "--timed-trace-sec-multiplier", type=float, default=1.0, help="timestamps x this = seconds (0.001 for ms)"
    )
    for field, default in vars(TraceLabels()).items():
        g.add_argument(
            f"--timed-trace-label-{field.replace('_', '-')}", default=default, help=f"JSON field (default {default})"
        )
    g.add_argument("--prefix-repetition-prefix-len", type=int, default=256)
    g.add_argument("--prefix-repetition-suffix-len", type=int, default=256)
    g.add_argument("--prefix-repetition-num-prefixes", type=int, default=10)
    g.add_argument("--prefix-repetition-output-len", type=int, default=128)


def dataset_options(a: argparse.Namespace) -> DatasetOptions | None:
    """The dataset the flags ask for (None: loadgen's synthetic prompts). --dataset FILE, loadgen's
    older flag, is --dataset-name custom --dataset-path FILE."""
    name = a.dataset_name
    if a.dataset:
        if name not in (None, "custom") or (a.dataset_path and a.dataset_path != a.dataset):
            raise UsageError("--dataset FILE is --dataset-name custom --dataset-path FILE: give one of the two")
        name, a.dataset_path = "custom", a.dataset
    if name in (None, "random"):
        if a.dataset_path:
            raise UsageError("--dataset-path needs --dataset-name sharegpt, custom or timed_trace")
        return None
    fields = {
        k: v for k, v in vars(a).items() if k.startswith(("sharegpt_", "custom_", "timed_trace_", "prefix_repetition_"))
    }
    opts = DatasetOptions.from_fields(
        {**fields, "name": name, "path": a.dataset_path, "turns": a.turns if name == "sharegpt" else None}
    )
    try:
        opts.check()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.turns and name != "sharegpt":
        raise UsageError("--turns with a dataset: only with --dataset-name sharegpt")
    return opts
