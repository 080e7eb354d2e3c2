"""The planner: model shape + memory budget -> vLLM's KV capacity and launch limits.

Pure: the only I/O is reading config.json and safetensors headers (in
``plan_profile``); ``make_plan`` itself is a function of its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from validator import bandwidth
from validator.capacity import KVLayout, kv_dtype_bytes, layer_specs
from validator.errors import InputError
from validator.gpu_memory import DEFAULT_VLLM_VERSION, parse_version, startup_memory
from validator.model_shape import DTYPE_BYTES, ModelShape, load_config, shape_from_config, weight_bytes_from_checkpoint
from validator.profile import Profile
from validator.units import GiB
from validator.weights import count_weights

DEFAULT_BLOCK_SIZE = {"gpu": 16, "cpu": 128}
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM's SchedulerConfig default
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92


@dataclass(frozen=True)
class PlanInput:
    shape: ModelShape
    platform: str = "gpu"
    weights_bytes: int | None = None
    weights_source: str = "not given"
    kv_cache_bytes: int | None = None          # given directly
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    workspace_bytes: int = 0                   # used only when workspace_given
    block_size: int | None = None
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    num_gpu_blocks_override: int | None = None
    async_scheduling: bool | None = None
    memory_bandwidth: int | None = None        # bytes/s
    dtype: str = "auto"                        # vLLM --dtype
    workload_len: int | None = None            # prompt + output of the profile's workload
    workload_concurrency: int | None = None
    workload_request: tuple[int, int] | None = None  # (prompt, output) for the bandwidth figures
    vllm_version: str = DEFAULT_VLLM_VERSION   # whose start-up memory accounting to follow (GPU)
    pipeline_parallel_size: int = 1
    enforce_eager: bool = False                # no CUDA graphs
    weights_rank_bytes: int | None = None      # rank 0's share, when the split is known (config count)
    workspace_given: bool = False              # cache.workspace replaces the modelled non-weight terms
    pin_kv_cache: bool = False                 # GPU: pass the planned budget as --kv-cache-memory-bytes


@dataclass
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
    vllm_args: list[str]
    vllm_env: dict[str, str]
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
            "vllm_args": self.vllm_args,
            "vllm_env": self.vllm_env,
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


def _weights_rank(inp: PlanInput) -> int | None:
    if inp.weights_rank_bytes is not None:
        return inp.weights_rank_bytes
    if inp.weights_bytes is None:
        return None
    return -(-inp.weights_bytes // (inp.tensor_parallel_size * inp.pipeline_parallel_size))


def default_max_num_seqs(gpu_memory_bytes: int | None) -> int:
    """vLLM's API-server default: 1024 on GPUs of 70 GiB and more, 256 below."""
    return 1024 if gpu_memory_bytes is not None and gpu_memory_bytes >= 70 * GiB else 256


