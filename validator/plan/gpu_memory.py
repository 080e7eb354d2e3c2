"""vLLM's start-up memory on one GPU rank, by vLLM version (pure).

vLLM sizes the KV cache after loading the weights and running one profile step:

    available KV = utilization x total - weights - torch activation peak - non-torch increase
                   - CUDA-graph estimate (only where the version subtracts it)

Each term below carries where its figure comes from. Read off the public start-ups in
tests/data/vllm-gpu-starts/starts.csv (H100s at vLLM 0.15-0.19, Turing cards at 0.28; the V2 model
runner's terms, where the release or vllm.env selects it, in runner_v2.py; the V1 sampler warm-up's
paths, read off 0.10.2-0.19, in sampler.py); docs/kv-accounting.md gives the error distribution.
The constants are the logs' figures, not tuned to make tests pass: every row with a config is
predicted end to end from config.json and the launch flags.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validator.errors import InputError
from validator.plan import runner_v2, sampler
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.moe_workspace import workspace_bytes
from validator.units import GiB, MiB

DEFAULT_VLLM_VERSION = "0.32.0"
# the activation peak of the profile run follows the sampler warm-up (sampler.py: its factor by the top-k/top-p
# path the version takes), unless the forward pass of max_num_batched_tokens tokens through the MLP peaks higher:
# about 5 MLP-wide activations (Llama-3.1-8B in float32: 2.19 GiB predicted, 2.21 logged; pipeline
# stages without the LM head: 1.09 predicted, 1.10 logged)
FORWARD_FACTOR = 5
NON_TORCH_TP1 = 0.25 * GiB  # >= 0.18; 0.13 GiB before (Qwen3-14B 0.15-0.17)
NON_TORCH_TP1_OLD = 0.13 * GiB
NON_TORCH_TP = 2.1 * GiB  # TP >= 2 over NVLink (H100 SXM): NCCL buffers (2.07-2.21 GiB logged)
NON_TORCH_TP_PCIE = 0.2 * GiB  # TP >= 2 over PCIe without NVLink: no NVLink buffers (0.20 GiB logged)
NON_TORCH_PP = 0.07 * GiB  # a pipeline stage at TP 1
# TP >= 2 on H100s without NCCL's NVLS buffers: 0.55 GiB (llm-d-benchmark's Llama-3.3-70B FP8 at TP 2,
# vLLM 0.11.1-0.14). NVLS needs cuMem: NCCL_CUMEM_ENABLE=0 (vLLM's own default until
# vllm-project/vllm#24141, September 2025) or NCCL_NVLS_ENABLE=0 turns them off
NON_TORCH_TP_NO_NVLS = 0.55 * GiB
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "NCCL_CUMEM_ENABLE": "0"}
PRE_HOPPER = ("turing", "ampere", "ada")  # hardware.gpu_arch values without NVLink SHARP
# "Estimated CUDA graph memory" in the logs = the larger first capture (piecewise or full) + a graph
# for each further piecewise size and each further full (decode) size: Llama-3.1-8B at 1024
# sequences 260 + 50 x 6 + 50 x 6 MiB = 0.84 GiB; gpt-oss-20b at TP 2 128 + 82 x 6 + 82 x 6 = 1.09 GiB;
# 3 piecewise and 2 full sizes: 0.27 GiB (258 + 3 x 6); first captures 100-522 MiB (262 for the
# dense 7-9B models), graphs 4-26 MiB
CUDAGRAPH_FIRST = 260 * MiB
# a graph each at hidden size 4096, in proportion to it (70B at 8192: 12-20 MiB; dense 2B-4B models at
# 2048-2560: 0.52-0.70 GiB in all), never under vLLM's 1 MiB floor; MoE graphs hold 6 MiB at smaller
# hidden sizes too (gpt-oss-20b at 2880: 6 MiB; Qwen1.5-MoE, DeepSeek-V2-Lite at 2048: 0.82-1.39 GiB)
CUDAGRAPH_PER_GRAPH = 6 * MiB
CUDAGRAPH_MIN_PER_GRAPH = 1 * MiB  # v1/worker/gpu/cudagraph_utils.py _MIN_PER_GRAPH_BYTES
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on by default: its log line says "since v0.21.0", but the
# official v0.20.0 image already subtracts it (a logged start-up, tests/data/vllm-gpu-starts); 0.19's do not
CUDAGRAPH_SUBTRACTED_FROM = (0, 20)


# the public start-ups (tests/data/vllm-gpu-starts/starts.csv) the model predicts within 3 %, by the
# versions they ran: (first, last minor version, rows, what); tests/test_gpu_memory.py checks it against the data
BACKING_ROWS = (
    ((0, 10), (0, 10), 3, "0.10.2 (H100, 8 L40S, a 24 GB GPU)"),
    ((0, 11), (0, 14), 6, "0.11-0.14 (H100: one on 0.11.0, five on one unstated version of 0.11.1-0.14)"),
    ((0, 15), (0, 15), 2, "0.15 (H100, A100 40GB)"),
    ((0, 16), (0, 16), 1, "0.16 (H100)"),
    ((0, 17), (0, 17), 1, "0.17 (H100)"),
    ((0, 18), (0, 18), 1, "0.18 (H100)"),
    ((0, 19), (0, 19), 65, "0.19 (H100, A100)"),
    ((0, 21), (0, 21), 1, "0.21 (H100)"),
    ((0, 24), (0, 24), 1, "0.24 (RTX 4090, V2 model runner)"),
    ((0, 27), (0, 27), 1, "0.27 (RTX 4090, V2 model runner)"),
    ((0, 28), (0, 28), 2, "0.28 (Quadro RTX 6000, eager)"),
    ((0, 31), (0, 31), 1, "0.31 (A100 80GB, V2 model runner)"),
)


def backing(version: tuple[int, int, int]) -> str:
    """How many public start-ups of this version back the memory model, for the ledger to say."""
    for lo, hi, n, what in BACKING_ROWS:
        if lo <= version[:2] <= hi:
            return f"{n} public start-up{'s' if n > 1 else ''} of vLLM {what} back{'' if n > 1 else 's'} these terms"
    backed = ", ".join(f"{lo[0]}.{lo[1]}" + (f"-{hi[0]}.{hi[1]}" if hi != lo else "") for lo, hi, _, _ in BACKING_ROWS)
    return (
        f"no public start-up of vLLM {version[0]}.{version[1]} backs these terms; they follow the rules read off "
        f"{backed}, docs/kv-accounting.md"
    )


def parse_version(text: str) -> tuple[int, int, int]:
    # 0.19.0, v0.19.0, 0.11.2.post1, 0.10.1+cu128, 0.33.0rc2, 0.28.1rc1.dev50+g1234abc
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?((?:rc|a|b|post|dev|[.+\-])\S*)?", (text or "").strip())
    if not m:
        raise InputError(f"--vllm-version: cannot read {text!r}; write e.g. 0.19.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, kw_only=True)
class Term:
    bytes: int
    source: str


@dataclass(frozen=True, kw_only=True)
class StartupMemory:
    """The terms of one rank's start-up (rank 0: the first pipeline stage)."""

    version: str
    requested: Term
    weights: Term
    activation_peak: Term
    non_torch: Term
    cudagraph: Term
    cudagraph_subtracted: bool
    model_runner: runner_v2.ModelRunner = runner_v2.ModelRunner.V1  # whose profile step the terms follow
    model_runner_source: str = ""  # why vLLM runs that one

    @property
    def kv_cache_bytes(self) -> int:
        """vLLM's "Available KV cache memory" for this rank."""
        kv = self.requested.bytes - self.weights.bytes - self.activation_peak.bytes - self.non_torch.bytes
        return kv - (self.cudagraph.bytes if self.cudagraph_subtracted else 0)


