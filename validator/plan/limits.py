"""The planner: KV budget + model shape -> blocks, max_model_len, max_num_seqs, and whether
they fit (with the ways out when not). Pure: a function of its PlanInput."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

from validator.errors import InputError
from validator.plan import bandwidth, parallel_fit, speculative
from validator.plan.capacity import PER_REQUEST_TOKENS_FROM, KVLayout, StateSetup, auto_kv_dtype, layer_specs
from validator.plan.cpu_serving import amx_mla, cpu_serving_note, reference_mla, reference_mla_budget
from validator.plan.gpu_memory import parse_version
from validator.plan.ledger import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    PlanInput,
    kv_budget,
)
from validator.plan.model_shape import ModelShape
from validator.plan.result import Plan
from validator.plan.rope import YARN_FROM
from validator.plan.ways_out import ways_out
from validator.units import GiB, cdiv


class Derived(NamedTuple):
    """The budget and the limits it allows, for one assumption about the activation peak."""

    kv_bytes: int
    ledger: dict[str, Any]
    num_blocks: int
    usable: int
    reasons: list[str]
    mml: int
    mns: int
    mnbt: int
    bpr: int
    source: dict[str, str | None]
    one_too_long: bool


def context_limit(inp: PlanInput, shape: ModelShape) -> int | None:
    """The longest max_model_len vLLM derives for the model at the planned version (and its default
    one): rope.context_limits, or max_position_embeddings where the shape does not say."""
    before, since = shape.context_limits
    return (since if parse_version(inp.vllm_version) >= YARN_FROM else before) or shape.max_position_embeddings


def _derive(
    inp: PlanInput,
    layout: KVLayout,
    block: int,
    shape: ModelShape,
    assume_mns: int | None,
    assume_mnbt: int | None,
    notes: list[str],
) -> Derived:
    """The KV budget (for an activation peak at assume_mns / assume_mnbt) and the limits it allows."""
    kv_bytes, ledger = kv_budget(inp, assume_mns, assume_mnbt)
    if inp.platform == "cpu" and inp.kv_cache_bytes is not None and inp.kv_cache_bytes % GiB:
        raise InputError(
            "cache.kv_cache_bytes: on the CPU vLLM takes whole GiB (VLLM_CPU_KVCACHE_SPACE); "
            "use 1GiB, 2GiB, ... and cache.num_gpu_blocks_override for a smaller pool"
        )
    num_blocks = layout.num_blocks(max(kv_bytes, 0), inp.num_gpu_blocks_override)
    usable = max(num_blocks - 1, 0)
    reasons: list[str] = []
    if kv_bytes <= 0 and inp.num_gpu_blocks_override is None:
        reasons.append(
            f"no memory left for the KV cache: weights + activations + non-torch memory exceed the budget by "
            f"{-kv_bytes / GiB:.2f} GiB"
        )

    max_pos = context_limit(inp, shape)
    mml, mns = inp.max_model_len, inp.max_num_seqs
    source: dict[str, str | None] = {
        "max_model_len": "given" if mml else None,
        "max_num_seqs": "given" if mns else None,
    }
    if mml is not None and max_pos is not None and mml > max_pos and not inp.allow_long_context:
        raise InputError(
            f"limits.max_model_len: {mml} exceeds the longest context vLLM {inp.vllm_version} derives for this "
            f"model ({max_pos}: max_position_embeddings and its rope scaling); lower it, or set "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in vllm.env (vLLM's override: positions past it go wrong)"
        )
    if mml is not None and max_pos is not None and mml > max_pos:
        note = (
            f"max_model_len {mml} is past the {max_pos} vLLM derives for the model: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "lets vLLM start with it (vLLM warns that positions past the derived length go wrong)"
        )
        notes.extend([note] if note not in notes else [])
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
                raise InputError(
                    "limits.max_model_len: the config has no max_position_embeddings; "
                    "set limits.max_model_len or limits.max_num_seqs"
                )
            mml = max_pos
            scaled = " x its rope factor, as vLLM derives it" if max_pos != shape.max_position_embeddings else ""
            source["max_model_len"] = "max_position_embeddings" + scaled
    mnbt_given = inp.max_num_batched_tokens
    mnbt = mnbt_given or max(DEFAULT_MAX_NUM_BATCHED_TOKENS, mns or 1)

    if mml is None:  # derive the longest context for mns sequences
        assert mns is not None  # one of the two is given (or came from the workload) when the other is not
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
            source["max_num_seqs"] = f"{source['max_num_seqs']}, capped at max_num_batched_tokens {mnbt}"
        else:
            raise InputError(f"limits.max_num_batched_tokens: {mnbt} is below max_num_seqs ({mns}); vLLM refuses it")

    return Derived(kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr, source, one_too_long)


def make_plan(inp: PlanInput, explore: bool = True) -> Plan:
    platform = inp.platform
    version = parse_version(inp.vllm_version)  # a version that cannot be read is bad input, on any platform
    parallel_fit.check(inp.shape, inp.tensor_parallel_size, inp.expert_parallel, version, inp.moe_backend)
    block = inp.block_size or DEFAULT_BLOCK_SIZE[platform]
    notes: list[str] = []
    kv_dtype, note = auto_kv_dtype(inp.kv_cache_dtype, inp.checkpoint_kv_cache_dtype, version)  # a ModelOpt one's
    notes += [note] if note else []
    inp = replace(inp, kv_cache_dtype=kv_dtype)
    if reference_mla(inp):
        if block != 16:
            notes.append(f"vLLM's CPU MLA backend forces block_size 16 (asked {block})")
            block = 16
        notes.append(
            "vLLM's CPU MLA backend (CPU_MLA) turns chunked prefill and prefix caching off and raises "
            "max_num_batched_tokens to max(max_model_len, 2048) (vllm/platforms/cpu.py)"
        )
        inp = replace(inp, enable_prefix_caching=False)
    elif amx_mla(inp):
        notes.append("vLLM's AMX MLA kernel (AMX_MLA, on AMX tiles) keeps the prefix cache and chunked prefill")
    if platform == "cpu" and not reference_mla(inp) and block % 32:
        what = "AMX MLA kernel" if amx_mla(inp) else "attention backend"
        raise InputError(f"cache.block_size: the CPU {what} needs a multiple of 32, got {block}")
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
    pool_shape, spec_tokens = speculative.kv_shape(shape, inp.speculative, notes)
    setup = StateSetup(
        platform=platform,
        prefix_caching=inp.enable_prefix_caching,
        ssm_dtype=inp.mamba_ssm_cache_dtype,
        spec_tokens=spec_tokens,
    )
    layout = KVLayout.from_specs(
        layer_specs(pool_shape, block, inp.kv_cache_dtype, inp.tensor_parallel_size, setup),
        max_concurrent_batches=2 if async_sched else 1,
    )
    attention_free = layout.block_size == 0
    if layout.block_size and layout.block_size != block:
        notes.append(
            f"block_size {layout.block_size}: vLLM raises the attention block until one page holds a layer's "
            f"state (asked {block})"
        )
        block = layout.block_size
    if attention_free:  # vLLM's default for them (ModelConfig.is_prefix_caching_supported): launched so too
        notes.append("no attention layers: one state per request, no prefix caching (vLLM's default for them)")
        inp = replace(inp, enable_prefix_caching=False)
    elif why := cpu_serving_note(inp, layout):  # measured on tiny models of each (plan/cpu_serving.py)
        notes.append(why)

    # on a GPU the activation peak grows with max_num_seqs and max_num_batched_tokens, which may be
    # derived from the budget it shrinks: settle on limits that hold with their own peak
    assume: tuple[int | None, int | None] = (inp.max_num_seqs, inp.max_num_batched_tokens)
    seen: list[tuple[int, int]] = []
    for _ in range(4):
        derive_notes: list[str] = []
        (kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr, source, one_too_long) = _derive(
            inp, layout, block, shape, *assume, derive_notes
        )
        if platform != "gpu" or inp.gpu_memory_bytes is None or (mns, mnbt) == assume:
            break
        if (mns, mnbt) in seen:  # alternating by a sequence: keep the smaller, whose peak is lower
            assume = min(seen[-1], (mns, mnbt))  # noqa: PLW2901
            (kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr, source, one_too_long) = _derive(
                inp, layout, block, shape, *assume, derive_notes
            )
            break
        seen.append((mns, mnbt))
        assume = (mns, mnbt)
    notes += derive_notes
    if reference_mla(inp):
        mnbt, asked = reference_mla_budget(mml), inp.max_num_batched_tokens
        source["max_num_batched_tokens"] = "vLLM's CPU MLA backend: max(max_model_len, 2048)" + (
            f" (asked {asked})" if asked not in (None, mnbt) else ""
        )
    need = mns * bpr
    if bpr > usable and not one_too_long:
        est = layout.largest_model_len(usable, mml, mnbt)
        reasons.append(
            f"vLLM refuses to start: one request of {mml} tokens needs {bpr} blocks, "
            f"{usable} usable (vLLM's estimated maximum model length: {est})"
        )
    elif need > usable and inp.overcommit:  # the sweep goes past the KV limit on purpose
        # a request at its largest: its reservation where no group gives blocks back (a window or a chunk)
        peak = layout.decode_peak(mml) if mml > 0 else bpr
        notes.append(
            f"overcommitted for the sweep: {mns} sequences x {bpr} blocks = {need} blocks > {usable} usable; "
            f"the KV cache holds {usable // peak} full-length sequences"
            + (f" ({peak} blocks each at their largest, windows' or chunks' blocks given back)" if peak != bpr else "")
            + f", so vLLM preempts from {usable // peak + 1} decode-heavy requests at once"
        )
    elif need > usable:
        reasons.append(
            f"{mns} sequences x {bpr} blocks = {need} blocks > {usable} usable blocks: "
            f"requests would queue or be preempted at the limits"
        )
    fits = not reasons

    bytes_at_limits = need * layout.bytes_per_block
    payload_at_limits = mns * layout.payload_bytes(mml)
    null_block = layout.bytes_per_block
    ledger.update(
        kv_bytes_at_limits=bytes_at_limits,
        kv_payload_bytes_at_limits=payload_at_limits,
        null_block_bytes=null_block,
        kv_headroom_bytes=None
        if kv_bytes is None
        else (
            (num_blocks * layout.bytes_per_block if inp.num_gpu_blocks_override else kv_bytes)
            - null_block
            - bytes_at_limits
        ),
    )
    if ledger["weights_bytes"] is not None and ledger["workspace_bytes"] is not None:
        ledger["required_bytes"] = ledger["weights_bytes"] + ledger["workspace_bytes"] + bytes_at_limits
    else:
        ledger["required_bytes"] = None

    if platform == "gpu" and inp.kv_cache_bytes is None and inp.pin_kv_cache and kv_bytes is not None and kv_bytes > 0:
        ledger["kv_pinned"] = True  # the launcher passes the planned budget: vLLM's blocks are the plan's

    plan = Plan(
        inp=inp,
        layout=layout,
        kv_bytes_per_token=layout.kv_bytes_per_token,
        block_size=mml if attention_free else block,  # vLLM's mamba_block_size is max_model_len then
        num_blocks=num_blocks,
        usable_blocks=usable,
        max_model_len=mml,
        max_num_seqs=mns,
        max_num_batched_tokens=mnbt,
        blocks_per_seq=bpr,
        max_concurrency=layout.max_concurrency(num_blocks, mml, mnbt) if num_blocks else 0.0,
        kv_cache_tokens=layout.kv_cache_tokens(
            num_blocks, mml, mnbt, parse_version(inp.vllm_version) < PER_REQUEST_TOKENS_FROM
        )
        if num_blocks
        else 0,
        kv_bytes_at_limits=bytes_at_limits,
        kv_payload_bytes_at_limits=payload_at_limits,
        ledger=ledger,
        fits=fits,
        reasons=reasons,
        ways_out=[],
        notes=notes,
        limits_source=source,
    )
    plan.bandwidth = bandwidth.at_limits(
        shape, layout, mml, mns, inp.weights_bytes, inp.tensor_parallel_size, inp.memory_bandwidth, inp.workload_request
    )
    if not fits and explore:
        plan.ways_out = ways_out(inp, plan, make_plan)
    return plan