def _kv_budget(inp: PlanInput, max_num_seqs: int | None = None,
               max_num_batched_tokens: int | None = None) -> tuple[int | None, dict]:
    """KV bytes per rank and the ledger rows that produce it (on a GPU: vLLM's start-up memory of
    rank 0, term by term, each with its source)."""
    weights_rank = _weights_rank(inp)
    ledger = {"mode": None, "gpu_memory_bytes": inp.gpu_memory_bytes,
              "gpu_memory_utilization": None, "budget_bytes": None,
              "weights_bytes": weights_rank, "weights_source": inp.weights_source,
              "workspace_bytes": None, "kv_cache_bytes": None, "activation_peak_bytes": None,
              "non_torch_bytes": None, "cudagraph_bytes": None, "cudagraph_subtracted": None,
              "sources": {"weights_bytes": inp.weights_source}}
    memory = None
    if inp.platform == "gpu" and inp.gpu_memory_bytes is not None and weights_rank is not None \
            and not inp.workspace_given:
        memory = startup_memory(
            shape=inp.shape, weights_rank=weights_rank, weights_source=inp.weights_source,
            gpu_memory_bytes=inp.gpu_memory_bytes, utilization=inp.gpu_memory_utilization,
            max_num_seqs=max_num_seqs or default_max_num_seqs(inp.gpu_memory_bytes),
            max_num_batched_tokens=max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
            tp=inp.tensor_parallel_size, pp=inp.pipeline_parallel_size, version=inp.vllm_version,
            enforce_eager=inp.enforce_eager, dtype=None if inp.dtype == "auto" else
            {"half": "float16", "float": "float32"}.get(inp.dtype, inp.dtype))
        ledger.update(activation_peak_bytes=memory.activation_peak.bytes, non_torch_bytes=memory.non_torch.bytes,
                      cudagraph_bytes=memory.cudagraph.bytes, cudagraph_subtracted=memory.cudagraph_subtracted)
        ledger["sources"].update(activation_peak_bytes=memory.activation_peak.source,
                                 non_torch_bytes=memory.non_torch.source, cudagraph_bytes=memory.cudagraph.source)
        # what the three terms take together, for readers of the older single workspace figure
        ledger["workspace_bytes"] = memory.activation_peak.bytes + memory.non_torch.bytes + (
            memory.cudagraph.bytes if memory.cudagraph_subtracted else 0)
        ledger["sources"]["workspace_bytes"] = "activation peak + non-torch + CUDA graphs where subtracted"
    elif inp.workspace_given:
        ledger["sources"]["workspace_bytes"] = "cache.workspace (given: replaces the modelled terms)"
    if inp.kv_cache_bytes is not None:
        ledger.update(mode="kv_cache_bytes given", kv_cache_bytes=inp.kv_cache_bytes)
        ledger["sources"]["kv_cache_bytes"] = "given (--kv-cache-memory-bytes on a GPU)"
        if inp.gpu_memory_bytes is not None:
            ledger.update(gpu_memory_utilization=inp.gpu_memory_utilization,
                          budget_bytes=int(inp.gpu_memory_bytes * inp.gpu_memory_utilization))
            if inp.workspace_given:
                ledger["workspace_bytes"] = inp.workspace_bytes
        return inp.kv_cache_bytes, ledger
    if inp.gpu_memory_bytes is None:
        raise InputError("cache.kv_cache_bytes: give the KV budget directly (--kv-cache-memory-bytes), "
                         "or hardware.gpu_memory (--gpu-memory-bytes) to derive it")
    if weights_rank is None:
        raise InputError("model.weights_bytes: unknown; point model.path at the checkpoint or pass --weights-bytes")
    budget = int(inp.gpu_memory_bytes * inp.gpu_memory_utilization)
    if memory is not None:
        kv = memory.kv_cache_bytes
        ledger["sources"]["kv_cache_bytes"] = (f"vLLM {memory.version}'s available KV: utilization x total - "
                                               "weights - activation peak - non-torch"
                                               + (" - CUDA-graph estimate" if memory.cudagraph_subtracted else ""))
    else:
        kv = budget - weights_rank - inp.workspace_bytes
        ledger["workspace_bytes"] = inp.workspace_bytes
        ledger["sources"]["kv_cache_bytes"] = "budget - weights - workspace"
    ledger.update(mode="derived from GPU memory", gpu_memory_utilization=inp.gpu_memory_utilization,
                  budget_bytes=budget, kv_cache_bytes=kv)
    return kv, ledger


