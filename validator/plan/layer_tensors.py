"""The parameters of a decoder layer as vLLM 0.32 allocates them (pure): one tensor per
allocation (q/k/v and gate/up fused, experts stacked), split by tensor parallelism or held whole
by every rank; the building blocks of plan/hybrid_weights.py and plan/gemma4_weights.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validator.errors import InputError
from validator.plan.quant import Fp8, Int8Channel, QuantFormat, Role
from validator.plan.weights import WeightCount
from validator.units import cdiv

Shards = tuple[tuple[int, int, int], ...]  # a fused weight's matrices: (out, in, count)


@dataclass(frozen=True)
class Tensor:
    """One parameter as vLLM allocates it, whole model: its elements, whether TP splits it (False:
    every rank holds it whole) and whether it is float32 whatever the model's dtype. A linear
    layer's weight that vLLM builds with the model's quantization also says where it sits (`role`,
    which a format's skip list may leave unquantized) and the matrices it fuses (`shards`: a format's
    scales are per matrix); None: vLLM never quantizes it (norms, convolutions, routers, gates)."""

    elements: int
    split: bool = True
    fp32: bool = False
    role: Role | None = None
    shards: Shards = ()


def weight(role: Role, *shards: tuple[int, int, int]) -> Tensor:
    """A quantizable linear weight fusing `shards` (out, in, count), split by TP."""
    return Tensor(sum(o * i * c for o, i, c in shards), role=role, shards=shards)


def linear(out: int, inp: int, bias: bool, row: bool = False, role: Role | None = None) -> list[Tensor]:
    """A column- (or row-) parallel linear layer: a row-parallel one's bias is on every rank."""
    w = weight(role, (out, inp, 1)) if role else Tensor(out * inp)
    return [w] + ([Tensor(out, split=not row)] if bias else [])


def attention_heads(
    h: int, heads: int, hd: int, kv: int, tp: int, bias: bool, gate: bool = False, qk_norm: bool = False,
    kv_proj: bool = True, o_bias: bool = False,
) -> list[Tensor]:  # fmt: skip
    """q (doubled for an output gate), k and v fused (none for a layer that reads another's cache:
    kv_proj False, and then no k norm), and o. With fewer KV heads than ranks each rank holds one
    (QKVParallelLinear replicates them): max(kv, tp) heads' worth over the ranks."""
    a, q, kv_out = Role.ATTENTION, heads * (2 if gate else 1) * hd, 2 * max(kv, tp) * hd if kv_proj else 0
    out = [weight(a, (q, h, 1), *([(kv_out // 2, h, 2)] if kv_proj else []))]
    out += [Tensor(q + kv_out)] if bias else []
    out += linear(h, heads * hd, o_bias, row=True, role=a)
    return out + ([Tensor((2 if kv_proj else 1) * hd, split=False)] if qk_norm else [])


def mlp(h: int, inter: int, gated: bool, bias: bool = False, role: Role = Role.MLP) -> list[Tensor]:
    up = (2 if gated else 1) * inter
    out = [weight(role, (inter, h, 2 if gated else 1))] + ([Tensor(up)] if bias else [])
    return out + linear(h, inter, bias, row=True, role=role)


def moe(h: int, experts: int, inter: int) -> list[Tensor]:
    """The router (built without the quantization: vLLM's GateLinear), the gate/up and down stacks."""
    e = Role.EXPERT
    return [Tensor(experts * h, split=False), weight(e, (inter, h, 2 * experts)), weight(e, (h, inter, experts))]


def held_bytes(t: Tensor, fmt: QuantFormat | None, dt: int) -> int:
    """A tensor's bytes: a quantizable weight in the format's bytes (each of its matrices) where the
    format's skip list does not leave its role so, else its elements in the dtype (or float32)."""
    if fmt is None or t.role is None or not fmt.applies(t.role):
        return t.elements * (4 if t.fp32 else dt)
    return sum(c * fmt.matrix_bytes(o, i) for o, i, c in t.shards)


def segments(ts: list[Tensor], fmt: QuantFormat | None, dt: int) -> tuple[tuple[int, bool], ...]:
    """The tensors of a layer the CUDA allocator rounds (plan/allocator.py), each with whether every
    rank holds it whole: a quantized weight only where the format stores it in one byte a weight
    (FP8, int8; a packed format's tensors are not listed, as in plan/weights.py)."""
    one_byte = isinstance(fmt, (Fp8, Int8Channel))
    out = []
    for t in ts:
        quantized = fmt is not None and t.role is not None and fmt.applies(t.role)
        if one_byte or not quantized:
            out.append((t.elements if quantized else held_bytes(t, fmt, dt), not t.split))
    return tuple(out)


def whole(cfg: dict[str, Any], key: str, default: int = 0) -> int:
    """A size or count config.json may leave out (the default: vLLM's, or 0 for none); given, it
    must be a whole number (a wrong one would silently miscount)."""
    v = cfg.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        mt = cfg.get("model_type")
        raise InputError(f"config.json: {key} must be a non-negative integer for a {mt} model, got {v!r:.40}")
    return v


Layers = list[list[Tensor]]


def count_of_layers(
    layers: Layers, vocab: int, h: int, fmt: QuantFormat | None, dt: int, tied: bool, **extra: Any
) -> WeightCount:
    """The count of a decoder counted tensor by tensor (plan/hybrid_weights.py, plan/nas_weights.py):
    each layer's split and whole bytes and its allocations, the vocabulary-padded embedding and LM head
    (none when tied), a final norm of hidden_size; `extra`: the family's other WeightCount terms."""

    def size(ts: list[Tensor], split: bool) -> int:
        return sum(held_bytes(t, fmt, dt) for t in ts if t.split is split)

    edge = cdiv(vocab, 64) * 64 * h * dt
    return WeightCount(
        embedding=vocab * h * dt,
        lm_head=0 if tied else vocab * h * dt,
        per_layer=tuple(size(ts, True) for ts in layers),
        per_layer_replicated=tuple(size(ts, False) for ts in layers),
        final_norm=h * dt,
        format_label=fmt.label if fmt is not None else f"{dt * 8}-bit",
        layer_tensors=tuple(segments(ts, fmt, dt) for ts in layers),
        edge_tensors=(edge, 0 if tied else edge),
        **extra,
    )