def activation_peak(
    shape: ModelShape,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    version: tuple[int, int, int],
    runner: tuple[runner_v2.ModelRunner, str],
    has_lm_head: bool = True,
    dtype: str | None = None,
    tp: int = 1,
    sampler_env: str | None = None,
) -> Term:
    """`runner`: the model runner vLLM uses and why (runner_v2.selected); `sampler_env`: vllm.env's
    VLLM_USE_FLASHINFER_SAMPLER (the V1 runner's warm-up path, sampler.path)."""
    runner_kind, why = runner
    if runner_kind is runner_v2.ModelRunner.V2 and has_lm_head:
        fwd = runner_v2.forward_bytes(shape, max_num_batched_tokens, tp, dtype)
        smp = runner_v2.sampler_bytes(shape, max_num_seqs, max_num_batched_tokens)
        return Term(
            bytes=max(fwd, smp),
            source=f"V2 model runner ({why}): "
            + (
                "forward pass, max_num_batched_tokens x (3 x MLP width / TP + 4-5 x hidden) x dtype"
                if fwd >= smp
                else "sampler, logits of min(max_num_seqs, tokens) requests in fp32 + hidden states"
            )
            + " (plan/runner_v2.py; 2 rows back it)",
        )
    dt = DTYPE_BYTES[dtype or shape.dtype]
    forward = FORWARD_FACTOR * max_num_batched_tokens * (shape.mlp_width or shape.hidden_size or 0) * dt
    fwd_src = f"{FORWARD_FACTOR} x max_num_batched_tokens x MLP width x {dt} B"
    if not has_lm_head:
        return Term(bytes=forward, source=f"{fwd_src} (pipeline stage without the LM head)")
    fwd_src += f"; V1 model runner: {why}"
    kind, path_why = sampler.path(version, sampler_env)
    ws = workspace_bytes(shape, max_num_batched_tokens, tp, dtype)
    warm_up = int(kind.factor * max_num_seqs * (shape.vocab_size or 0) * 4) + ws
    if warm_up >= forward:
        return Term(
            bytes=warm_up,
            source=f"sampler warm-up: {kind.factor} x max_num_seqs x vocab x 4 B ({kind.value}: {path_why}; "
            f"V1 model runner: {why})" + (f" + the fused-MoE workspace still held, {ws / GiB:.2f} GiB" if ws else ""),
        )
    return Term(bytes=forward, source=fwd_src)


