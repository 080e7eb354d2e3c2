"""The parameters of a state layer's mixer as vLLM 0.32 allocates them (pure): Mamba's, Mamba-2's
and Qwen's Gated DeltaNet, one tensor per allocation, the linear weights vLLM builds with the
model's quantization tagged with their role (plan/layer_tensors.py); the building blocks of
plan/hybrid_weights.py."""

from __future__ import annotations

from validator.plan.layer_tensors import Tensor, linear, weight
from validator.plan.quant import Role
from validator.plan.ssm_state import GatedDeltaNetState, Mamba1State, Mamba2State


def mamba1(h: int, s: Mamba1State, dt_rank: int, conv_bias: bool, bias: bool, norms: bool) -> list[Tensor]:
    di, ds = s.intermediate_size, s.state_size
    out = linear(di, s.conv_kernel, conv_bias) + linear(2 * di, h, bias)
    out += [Tensor((dt_rank + 2 * ds) * di), *linear(di, dt_rank, True), Tensor(di * ds, fp32=True), Tensor(di)]
    out += linear(h, di, bias, row=True)
    return out + ([Tensor(dt_rank + 2 * ds, split=False)] if norms else [])  # Jamba's dt, B and C norms


def mamba2(h: int, s: Mamba2State, conv_bias: bool, bias: bool, tp: int) -> list[Tensor]:
    groups = s.n_groups if s.n_groups % tp == 0 else tp  # vLLM supports only 1 group there
    di, nh, gs = s.intermediate_size, s.num_heads, groups * s.state_size
    conv, m = di + 2 * gs, Role.MIXER
    # in_proj: z, x, B, C, dt merged (one matrix where the groups are replicated)
    w = weight(m, (di, h, 2), (gs, h, 2), (nh, h, 1)) if s.n_groups % tp == 0 else weight(m, (di + conv + nh, h, 1))
    out = linear(conv, s.conv_kernel, conv_bias) + [w] + ([Tensor(di + conv + nh)] if bias else [])
    out += [Tensor(nh, fp32=True), Tensor(nh), Tensor(nh), *linear(h, di, bias, row=True, role=m), Tensor(di)]
    return out  # conv, in_proj, A, D, dt_bias, out_proj, the gated norm


def gated_delta_net(h: int, s: GatedDeltaNetState, fused: bool = True) -> list[Tensor]:
    """conv1d, in_proj_qkvz, in_proj_ba, dt_bias, A_log, the gated norm, out_proj. `fused`: Qwen3-Next
    stores qkvz and ba as one interleaved matrix each; Qwen3.5 as q, k, v, z and b, a (its
    MergedColumnParallelLinear's shards, what a format's per-matrix scales count)."""
    kd, vd, nv = s.num_k_heads * s.head_k_dim, s.num_v_heads * s.head_v_dim, s.num_v_heads
    m, g = Role.MIXER, Role.MIXER_GATES
    qkvz = weight(m, (2 * kd + 2 * vd, h, 1)) if fused else weight(m, (kd, h, 2), (vd, h, 2))
    ba = weight(g, (2 * nv, h, 1)) if fused else weight(g, (nv, h, 2))
    out = [Tensor((2 * kd + vd) * s.conv_kernel), qkvz, ba]
    return out + [Tensor(nv), Tensor(nv, fp32=True), Tensor(s.head_v_dim, split=False), weight(m, (h, vd, 1))]
