"""The plan for people: the memory ledger and the limits as a plain-text table."""

from __future__ import annotations

from validator.units import GiB, human


def _g(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GiB:,.3f} GiB"


def plan_text(plan_json: dict) -> str:
    p = plan_json
    m = p["model"]
    L = p["ledger"]
    rows: list[tuple[str, str, str]] = []

    def row(label: str, value: str, note: str = "") -> None:
        rows.append((label, value, note))

    out = [
        f"model      {m['architecture']} ({m['model_type']}): {m['num_layers']} layers [{m['layer_kinds']}], "
        f"{m['num_attention_heads']} query heads, {m['num_kv_heads']} KV heads, head_dim {m['head_dim']} "
        f"({m['head_dim_source']}), {m['dtype']}"
    ]
    if m["sliding_window"]:
        out.append(f"           sliding window {m['sliding_window']} tokens")
    own: dict[tuple[int, int], list[int]] = {}  # the layers of each shape of their own
    for i, d, k in m.get("own_layer_heads") or ():
        own.setdefault((d, k), []).append(i)
    for (d, k), idx in own.items():
        out.append(
            f"           layer{'s' if len(idx) > 1 else ''} {', '.join(map(str, idx))}: head_dim {d}, {k} KV heads"
        )
    blocks = sorted({g["block_size"] for g in p["kv_groups"] if g.get("block_size")})
    if len(blocks) > 1:
        out.append(
            f"           block sizes {', '.join(map(str, blocks))}: vLLM raises the smaller pages' blocks "
            "to the largest page"
        )
    out.append(
        f"platform   {p['platform']}, tensor parallel {p['tensor_parallel_size']}, KV dtype {p['kv_cache_dtype']}"
    )
    out.append("")
    out.append("KV cache per rank")
    out.append(f"  per token            {p['kv_bytes_per_token']:>14,} B  ({human(p['kv_bytes_per_token'])})")
    out.append(
        f"  block                {p['block_size']:>14,} tokens, {p['bytes_per_block']:,} B per pool block "
        f"({len(p['kv_groups'])} group{'s' if len(p['kv_groups']) > 1 else ''})"
    )
    out.append(
        f"  blocks               {p['num_blocks']:>14,} (usable {p['usable_blocks']:,}: one is vLLM's null block)"
    )
    out.append(f"  KV tokens (vLLM)     {p['kv_cache_tokens']:>14,}")
    out.append(
        f"  max concurrency      {p['max_concurrency']:>14.2f}x at {p['max_model_len']:,} tokens (vLLM's figure)"
    )
    out.append("")
    out.append("Limits")
    src = p.get("limits_source", {})
    out.append(f"  max_model_len        {p['max_model_len']:>14,}  {src.get('max_model_len') or ''}")
    out.append(f"  max_num_seqs         {p['max_num_seqs']:>14,}  {src.get('max_num_seqs') or ''}")
    out.append(f"  max_num_batched_tok  {p['max_num_batched_tokens']:>14,}  {src.get('max_num_batched_tokens') or ''}")
    out.append(f"  blocks per sequence  {p['blocks_per_seq']:>14,}")
    out.append("")
    out.append(f"Memory ledger ({L['mode']})")
    if L["gpu_memory_bytes"] is not None:
        row("GPU memory", _g(L["gpu_memory_bytes"]))
    if L["budget_bytes"] is not None:
        row(f"x utilization {L['gpu_memory_utilization']:g}", _g(L["budget_bytes"]), "budget")
    src = L.get("sources") or {}
    row("- weights", _g(L["weights_bytes"]), L["weights_source"] or "")
    if L.get("activation_peak_bytes") is not None:  # vLLM's start-up memory, term by term
        row("- activation peak", _g(L["activation_peak_bytes"]), src.get("activation_peak_bytes", ""))
        row("- non-torch", _g(L["non_torch_bytes"]), src.get("non_torch_bytes", ""))
        row(
            "- CUDA graphs" if L.get("cudagraph_subtracted") else "  (CUDA graphs)",
            _g(L["cudagraph_bytes"]),
            src.get("cudagraph_bytes", ""),
        )
    elif L["workspace_bytes"] is not None:
        row("- workspace", _g(L["workspace_bytes"]), src.get("workspace_bytes", "activations, CUDA graphs, non-torch"))
    row("= KV cache", _g(L["kv_cache_bytes"]), src.get("kv_cache_bytes", ""))
    row(
        "KV at limits",
        _g(L["kv_bytes_at_limits"]),
        f"allocated, block-rounded ({p['max_num_seqs']} x {p['max_model_len']:,} tokens)",
    )
    row("  payload", _g(L["kv_payload_bytes_at_limits"]), "unrounded")
    row("  null block", _g(L["null_block_bytes"]))
    row("headroom", _g(L["kv_headroom_bytes"]), "KV cache - null block - KV at limits")
    if L.get("required_bytes") is not None:
        budget = L["budget_bytes"]
        cmp = "" if budget is None else ("<=" if L["required_bytes"] <= budget else ">") + f" budget {_g(budget)}"
        row("required", _g(L["required_bytes"]), f"weights + other terms + KV at limits {cmp}")
    w = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        out.append(f"  {label:<{w}}  {value:>16}  {note}")
    bw = p.get("bandwidth") or {}
    if bw.get("weight_read_bytes_per_step") is not None:
        out.append("")
        out.append("Decode bandwidth at the limits (per rank, every sequence at full length)")
        out.append(f"  each decode step reads the weights once: {_g(bw['weight_read_bytes_per_step'])}")
        out.append(f"  and every cached position of every sequence: {_g(bw['kv_read_bytes_per_step'])}")
        if bw.get("crossover_batch") is not None:
            out.append(
                f"  from {bw['crossover_batch']} sequences on, reading the KV cache costs more than reading the weights"
            )
        rq = bw.get("request")
        if rq and rq.get("read_to_stored") is not None:  # None: no KV grows with the context
            out.append(
                f"  one request of {rq['prompt_tokens']:,} + {rq['output_tokens']:,} tokens reads "
                f"{_g(rq['kv_bytes_read'])} of KV over its decode ({rq['token_reads']:,} position reads) "
                f"and stores {_g(rq['kv_bytes_stored'])}: {rq['read_to_stored']:g}x more read than stored"
            )
        if bw.get("decode_step_floor_ms") is not None:
            out.append(
                f"  so a decode step takes at least {bw['decode_step_floor_ms']:.2f} ms at "
                f"{bw['memory_bandwidth_bytes_per_s'] / 1e12:g} TB/s: the floor for inter-token latency"
            )
    for n in p.get("notes", []):
        out.append(f"note: {n}")
    if p.get("sweep"):
        s0 = p["sweep"][0]
        out.append("")
        out.append(
            f"Sweep (--sweep): {len(p['sweep'])} steps of {s0['prompt_tokens']:,} + {s0['output_tokens']:,} tokens "
            f"a request; the KV cache holds {s0['held_to_last_token']} to their last token (a bisection for the "
            "SLO capacity adds steps during the run)"
        )
        for st in p["sweep"]:
            wait = f", {st['waiting']} wait{'s' if st['waiting'] == 1 else ''}" if st["waiting"] else ""
            past = ": past the KV limit, vLLM must preempt" if st["past_kv_limit"] else ""
            out.append(
                f"  {st['run']:<12} {st['concurrency']} in flight, {st['requests']} requests: "
                f"{st['running']} run at the first tokens{wait}{past}"
            )
    out.append("")
    if p["fits"]:
        out.append(f"FITS: {p['max_num_seqs']} sequences x {p['max_model_len']:,} tokens")
        env = " ".join(f"{k}={v}" for k, v in p["vllm_env"].items())
        out.append("vllm serve args: " + (env + " " if env else "") + " ".join(p["vllm_args"]))
        return "\n".join(out)
    # no launch line for limits that do not fit: only the ways out, each with its number
    out.append("DOES NOT FIT")
    for r in p["reasons"]:
        out.append(f"  - {r}")
    if p["ways_out"]:
        out.append("ways out (plan and measure again after any of them):")
        for w_ in p["ways_out"]:
            out.append(f"  - {w_['way']}: {w_['text']}")
    else:
        out.append("no way out found by the planner: a smaller model, more memory or more GPUs")
    return "\n".join(out)