def nvls_off(env: dict[str, str]) -> str | None:
    """The server environment's setting that keeps NCCL from allocating NVLS buffers, if any."""
    return next((f"{k}={v}" for k, v in NVLS_OFF.items() if env.get(k, "").strip() == v), None)


def non_torch(
    tp: int,
    pp: int,
    version: tuple[int, int, int],
    interconnect: str | None = None,
    gpu_arch: str | None = None,
    nccl_off: str | None = None,
) -> Term:
    """`nccl_off`: the vllm.env setting that turns NCCL's NVLS buffers off (nvls_off)."""
    if tp >= 2 and interconnect == "pcie":
        return Term(
            bytes=int(NON_TORCH_TP_PCIE),
            source="TP >= 2 over PCIe without NVLink: 0.20 GiB per GPU (RTX 3090s, vllm-project/vllm#14447)",
        )
    if tp >= 2 and gpu_arch in PRE_HOPPER:
        # the 2.1 GiB is NCCL's NVLink SHARP (NVLS) buffers, which need Hopper and NVSwitch
        return Term(
            bytes=int(NON_TORCH_TP_PCIE),
            source=f"TP >= 2 on {gpu_arch} GPUs (no NVLink SHARP before Hopper): 0.21 GiB per GPU on two "
            "Quadro RTX 6000s over an NVLink bridge (vLLM 0.28), 0.20 over PCIe",
        )
    if tp >= 2 and nccl_off:
        return Term(
            bytes=int(NON_TORCH_TP_NO_NVLS),
            source=f"TP >= 2 with {nccl_off} in vllm.env (no NCCL NVLS buffers): 0.55 GiB per GPU, as an H100 "
            "pair logs without them (llm-d-benchmark, Llama-3.3-70B FP8)",
        )
    if tp >= 2:
        return Term(
            bytes=int(NON_TORCH_TP),
            source="TP >= 2 over NVLink on Hopper or newer (or hardware.gpu_arch unset): NCCL buffers, "
            "2.07-2.21 GiB per GPU in the H100 logs",
        )
    if pp >= 2:
        return Term(bytes=int(NON_TORCH_PP), source="pipeline stage at TP 1: 0.07 GiB in the logs")
    if version >= (0, 18):
        return Term(bytes=int(NON_TORCH_TP1), source="TP 1: 0.25 GiB in the logs (vLLM >= 0.18)")
    return Term(bytes=int(NON_TORCH_TP1_OLD), source="TP 1: 0.13 GiB in the logs (vLLM < 0.18)")


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, model_type: str = "") -> list[int]:
    """The batch sizes vLLM captures CUDA graphs for by default (0.32 config/vllm.py): up to
    min(2 x max_num_seqs, 512) tokens (gpt-oss raises the ceiling to 1024), never past
    max_num_batched_tokens; 1, 2, 4, then every 8 to 256, every 16 above, plus max_num_seqs and
    max_num_batched_tokens when they fit."""
    ceiling = 1024 if model_type == "gpt_oss" else min(2 * max_num_seqs, 512)
    top = min(max_num_batched_tokens, ceiling)
    sizes = [i for i in (1, 2, 4) if i <= top]
    sizes += list(range(8, min(top + 1, 256), 8)) if top >= 8 else []
    sizes += list(range(256, top + 1, 16)) if top >= 256 else []
    sizes += [n for n in (max_num_batched_tokens, max_num_seqs) if n <= top]
    return sorted(set(sizes))


