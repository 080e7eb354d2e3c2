"""How the installed vLLM shards block-FP8 experts over tensor-parallel ranks: its own functions
asked, not a copy of them. A test tool run in its own process (it imports vLLM; kvgate never does):

    .venv/bin/python -m tests.vllm_fp8_moe CASES_JSON   # prints one JSON line: {"answers": [...]}

CASES_JSON: a list of [width, hidden, tp, backend], the experts' intermediate size, the hidden size,
the TP size and --moe-backend, for a checkpoint of vLLM's fp8 method with 128 x 128 blocks. For each,
vLLM's resolve_fp8_moe_weight_block_shape (fused_moe/oracle/fp8.py: refine the blocks, or pad the
rank's slice for a backend that cannot take refined ones), then, where it neither refined nor padded
into whole blocks, validate_fp8_block_shape_moe as Fp8MoEMethod.create_weights calls it. Answer per
case: {"width": the slice a rank allocates, "refined": the refined block or null} or {"refused": why}.

The CPU build has no FP8 kernels, so its platform is told it supports FP8 (an FP8 GPU, Hopper or
newer), the one platform fact these functions read (Triton's kernels take refined blocks there)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def main() -> None:
    import vllm.distributed
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as oracle
    from vllm.model_executor.layers.quantization.utils.fp8_utils import validate_fp8_block_shape_moe
    from vllm.model_executor.layers.quantization.utils.quant_utils import kFp8Dynamic128Sym
    from vllm.platforms import current_platform

    type(current_platform).supports_fp8 = classmethod(lambda cls: True)  # type: ignore[method-assign]
    block = [128, 128]
    out = []
    for width, hidden, tp, backend in json.loads(sys.argv[1]):
        config = SimpleNamespace(
            intermediate_size=width,
            intermediate_size_per_partition=width // tp,
            tp_size=tp,
            ep_size=1,
            hidden_dim=hidden,
            moe_backend=backend,
            is_lora_enabled=False,
            has_bias=False,
        )
        vllm.distributed.get_tensor_model_parallel_world_size = lambda tp=tp: tp  # read by the validation
        try:
            _, refine = oracle.resolve_fp8_moe_weight_block_shape(config, block, kFp8Dynamic128Sym, True)
            if refine is None:
                validate_fp8_block_shape_moe(config.intermediate_size_per_partition, block)
            refined = [block[0] // refine[0], block[1] // refine[1]] if refine else None
            out.append({"width": config.intermediate_size_per_partition, "refined": refined})
        except ValueError as e:
            out.append({"refused": str(e)[:200]})
    print(json.dumps({"answers": out}))


if __name__ == "__main__":
    main()
