"""`workload.dataset:` the traffic of the `dataset` run, read from a file (or vLLM's
prefix_repetition), with `vllm bench serve`'s dataset names and option names (without their
leading dashes, `-` as `_`). Validated like any section (load.py); typed here."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from loadgen.dataset_options import DatasetName, DatasetOptions, TraceLabels
from validator.profile.sections import Field, spec

LABELS = TraceLabels()


@dataclass(frozen=True, kw_only=True)
class DatasetSection:
    """`workload.dataset:`"""

    name: str = spec(
        "choice",
        None,
        "vllm bench serve's --dataset-name: sharegpt, custom (JSONL of prompt or messages), timed_trace "
        "(Mooncake-style) or prefix_repetition.",
        choices=tuple(n.value for n in DatasetName if n is not DatasetName.RANDOM),
    )
    path: str | None = spec("path", None, "The dataset file (--dataset-path); relative: from the profile's folder.")
    requests: int | None = spec(
        "int", None, "Replay at most this many requests (--num-prompts); default: all.", minimum=1, maximum=10**7
    )
    concurrency: int | None = spec(
        "int",
        None,
        "Requests in flight for a dataset without timestamps (closed loop); default: max_num_seqs. A "
        "timed trace is replayed at its timestamps.",
        minimum=1,
        maximum=1048576,
    )
    turns: int | None = spec("int", None, "ShareGPT: replay this many turns per conversation.", minimum=2, maximum=64)
    sharegpt_output_len: int | None = spec("int", None, "Output tokens of every ShareGPT request.", minimum=1)
    custom_output_len: int = spec("int", 256, "Output tokens of custom lines without output_tokens.", minimum=1)
    timed_trace_chunk_hash_size: int = spec("int", 16, "Tokens one trace hash id stands for.", minimum=1)
    timed_trace_sec_multiplier: float = spec(
        "float", 1.0, "Trace timestamps x this = seconds (0.001 for milliseconds).", minimum=1e-9
    )
    timed_trace_label_timestamp: str = spec("str", LABELS.timestamp, "Trace field of the timestamp.")
    timed_trace_label_input_length: str = spec("str", LABELS.input_length, "Trace field of the input length.")
    timed_trace_label_output_length: str = spec("str", LABELS.output_length, "Trace field of the output length.")
    timed_trace_label_hash_ids: str = spec("str", LABELS.hash_ids, "Trace field of the hash ids.")
    prefix_repetition_prefix_len: int = spec("int", 256, "prefix_repetition: shared prefix tokens.", minimum=1)
    prefix_repetition_suffix_len: int = spec("int", 256, "prefix_repetition: own suffix tokens.", minimum=1)
    prefix_repetition_num_prefixes: int = spec("int", 10, "prefix_repetition: distinct prefixes.", minimum=1)
    prefix_repetition_output_len: int = spec("int", 128, "prefix_repetition: output tokens.", minimum=1)

    def options(self, max_model_len: int | None = None) -> DatasetOptions:
        return DatasetOptions.from_fields({**vars(self), "max_model_len": max_model_len})


DATASET_RULES: dict[str, Field] = {f.name: f.metadata["rule"] for f in fields(DatasetSection)}


def dataset_of(values: dict[str, Any] | None) -> DatasetSection | None:
    return DatasetSection(**values) if values else None