def _derive(inp: PlanInput, layout: KVLayout, block: int, shape: ModelShape, assume_mns: int | None,
            assume_mnbt: int | None, notes: list[str]):
    """The KV budget (for an activation peak at assume_mns / assume_mnbt) and the limits it allows."""
    kv_bytes, ledger = _kv_budget(inp, assume_mns, assume_mnbt)
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
            mml = -(-inp.workload_len // block) * block
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
    if mns is None:  # derive the concurrency at this context
        mns = usable // bpr
        source["max_num_seqs"] = f"derived: full-length sequences that fit at {mml} tokens"
        if mns == 0:
            reasons.append(f"one sequence of {mml} tokens needs {bpr} blocks; only {usable} are usable")
            mns = 1
    if mnbt_given is None:
        mnbt = max(DEFAULT_MAX_NUM_BATCHED_TOKENS, mns)
        bpr = layout.blocks_per_request(mml, mnbt)
    elif mnbt < mns:
        if source["max_num_seqs"] and source["max_num_seqs"].startswith("derived"):
            # vLLM refuses max_num_seqs above max_num_batched_tokens: a derived one respects it
            notes.append(f"max_num_seqs capped at max_num_batched_tokens ({mnbt}); {mns} would fit in the KV cache")
            mns = mnbt
            source["max_num_seqs"] += f", capped at max_num_batched_tokens {mnbt}"
        else:
            raise InputError(f"limits.max_num_batched_tokens: {mnbt} is below max_num_seqs ({mns}); vLLM refuses it")

    return kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr, source


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
         source) = _derive(inp, layout, block, shape, *assume, derive_notes)
        if platform != "gpu" or inp.gpu_memory_bytes is None or (mns, mnbt) == assume:
            break
        if (mns, mnbt) in seen:  # alternating by a sequence: keep the smaller, whose peak is lower
            assume = min(seen[-1], (mns, mnbt))
            (kv_bytes, ledger, num_blocks, usable, reasons, mml, mns, mnbt, bpr,
             source) = _derive(inp, layout, block, shape, *assume, derive_notes)
            break
        seen.append((mns, mnbt))
        assume = (mns, mnbt)
    notes += derive_notes
    need = mns * bpr
    if bpr > usable and not any("one sequence" in r for r in reasons):
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

    args = ["--max-model-len", str(mml), "--max-num-seqs", str(mns),
            "--max-num-batched-tokens", str(mnbt), "--block-size", str(block)]
    env: dict[str, str] = {}
    if inp.dtype != "auto":
        args += ["--dtype", inp.dtype]
    if inp.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", inp.kv_cache_dtype]
    if inp.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(inp.tensor_parallel_size)]
    if inp.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(inp.pipeline_parallel_size)]
    if inp.num_gpu_blocks_override is not None:
        args += ["--num-gpu-blocks-override", str(inp.num_gpu_blocks_override)]
    if platform == "cpu":
        if inp.kv_cache_bytes is not None:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(inp.kv_cache_bytes // GiB)
    else:
        if inp.kv_cache_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(inp.kv_cache_bytes)]
        elif inp.pin_kv_cache and kv_bytes is not None and kv_bytes > 0:
            # the planned budget, pinned: vLLM's blocks are then exactly the plan's
            args += ["--kv-cache-memory-bytes", str(kv_bytes)]
            ledger["kv_pinned"] = True
        else:
            args += ["--gpu-memory-utilization", f"{inp.gpu_memory_utilization:g}"]
        if inp.async_scheduling is False:
            args += ["--no-async-scheduling"]

    plan = Plan(
        inp=inp, layout=layout, kv_bytes_per_token=layout.kv_bytes_per_token, block_size=block,
        num_blocks=num_blocks, usable_blocks=usable, max_model_len=mml, max_num_seqs=mns,
        max_num_batched_tokens=mnbt, blocks_per_seq=bpr,
        max_concurrency=layout.max_concurrency(num_blocks, mml, mnbt) if num_blocks else 0.0,
        kv_cache_tokens=layout.kv_cache_tokens(num_blocks, mml, mnbt) if num_blocks else 0,
        kv_bytes_at_limits=bytes_at_limits, kv_payload_bytes_at_limits=payload_at_limits,
        ledger=ledger, fits=fits, reasons=reasons, ways_out=[], notes=notes, vllm_args=args,
        vllm_env=env, limits_source=source,
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


def plan_input_from_profile(profile: Profile) -> PlanInput:
    """Read the model files the profile points at; everything after is pure."""
    g = profile.get
    path = g("model", "path")
    if path is None:
        raise InputError("model.path: missing; point it at a checkpoint directory or a config.json (or use --model)")
    p = Path(path)
    if not p.exists() and g("model", "build"):
        from validator.tinymodels import ensure_tiny_model  # builds only when asked for
        ensure_tiny_model(g("model", "build"), p)
    shape = shape_from_config(load_config(p))
    weights, source = g("model", "weights_bytes"), "model.weights_bytes"
    if weights is None:
        weights = weight_bytes_from_checkpoint(p)
        source = "safetensors headers" if weights is not None else None
    if weights is None and count_weights(shape) is None:
        source = "unknown"
    count = count_weights(shape)
    tp, pp = g("hardware", "tensor_parallel_size"), g("hardware", "pipeline_parallel_size")
    rank = None
    if weights is None and count is not None:
        weights, rank = count.total_bytes, count.rank_bytes(tp, pp)
        source = ("estimated from config.json (parameter count: " + ("MoE experts, " if shape.num_experts else "")
                  + ("tied embeddings, " if shape.tie_word_embeddings else "")
                  + (f"{shape.quant_method} weights, " if shape.quant_method else "") + "split by TP/PP)")
    extra = g("vllm", "extra_args") or []
    wl_p, wl_o = g("workload", "prompt_tokens"), g("workload", "output_tokens")
    wl_len = wl_p + wl_o + (g("workload", "margin_tokens") or 0) if wl_p and wl_o else None
    return PlanInput(
        shape=shape, platform=g("hardware", "platform"), weights_bytes=weights, weights_source=source,
        kv_cache_bytes=g("cache", "kv_cache_bytes"), gpu_memory_bytes=g("hardware", "gpu_memory"),
        gpu_memory_utilization=g("hardware", "gpu_memory_utilization"),
        workspace_bytes=g("cache", "workspace") or 0, block_size=g("cache", "block_size"),
        kv_cache_dtype=g("cache", "kv_cache_dtype"), max_model_len=g("limits", "max_model_len"),
        max_num_seqs=g("limits", "max_num_seqs"), max_num_batched_tokens=g("limits", "max_num_batched_tokens"),
        tensor_parallel_size=g("hardware", "tensor_parallel_size"),
        num_gpu_blocks_override=g("cache", "num_gpu_blocks_override"),
        async_scheduling=g("vllm", "async_scheduling"), memory_bandwidth=g("hardware", "memory_bandwidth"),
        dtype=g("model", "dtype"), workload_len=wl_len, workload_concurrency=g("workload", "concurrency"),
        workload_request=(wl_p, wl_o) if wl_p and wl_o else None,
        vllm_version=g("vllm", "version") or installed_vllm_version(), pipeline_parallel_size=pp,
        enforce_eager="--enforce-eager" in extra, weights_rank_bytes=rank,
        workspace_given=g("cache", "workspace") is not None, pin_kv_cache=bool(g("cache", "pin_kv_cache")),
    )


def installed_vllm_version() -> str:
    """The vLLM this Python would run (package metadata only: vLLM is never imported)."""
    from importlib import metadata
    for name in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return DEFAULT_VLLM_VERSION


__all__ = ["PlanInput", "Plan", "make_plan", "plan_input_from_profile", "DTYPE_BYTES"]
