"""What a server reported at start-up (saved in startup.json), as the judge reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class StartupFacts:
    kv_cache_tokens: int | None = None
    max_concurrency_logged: float | None = None  # the log rounds to 2 decimals
    max_concurrency_at: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_size_tokens: int | None = None  # from vllm:cache_config_info
    kv_cache_max_concurrency: float | None = None  # from vllm:cache_config_info (full precision)
    kv_cache_memory_bytes: int | None = None
    cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    # from vllm:cache_config_info as vLLM labels it ("0": window and Mamba groups cached at checkpoints
    # only, "None": densely; absent before vLLM had the setting)
    prefix_cache_retention_interval: str | None = None
    # from vllm:cache_config_info as labelled: the token grain of prefix hits ("None": the block's;
    # absent before vLLM had the setting)
    prefix_match_unit: str | None = None
    engines: int | None = None  # engine labels on vllm:cache_config_info (data parallelism: more than one)
    max_model_len: int | None = None  # from /v1/models
    # the scheduler's limits as the server runs them, from /server_info's JSON config (dev mode)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    server_config_json: bool | None = None  # False: /server_info answered without a JSON config (older vLLM)
    server_config_error: str | None = None  # why the two limits could not be read
    served_model: str | None = None  # from /v1/models: the model the runs use
    served_models: list[str] | None = None  # from /v1/models: every name the server answers to
    models_error: str | None = None  # why /v1/models could not be read
    refused_estimated_max_model_len: int | None = None
    fatal_error: str | None = None
    # GPU start-up memory as logged (GiB, 2 decimals), rank 0's first line of each
    weights_gib: float | None = None
    available_kv_gib: float | None = None
    activation_peak_gib: float | None = None
    cudagraph_estimated_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    kv_reserved_gib: float | None = None  # --kv-cache-memory-bytes as vLLM took it
    consumed_gib: float | None = None  # weights + non-torch, vLLM >= 0.21's post-capture "Actual usage" line
    non_torch_gib: float | None = None  # that less the weights (2 decimals each, so +/- 0.01)
    figures_rank: str | None = None  # the rank the memory figures above are from ("0": rank 0 or the engine)
    per_rank: dict[str, dict[str, float]] | None = None  # every rank's first figure of each kind
    cudagraph_wording: str | None = None  # startup_log.CgWording: the line that gave the estimate
    # "v2" when the log says "Using V2 Model Runner"; "v1" when it says "using the V1 model runner" or
    # the weights loaded without the V2 line
    model_runner: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> StartupFacts:
        """As saved; keys a newer or older kvgate wrote that this one does not know are left out."""
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
