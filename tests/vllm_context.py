"""The longest max_model_len vLLM derives for a model, measured with the installed vLLM: its
ModelConfig with no max_model_len (the derived default) and with one token more (refused or not).
A test tool run in its own process (it imports vLLM; kvgate never does):

    .venv/bin/python -m tests.vllm_context MODELS_DIR   # prints one JSON line

The configurations are tiny-gqa's (Qwen3) and tiny-qwen35's with their rope varied, and a tiny
Gemma 3 (rope_variants). tests/stubs stands in for torchvision (vllm_weights says why)."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

TOKENIZER_FROM = "tiny-gqa"  # its tokenizer files sit beside each configuration


def rope_variants(qwen3: dict[str, Any], qwen35: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each configuration measured: the name says the rope type and its factor."""
    import transformers

    g3 = transformers.Gemma3TextConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, sliding_window=512,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
    ).to_dict()  # fmt: skip
    g3.update(architectures=["Gemma3ForCausalLM"], torch_dtype="bfloat16")

    def rope(base: dict[str, Any], **params: Any) -> dict[str, Any]:
        return dict(base, rope_parameters=dict(base["rope_parameters"], **params))

    return {
        "default": qwen3,
        "linear-x4": rope(qwen3, rope_type="linear", factor=4.0),
        "dynamic-x2": rope(qwen3, rope_type="dynamic", factor=2.0),
        "yarn-x4": rope(qwen3, rope_type="yarn", factor=4.0, original_max_position_embeddings=4096),
        "llama3-x8": rope(
            qwen3,
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=512,
        ),  # fmt: skip
        "telechat3-yarn-x4": rope(qwen3, rope_type="telechat3-yarn", factor=4.0, original_max_position_embeddings=1024),
        "gemma3-linear-x8": g3,
        "qwen35-yarn-x3": rope(qwen35, rope_type="yarn", factor=3.0, original_max_position_embeddings=4096),
    }


def main() -> None:
    from tests.vllm_weights import stand_in_for_torchvision

    stand_in_for_torchvision()
    from vllm.config import ModelConfig

    models = Path(sys.argv[1])
    read = lambda name: json.loads((models / name / "config.json").read_text())  # noqa: E731
    out: dict[str, list[Any]] = {}
    for name, cfg in rope_variants(read("tiny-gqa"), read("tiny-qwen35")).items():
        d = Path(tempfile.mkdtemp(prefix="kvgate-context-"))
        try:
            for f in (models / TOKENIZER_FROM).iterdir():
                if f.name.startswith("tokenizer") or f.name == "chat_template.jinja":
                    shutil.copy(f, d / f.name)
            (d / "config.json").write_text(json.dumps(cfg))
            derived = ModelConfig(model=str(d)).max_model_len
            try:
                ModelConfig(model=str(d), max_model_len=derived + 1)
                over = "accepted"
            except ValueError:
                over = "refused"
            out[name] = [derived, over]
        finally:
            shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