def cudagraph(
    version: tuple[int, int, int],
    enforce_eager: bool,
    sizes: list[int] | None = None,
    max_num_seqs: int = 1024,
    hidden_size: int | None = None,
    *,
    moe: bool = False,
    runner: runner_v2.ModelRunner = runner_v2.ModelRunner.V1,
) -> tuple[Term, bool]:
    """vLLM's "Estimated CUDA graph memory": the larger first capture plus a graph for each further
    capture size, piecewise for every size and full for the decode sizes (those up to max_num_seqs),
    as the logs print it term by term."""
    if enforce_eager:
        return Term(bytes=0, source="--enforce-eager: no CUDA graphs"), False
    v2_unprofiled = not runner_v2.reserves_cudagraph_memory(runner, version)
    subtracted = version >= CUDAGRAPH_SUBTRACTED_FROM and not v2_unprofiled
    sizes = sizes if sizes is not None else capture_sizes(1024, 8192)
    n_pw, n_full = len(sizes), sum(1 for n in sizes if n <= max_num_seqs)
    scale = (hidden_size or 4096) / 4096
    per_graph = max(int(CUDAGRAPH_PER_GRAPH * (max(1.0, scale) if moe else scale)), CUDAGRAPH_MIN_PER_GRAPH)
    est = CUDAGRAPH_FIRST + (max(n_pw - 1, 0) + max(n_full - 1, 0)) * per_graph
    if subtracted:
        where = "subtracted from the KV budget (vLLM >= 0.20)"
    elif v2_unprofiled:
        where = (
            "not subtracted: the V2 model runner reserves nothing for CUDA graphs before vLLM 0.28.1 (its "
            "estimate is 0 until vllm-project/vllm#53306); taken from the remainder after KV"
        )
    else:
        where = "not subtracted before vLLM 0.20: taken from the remainder after KV"
    return Term(
        bytes=int(est),
        source=f"estimate: {CUDAGRAPH_FIRST / MiB:.0f} MiB first capture + ({n_pw} - 1) piecewise + ({n_full} - 1) "
        f"full graphs x {per_graph / MiB:.1f} MiB (6 MiB per 4,096 of hidden size"
        + (", at least 6 for an MoE" if moe else "")
        + f"; the 0.19 logs: 0.84 GiB at 51 + 51 sizes for 7-8B) - {where}",
    ), subtracted


def startup_memory(
    *,
    shape: ModelShape,
    weights_rank: int,
    weights_source: str,
    gpu_memory_bytes: int,
    utilization: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    tp: int = 1,
    pp: int = 1,
    version: str = DEFAULT_VLLM_VERSION,
    enforce_eager: bool = False,
    dtype: str | None = None,
    interconnect: str | None = None,
    gpu_arch: str | None = None,
    nccl_off: str | None = None,
    runner_env: str | None = None,
    sampler_env: str | None = None,
) -> StartupMemory:
    """`runner_env`, `sampler_env`: VLLM_USE_V2_MODEL_RUNNER and VLLM_USE_FLASHINFER_SAMPLER as vllm.env
    sets them (None: the release's default)."""
    v = parse_version(version)
    runner, why = runner_v2.selected(shape, v, runner_env)
    act = activation_peak(
        shape, max_num_seqs, max_num_batched_tokens, v, (runner, why), pp == 1, dtype, tp, sampler_env
    )
    nt = non_torch(tp, pp, v, interconnect, gpu_arch, nccl_off)
    if runner is runner_v2.ModelRunner.V2 and pp == 1:
        state = runner_v2.penalty_state_bytes(shape, max_num_seqs)
        nt = Term(
            bytes=nt.bytes + state,
            source=f"{nt.source}; + {state / GiB:.2f} GiB of the V2 sampler's penalty state "
            "(max_num_seqs x vocab int32 counts + a prompt bit mask)",
        )
    sizes = capture_sizes(max_num_seqs, max_num_batched_tokens, shape.model_type)
    cg, subtracted = cudagraph(v, enforce_eager, sizes, max_num_seqs, shape.hidden_size, moe=shape.moe, runner=runner)
    return StartupMemory(
        version=".".join(map(str, v)),
        requested=Term(
            bytes=int(gpu_memory_bytes * utilization), source=f"gpu_memory_utilization {utilization:g} x total memory"
        ),
        weights=Term(bytes=weights_rank, source=weights_source),
        activation_peak=act,
        non_torch=nt,
        cudagraph=cg,
        cudagraph_subtracted=subtracted,
        model_runner=runner,
        model_runner_source=why,
    )
