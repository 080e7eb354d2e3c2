"""Which top-k/top-p path the V1 model runner's sampler warm-up takes in vLLM's profile step, by
version and vllm.env (pure).

The warm-up samples max_num_seqs dummy requests with top-k and top-p set, and its peak is the
activation term wherever the forward pass peaks lower. How large it is depends on the path:

- the PyTorch-native path sorts the whole fp32 logits (values and int64 indices): 9.73x the logits
  in the logs (Qwen3-14B on 0.15 and 0.16; llm-d-benchmark's text models on an unstated 0.11.1-0.14;
  Qwen3-8B-FP8 on 0.10.2, 9.66x);
- FlashInfer's kernel and the Triton kernel sort nothing: 3.83x (Llama-3.1-8B 3.86x, Qwen3-8B 3.81x,
  Qwen3-14B 3.85x on >= 0.17, the Triton path). FlashInfer's figure is taken as the same: the one
  start-up on it (Mistral-Small-3.2 on the official 0.11.0 image) peaks at its forward pass, 2.12 GiB,
  so its sampler stayed under 4.24x.

Which one runs: up to 0.11.0 the V1 sampler takes FlashInfer's kernel wherever the flashinfer package
imports and VLLM_USE_FLASHINFER_SAMPLER is not 0 ("unset means enabled"): the official image bundles
the package, a pip install lacked it (an optional extra; FlashInfer is not available, say the pip logs
of 0.10.2 and 0.11.0); vllm-project/vllm#26859, after 0.11.0, made the kernel opt-in when the package
became a dependency; from 0.17 nothing sorts: the native path is the Triton kernel of
vllm-project/vllm#33538 (the Qwen3-14B rows date the change between 0.16 and 0.17), and FlashInfer's
kernel is the default again later (vllm-project/vllm#40376), so the variable no longer matters.
"""

from __future__ import annotations

from enum import Enum

from validator.flags import env_bool

ENV = "VLLM_USE_FLASHINFER_SAMPLER"
TRITON_FROM = (0, 17)  # vllm-project/vllm#33538: Triton top-k/top-p kernels, no sort
OPT_IN_AFTER = (0, 11, 0)  # vllm-project/vllm#26859: FlashInfer's kernel opt-in after 0.11.0


class SamplerPath(Enum):
    SORT = "PyTorch-native sort"
    FLASHINFER = "FlashInfer's top-k/top-p kernel"
    TRITON = "Triton top-k/top-p kernel"

    @property
    def factor(self) -> float:
        """The warm-up's peak in fp32 logits of max_num_seqs requests."""
        return 9.73 if self is SamplerPath.SORT else 3.83


def path(version: tuple[int, int, int], env: str | None = None) -> tuple[SamplerPath, str]:
    """The path and why. `env`: VLLM_USE_FLASHINFER_SAMPLER as vllm.env sets it (None: unset)."""
    if version[:2] >= TRITON_FROM:
        return SamplerPath.TRITON, "vLLM >= 0.17 (vllm-project/vllm#33538)"
    flag = env_bool(env)
    if flag is not None:
        return (SamplerPath.FLASHINFER if flag else SamplerPath.SORT), f"{ENV}={env} in vllm.env"
    if version > OPT_IN_AFTER:
        return SamplerPath.SORT, "vLLM 0.11.1-0.16's default (FlashInfer's kernel opt-in, vllm-project/vllm#26859)"
    return SamplerPath.SORT, (
        "assumed for vLLM <= 0.11.0 installed without the flashinfer package (pip: an optional extra); where "
        f"it imports, as in the official image, FlashInfer's kernel runs by default: {ENV}=1 in vllm.env plans that"
    )
