"""Which dataset to replay and how, with `vllm bench serve`'s names (its --dataset-name values and its
--sharegpt-*, --custom-*, --timed-trace-* and --prefix-repetition-* options, same defaults), so a
command line moves between the two tools unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class DatasetName(str, Enum):
    RANDOM = "random"  # loadgen's own synthetic prompts (--prompt-tokens, --output-tokens)
    SHAREGPT = "sharegpt"  # ShareGPT JSON: first human turn, the reply's length as output
    CUSTOM = "custom"  # JSONL: {"prompt": text | [ids]} or {"messages": [...]}, "output_tokens"
    TIMED_TRACE = "timed_trace"  # Mooncake-style JSONL: timestamp, input_length, output_length, hash_ids
    PREFIX_REPETITION = "prefix_repetition"  # shared prefixes, random suffixes

    @property
    def needs_path(self) -> bool:
        return self in (DatasetName.SHAREGPT, DatasetName.CUSTOM, DatasetName.TIMED_TRACE)


@dataclass(frozen=True, kw_only=True)
class TraceLabels:
    """The JSON field names of a timed trace (--timed-trace-label-*)."""

    timestamp: str = "timestamp"
    input_length: str = "input_length"
    output_length: str = "output_length"
    hash_ids: str = "hash_ids"


# vLLM's ShareGPT pruning (benchmarks/datasets: is_valid_sequence): at least 4 prompt and output
# tokens, prompts of at most 1,024 tokens, prompt + output at most 2,048
SHAREGPT_MIN = 4
SHAREGPT_MAX_PROMPT = 1024
SHAREGPT_MAX_TOTAL = 2048


@dataclass(frozen=True, kw_only=True)
class DatasetOptions:
    name: DatasetName
    path: str | None = None
    sharegpt_output_len: int | None = None  # overrides the replies' lengths
    custom_output_len: int = 256  # custom lines without output_tokens (vLLM's default)
    chunk_hash_size: int = 16  # tokens a trace hash id stands for (Mooncake's own traces: 512)
    sec_multiplier: float = 1.0  # trace timestamps x this = seconds (0.001 for milliseconds)
    labels: TraceLabels = TraceLabels()
    prefix_len: int = 256  # --prefix-repetition-prefix-len
    suffix_len: int = 256
    num_prefixes: int = 10
    prefix_output_len: int = 128
    turns: int | None = None  # ShareGPT conversations replayed for this many turns (history grows)
    max_model_len: int | None = None  # drop requests whose prompt + output do not fit (counted)

    @classmethod
    def from_fields(cls, f: dict[str, Any]) -> DatasetOptions:
        """From vllm bench serve's option names without their dashes (`timed_trace_chunk_hash_size`),
        as loadgen's flags and validate's `workload.dataset` both spell them; absent: the default."""
        d = cls(name=DatasetName(f["name"]))
        given = {k: v for k, v in f.items() if v is not None}
        return cls(
            name=d.name,
            path=given.get("path"),
            sharegpt_output_len=given.get("sharegpt_output_len"),
            custom_output_len=given.get("custom_output_len", d.custom_output_len),
            chunk_hash_size=given.get("timed_trace_chunk_hash_size", d.chunk_hash_size),
            sec_multiplier=given.get("timed_trace_sec_multiplier", d.sec_multiplier),
            labels=TraceLabels(**{k: given.get(f"timed_trace_label_{k}", v) for k, v in vars(TraceLabels()).items()}),
            prefix_len=given.get("prefix_repetition_prefix_len", d.prefix_len),
            suffix_len=given.get("prefix_repetition_suffix_len", d.suffix_len),
            num_prefixes=given.get("prefix_repetition_num_prefixes", d.num_prefixes),
            prefix_output_len=given.get("prefix_repetition_output_len", d.prefix_output_len),
            turns=given.get("turns"),
            max_model_len=given.get("max_model_len"),
        )

    def check(self) -> None:
        """Raises ValueError naming the option and the fix."""
        if self.name.needs_path and not self.path:
            raise ValueError(f"--dataset-name {self.name.value} needs --dataset-path FILE")
        if self.chunk_hash_size < 1:
            raise ValueError("--timed-trace-chunk-hash-size must be at least 1")
        if not self.sec_multiplier > 0:
            raise ValueError("--timed-trace-sec-multiplier must be above 0 (0.001 for timestamps in ms)")
        for flag, v in (
            ("--sharegpt-output-len", self.sharegpt_output_len),
            ("--custom-output-len", self.custom_output_len),
            ("--prefix-repetition-prefix-len", self.prefix_len),
            ("--prefix-repetition-suffix-len", self.suffix_len),
            ("--prefix-repetition-num-prefixes", self.num_prefixes),
            ("--prefix-repetition-output-len", self.prefix_output_len),
        ):
            if v is not None and v < 1:
                raise ValueError(f"{flag} must be at least 1")
        if self.turns is not None and (self.turns < 2 or self.name is not DatasetName.SHAREGPT):
            raise ValueError("--turns with a dataset: at least 2, and only with --dataset-name sharegpt")
