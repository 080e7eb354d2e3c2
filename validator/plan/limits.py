"""The planner: KV budget + model shape -> blocks, max_model_len, max_num_seqs, and whether
they fit (with the ways out when not). Pure: a function of its PlanInput."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from validator.errors import InputError
from validator.plan import bandwidth
from validator.plan.capacity import KVLayout, kv_dtype_bytes, layer_specs
from validator.plan.gpu_memory import parse_version
from validator.plan.ledger import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    PlanInput,
    kv_budget,
)
from validator.plan.model_shape import ModelShape
from validator.units import GiB, cdiv


@dataclass(kw_only=True)
class Plan:
    inp: PlanInput
    layout: KVLayout
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    usable_blocks: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    blocks_per_seq: int
    max_concurrency: float
    kv_cache_tokens: int
    kv_bytes_at_limits: int
    kv_payload_bytes_at_limits: int
    ledger: dict
    fits: bool
    reasons: list[str]
    ways_out: list[dict]
    notes: list[str]
    bandwidth: dict | None = None
    limits_source: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        s = self.inp.shape
        return {
            "model": {
                "architecture": s.architecture, "model_type": s.model_type, "num_layers": s.num_layers,
                "num_attention_heads": s.num_attention_heads, "num_kv_heads": s.num_kv_heads,
                "head_dim": s.head_dim, "head_dim_source": s.head_dim_source, "dtype": s.dtype,
                "layer_kinds": _runs(s.layer_kinds), "sliding_window": s.sliding_window,
                "max_position_embeddings": s.max_position_embeddings,
                "mla_latent_dim": s.mla.latent_dim if s.mla else None,
            },
            "platform": self.inp.platform,
            "vllm_version": self.inp.vllm_version,
            "pipeline_parallel_size": self.inp.pipeline_parallel_size,
            "kv_cache_dtype": self.inp.kv_cache_dtype,
            "tensor_parallel_size": self.inp.tensor_parallel_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "block_size": self.block_size,
            "bytes_per_block": self.layout.bytes_per_block,
            "kv_groups": [{"kind": type(g.spec).__name__, "layers": g.num_layers,
                           "page_size_bytes": g.spec.page_size_bytes} for g in self.layout.groups],
            "blocks_per_seq": self.blocks_per_seq,
            "num_blocks": self.num_blocks,
            "usable_blocks": self.usable_blocks,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "limits_source": self.limits_source,
            "kv_bytes_at_limits": self.kv_bytes_at_limits,
            "kv_payload_bytes_at_limits": self.kv_payload_bytes_at_limits,
            "ledger": self.ledger,
            "fits": self.fits,
            "reasons": self.reasons,
            "ways_out": self.ways_out,
            "notes": self.notes,
            "bandwidth": self.bandwidth,
        }


def _runs(kinds: tuple[str, ...]) -> str:
    """Layer kinds compactly: 'full x36' or 'sliding x1, full x1'."""
    out: list[list] = []
    for k in kinds:
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    return ", ".join(f"{k} x{n}" for k, n in out)


def _derive(inp: PlanInput, layout: KVLayout, block: int, shape: ModelShape, assume_mns: int | None,
            assume_mnbt: int | None, notes: list[str]):
    """The KV budget (for an activation peak at assume_mns / assume_mnbt) and the limits it allows."""
    kv_bytes, ledger = kv_budget(inp, assume_mns, assume_mnbt)
    if inp.platform == "cpu" and inp.kv_cache_bytes is not None and inp.kv_cache_bytes % GiB:
        raise InputError("cache.kv_cache_bytes: on the CPU vLLM takes whole GiB (VLLM_CPU_KVCACHE_SPACE); "
                         "use 1GiB, 2GiB, ... and cache.num_gpu_blocks_override for a smaller pool")
    num_blocks = layout.num_blocks(max(kv_bytes, 0), inp.num_gpu_blocks_override)
    usable = max(num_blocks - 1, 0)
    reasons: list[str] = []
    if kv_bytes <= 0 and inp.num_gpu_blocks_override is None:
        reasons.append(f"no memory left for the KV cache: weights + activations + non-torch memory exceed the budget by "
                       f"{-kv_bytes / GiB:.2f} GiB")

    max_pos = shape.max_position_embeddings
    mml, mns = inp.max_model_len, inp.max_num_seqs
    source = {"max_model_len": "given" if mml else None, "max_num_seqs": "given" if mns else None}
    if mml is not None and max_pos is not None and mml > max_pos:
        raise InputError(f"limits.max_model_len: {mml} exceeds the model's max_position_embeddings ({max_pos}); "
                         "lower it (vLLM refuses longer contexts)")
    if mml is None and mns is None:
        if inp.workload_len is not None:
            mml = cdiv(inp.workload_len, block) * block
            if max_pos is not None:
                mml = min(mml, max_pos)
            source["max_model_len"] = "workload (prompt + output + margin, block-rounded)"
        if inp.workload_concurrency is not None:
            mns = inp.workload_concurrency
            source["max_num_seqs"] = "workload.concurrency"
        if mml is None and mns is None:
            if max_pos is None:
                raise InputError("limits.max_model_len: the config has no max_position_embeddings; "
                                 "set limits.max_model_len or limits.max_num_seqs")
            mml = max_pos
            source["max_model_len"] = "max_position_embeddings"
    mnbt_given = inp.max_num_batched_tokens
    mnbt = mnbt_given or max(DEFAULT_MAX_NUM_BATCHED_TOKENS, mns or 1)

    if mml is None:  # derive the longest context for mns sequences
        upper = max_pos if max_pos is not None else max(usable, 1) * block
        mml = layout.largest_model_len(usable, upper, mnbt, num_seqs=mns)
        source["max_model_len"] = f"derived: longest context for {mns} sequences"
        if mml == 0:
            reasons.append(f"not even one token per sequence fits for {mns} sequences in {usable} usable blocks")
            mml = block
    bpr = layout.blocks_per_request(mml, mnbt)
    mns_derived = one_too_long = False
    if mns is None:  # derive the concurrency at this context
        mns = usable // bpr
        mns_derived = True
        source["max_num_seqs"] = f"derived: full-length sequences that fit at {mml} tokens"
        if mns == 0:
            reasons.append(f"one sequence of {mml} tokens needs {bpr} blocks; only {usable} are usable")
            mns, one_too_long = 1, True
    if mnbt_given is None:
        mnbt = max(DEFAULT_MAX_NUM_BATCHED_TOKENS, mns)
        bpr = layout.blocks_per_request(mml, mnbt)
    elif mnbt < mns:
        if mns_derived:
            # vLLM refuses max_num_seqs above max_num_batched_tokens: a derived one respects it
            notes.append(f"max_num_seqs capped at max_num_batched_tokens ({mnbt}); {mns} would fit in the KV cache")
            mns = mnbt
            source["max_num_seqs"] += f", capped at max_num_batched_tokens {mnbt}"
        else:
            raise InputError(f"limits.max_num_batched_tokens: {mnbt} is below max_num_seqs ({mns}); vLLM refuses it")

    return kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr, source, one_too_long


def make_plan(inp: PlanInput, explore: bool = True) -> Plan:
    platform = inp.platform
    parse_version(inp.vllm_version)  # a version that cannot be read is bad input, on any platform
    block = inp.block_size or DEFAULT_BLOCK_SIZE[platform]
    notes: list[str] = []
    if inp.shape.mla is not None and platform == "cpu" and block != 16:
        notes.append(f"vLLM's CPU MLA backend forces block_size 16 (asked {block})")
        block = 16
    if platform == "cpu" and inp.shape.mla is None and block % 32:
        raise InputError(f"cache.block_size: the CPU attention backend needs a multiple of 32, got {block}")
    if inp.shape.dtype == "float32" and inp.dtype == "auto":
        notes.append("float32 checkpoint: vLLM serves it (and its KV cache) in 16-bit with --dtype auto")
    if inp.kv_cache_dtype == "auto" and inp.shape.dtype == "float32" and inp.dtype == "auto":
        shape_dtype = "bfloat16"
    elif inp.dtype not in ("auto",):
        shape_dtype = {"half": "float16", "float": "float32"}.get(inp.dtype, inp.dtype)
    else:
        shape_dtype = inp.shape.dtype
    shape = replace(inp.shape, dtype=shape_dtype)
    async_sched = inp.async_scheduling if inp.async_scheduling is not None else platform == "gpu"
    if platform == "cpu" and async_sched:
        notes.append("vLLM turns async scheduling off on the CPU")
        async_sched = False
    layout = KVLayout.from_specs(layer_specs(shape, block, inp.kv_cache_dtype, inp.tensor_parallel_size),
                                 max_concurrent_batches=2 if async_sched else 1)

    # on a GPU the activation peak grows with max_num_seqs and max_num_batched_tokens, which may be
    # derived from the budget it shrinks: settle on limits that hold with their own peak
    assume = (inp.max_num_seqs, inp.max_num_batched_tokens)
    seen: list[tuple] = []
    for _ in range(4):
        derive_notes: list[str] = []
        (kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr,
         source, one_too_long) = _derive(inp, layout, block, shape, *assume, derive_notes)
        if platform != "gpu" or inp.gpu_memory_bytes is None or (mns, mnbt) == assume:
            break
        if (mns, mnbt) in seen:  # alternating by a sequence: keep the smaller, whose peak is lower
            assume = min(seen[-1], (mns, mnbt))
            (kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr,
             source, one_too_long) = _derive(inp, layout, block, shape, *assume, derive_notes)
            break
        seen.append((mns, mnbt))
        assume = (mns, mnbt)
    notes += derive_notes
    need = mns * bpr
    if bpr > usable and not one_too_long:
        est = layout.largest_model_len(usable, mml, mnbt)
        reasons.append(f"vLLM refuses to start: one request of {mml} tokens needs {bpr} blocks, "
                       f"{usable} usable (vLLM's estimated maximum model length: {est})")
    elif need > usable:
        reasons.append(f"{mns} sequences x {bpr} blocks = {need} blocks > {usable} usable blocks: "
                       f"requests would queue or be preempted at the limits")
    fits = not reasons

    bytes_at_limits = need * layout.bytes_per_block
    payload_at_limits = mns * layout.payload_bytes(mml)
    null_block = layout.bytes_per_block
    ledger.update(
        kv_bytes_at_limits=bytes_at_limits,
        kv_payload_bytes_at_limits=payload_at_limits,
        null_block_bytes=null_block,
        kv_headroom_bytes=None if kv_bytes is None else (
            (num_blocks * layout.bytes_per_block if inp.num_gpu_blocks_override else kv_bytes)
            - null_block - bytes_at_limits),
    )
    if ledger["weights_bytes"] is not None and ledger["workspace_bytes"] is not None:
        ledger["required_bytes"] = ledger["weights_bytes"] + ledger["workspace_bytes"] + bytes_at_limits
    else:
        ledger["required_bytes"] = None

    if platform == "gpu" and inp.kv_cache_bytes is None and inp.pin_kv_cache and kv_bytes is not None \
            and kv_bytes > 0:
        ledger["kv_pinned"] = True  # the launcher passes the planned budget: vLLM's blocks are the plan's

    plan = Plan(
        inp=inp, layout=layout, kv_bytes_per_token=layout.kv_bytes_per_token, block_size=block,
        num_blocks=num_blocks, usable_blocks=usable, max_model_len=mml, max_num_seqs=mns,
        max_num_batched_tokens=mnbt, blocks_per_seq=bpr,
        max_concurrency=layout.max_concurrency(num_blocks, mml, mnbt) if num_blocks else 0.0,
        kv_cache_tokens=layout.kv_cache_tokens(num_blocks, mml, mnbt) if num_blocks else 0,
        kv_bytes_at_limits=bytes_at_limits, kv_payload_bytes_at_limits=payload_at_limits,
        ledger=ledger, fits=fits, reasons=reasons, ways_out=[], notes=notes, limits_source=source,
    )
    plan.bandwidth = bandwidth.at_limits(shape, layout, mml, mns, inp.weights_bytes,
                                         inp.tensor_parallel_size, inp.memory_bandwidth, inp.workload_request)
    if not fits and explore:
        plan.ways_out = ways_out(inp, plan)
    return plan


def ways_out(inp: PlanInput, plan: Plan) -> list[dict]:
    """What would fit instead, each with the number it gives."""
    out = []
    mml, mns, usable = plan.max_model_len, plan.max_num_seqs, plan.usable_blocks
    layout, mnbt = plan.layout, plan.max_num_batched_tokens
    shorter = layout.largest_model_len(usable, mml, mnbt, num_seqs=mns)
    if shorter > 0:
        out.append({"way": "shorter context", "max_model_len": shorter, "max_num_seqs": mns,
                    "text": f"--max-model-len {shorter} keeps {mns} sequences"})
    bpr = layout.blocks_per_request(mml, mnbt)
    fewer = usable // bpr if bpr else 0
    if fewer >= 1:
        out.append({"way": "fewer sequences", "max_model_len": mml, "max_num_seqs": fewer,
                    "text": f"--max-num-seqs {fewer} keeps {mml} tokens per sequence"})
    if kv_dtype_bytes(inp.kv_cache_dtype, plan.inp.shape.dtype) > 1 and inp.shape.mla is None:
        alt = make_plan(replace(inp, kv_cache_dtype="fp8", max_model_len=mml, max_num_seqs=None), explore=False)
        out.append({"way": "fp8 KV cache", "max_model_len": mml, "max_num_seqs": alt.max_num_seqs if alt.fits else 0,
                    "fits": alt.max_num_seqs >= mns and alt.fits,
                    "text": f"--kv-cache-dtype fp8 fits {alt.max_num_seqs if alt.fits else 0} sequences of {mml} "
                            "tokens (check quality)"})
    if inp.kv_cache_bytes is None and inp.num_gpu_blocks_override is None:
        for tp in (2, 4, 8):
            if tp <= inp.tensor_parallel_size or inp.shape.num_attention_heads % tp:
                continue
            try:
                alt = make_plan(replace(inp, tensor_parallel_size=tp, max_model_len=mml, max_num_seqs=mns),
                                explore=False)
            except InputError:
                continue
            if alt.fits:
                out.append({"way": "more GPUs", "tensor_parallel_size": tp, "max_model_len": mml,
                            "max_num_seqs": mns, "text": f"--tensor-parallel-size {tp} fits {mns} x {mml} tokens"})
                break
    return out
