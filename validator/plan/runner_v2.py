"""The profile step of vLLM's V2 model runner (pure): its activation peak and the sampler state it
holds, which the V1 figures in gpu_memory.py do not describe.

"Using V2 Model Runner" appears in the 0.28.1rc1.dev50 start-ups of tests/data/vllm-gpu-starts; in
0.32 it is the default for every model (vllm/config/vllm.py `use_v2_model_runner`: on unless a
feature it lacks is asked for), earlier releases by family (`selected` below). What differs, read
in vLLM 0.32's v1/worker/gpu:

- profile_run pushes max_num_batched_tokens tokens through the model with attention skipped, then
  samples one token for min(tokens, max_num_seqs) requests. The sampler keeps the logits as the
  LM head returns them and samples in a Triton kernel (sample/gumbel.py): no fp32 copy of the logits
  and none of the V1 sampler's 3.83x. The peak is the forward pass: per token the MLP's gate/up
  output and its activation (3 x intermediate / TP) beside hidden-wide tensors (hidden states,
  residual, the projections' outputs: 4; one more at TP >= 2, the all-reduce's copy).
- the sampler's penalty state is allocated at start-up, max_num_seqs x vocab int32 counts and a
  bit mask of the prompt's tokens (sample/penalties.py: "can be very large, taking up GBs"): it is
  in vLLM's "consumed memory (weights + non-torch)".

The two constants (4 and 1 hidden-wide tensors) are read off the only V2 rows, Qwen2.5-1.5B at TP 1
and 2: 0.504 and 0.322 GiB predicted, 0.50 and 0.32 logged. Nothing else holds them out yet.

Which runner a start-up uses (`selected`): VLLM_USE_V2_MODEL_RUNNER when the server's environment sets
it, else the release's default, which grew by model family (vllm-project/vllm#41286's steps, as the
release notes give them): 0.22.0 the Qwen3 dense checkpoints (#39337, a list of model names: kvgate
takes model_type qwen3), 0.23.0 also Llama and Mistral dense models (#43458), 0.25.0 every dense model
(#44443), and from the builds after 0.28.0 (0.28.1rc1.dev...) MoE and hybrid models too (#53183).
"""

from __future__ import annotations

from enum import Enum

from validator.flags import env_bool
from validator.plan.model_shape import DTYPE_BYTES, ModelShape
from validator.plan.moe_workspace import workspace_bytes
from validator.units import cdiv

V2_RUNNER_FROM = (0, 28, 1)  # every model (#53183)
# its profile_cudagraph_memory() returned 0 (a placeholder, #36520) until #53306 (merged 2026-08-24, in
# the 0.28.1 builds): before, V2 start-ups reserve nothing for CUDA graphs, taken from what KV leaves
CUDAGRAPH_PROFILED_FROM = (0, 28, 1)
V2_DENSE_FROM = (0, 25, 0)  # dense models: neither MoE nor hybrid (#44443)
V2_FAMILIES_FROM = {"qwen3": (0, 22, 0), "llama": (0, 23, 0), "mistral": (0, 23, 0)}  # #39337, #43458
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


class ModelRunner(str, Enum):
    """The GPU model runner whose profile step sizes the KV budget (the ledger's model_runner)."""

    V1 = "v1"
    V2 = "v2"  # logs "Using V2 Model Runner" at start-up


HIDDEN_WIDE = 4  # hidden states, residual and the projections' outputs at the MLP's peak
HIDDEN_WIDE_TP = 1  # the all-reduce's copy at TP >= 2


def forward_bytes(shape: ModelShape, tokens: int, tp: int, dtype: str | None) -> int:
    """The larger of a dense layer's peak and an MoE layer's (hidden-wide tensors + the fused-MoE
    workspace; the MoE side not yet checked on a V2 row)."""
    dt = DTYPE_BYTES[dtype or shape.dtype]
    h = shape.hidden_size or 0
    hidden = tokens * (HIDDEN_WIDE + (HIDDEN_WIDE_TP if tp >= 2 else 0)) * h * dt
    ws = workspace_bytes(shape, tokens, tp, dtype)
    if ws:  # an MoE: only its leading dense layers (DeepSeek's first_k_dense_replace) have an MLP peak
        widths = [shape.intermediate_size] if shape.first_dense_layers and shape.intermediate_size else []
    else:  # dense, or an MoE whose workspace is not known (its experts' width, as V1's figure takes it)
        widths = [shape.mlp_width or h]
    dense = max((tokens * 3 * cdiv(w, tp) * dt + hidden for w in widths), default=0)
    return max(dense, hidden + ws)


def sampler_bytes(shape: ModelShape, max_num_seqs: int, tokens: int) -> int:
    """The logits of the dummy requests (fp32 at most) beside the tokens' hidden states."""
    return min(max_num_seqs, tokens) * (shape.vocab_size or 0) * 4 + tokens * (shape.hidden_size or 0) * 2


def penalty_state_bytes(shape: ModelShape, max_num_seqs: int) -> int:
    """output_bin_counts (int32 per request and token id) and prompt_bin_mask (a bit per token id)."""
    v = shape.vocab_size or 0
    return max_num_seqs * (v + cdiv(v, 32)) * 4


def selected(shape: ModelShape, version: tuple[int, int, int], env: str | None = None) -> tuple[ModelRunner, str]:
    """The runner vLLM uses for this model, and why. `env`: the server's VLLM_USE_V2_MODEL_RUNNER,
    when vllm.env sets it."""
    flag = env_bool(env)
    if flag is not None:
        return (
            (ModelRunner.V2, f"{RUNNER_ENV}=1 in vllm.env") if flag else (ModelRunner.V1, f"{RUNNER_ENV}=0 in vllm.env")
        )
    dense = not shape.moe and shape.state is None
    if version >= V2_RUNNER_FROM:
        return ModelRunner.V2, "vLLM >= 0.28.1's default for every model"
    if dense and version >= V2_DENSE_FROM:
        return ModelRunner.V2, "vLLM >= 0.25's default for dense models"
    first = V2_FAMILIES_FROM.get(shape.model_type)
    if dense and first and version >= first:
        return ModelRunner.V2, f"vLLM >= {first[0]}.{first[1]}'s default for dense {shape.model_type} models"
    kind = "dense" if dense else ("MoE" if shape.moe else "hybrid")
    return ModelRunner.V1, f"vLLM {version[0]}.{version[1]} runs {kind} {shape.model_type or 'models'} on the V1 runner"


def reserves_cudagraph_memory(runner: ModelRunner, version: tuple[int, int, int]) -> bool:
    """Whether the runner's profile estimates CUDA-graph memory for the KV budget to leave out (V1:
    from the version gpu_memory.CUDAGRAPH_SUBTRACTED_FROM says; V2: only from 0.28.1)."""
    return runner is ModelRunner.V1 or version >= CUDAGRAPH_PROFILED_FROM
