"""The KV cache dtype the installed vLLM takes for --kv-cache-dtype auto, per checkpoint: its own
engine configuration asked, not a copy of its rules. A test tool run in its own process (it imports
vLLM; kvgate never does):

    .venv/bin/python -m tests.vllm_kv_dtype DIR [DIR ...]   # prints {"cache_dtype": {DIR: dtype}}

Each DIR: a checkpoint (config.json, tokenizer; an hf_quant_config.json where it has one). vLLM's
EngineArgs(model=DIR).create_engine_config() reads its quantization config and resolves the cache
dtype as `vllm serve` does before anything is loaded; "error: ..." where it refuses the config."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from vllm.engine.arg_utils import EngineArgs

    out = {}
    for d in sys.argv[1:]:
        try:
            out[d] = EngineArgs(model=d, max_model_len=256).create_engine_config().cache_config.cache_dtype
        except Exception as e:  # a config vLLM refuses: reported, the other directories still asked
            out[d] = f"error: {type(e).__name__}: {str(e)[:160]}"
    print(json.dumps({"cache_dtype": out}))


if __name__ == "__main__":
    main()
