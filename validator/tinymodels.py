"""Tiny random-weight checkpoints built from code (nothing is downloaded).

Each is deterministic (fixed seed), saved in bfloat16 with a byte-level BPE
tokenizer trained locally with ``tokenizers``. They exist so that real vLLM can
be started on a CPU in tests and demos; their outputs are noise.

Needs torch and transformers (installed with vLLM); imported lazily so the
planner never needs them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from validator.errors import InputError

VOCAB = 512
BUILDER_VERSION = "1"

# name -> (transformers config class, config kwargs, keys removed from config.json)
_COMMON = dict(
    vocab_size=VOCAB,
    intermediate_size=256,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    # GQA, explicit head_dim
    "tiny-gqa": (
        "Qwen3Config",
        dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64),
        (),
    ),
    # MHA: as many KV heads as query heads
    "tiny-mha": (
        "Qwen3Config",
        dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=64),
        (),
    ),
    # no head_dim in config.json: hidden_size / num_attention_heads = 64
    "tiny-nohd": (
        "LlamaConfig",
        dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2),
        ("head_dim",),
    ),
    # a sliding window on every layer (Mistral convention: no layer_types)
    "tiny-sliding": (
        "MistralConfig",
        dict(
            hidden_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            sliding_window=128,
        ),
        ("layer_types",),
    ),
    # 3 sliding : 1 full, as listed in layer_types
    "tiny-mixed": (
        "LlamaConfig",
        dict(
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=128,
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
        ),
        (),
    ),
    # gpt-oss: attention sinks, sliding and full layers alternating, MoE (bfloat16 experts, not MXFP4)
    "tiny-gptoss": (
        "GptOssConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            intermediate_size=128,
            sliding_window=128,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
        (),
    ),
    # Qwen3-Next: 3 Gated DeltaNet layers : 1 attention layer, MoE
    "tiny-qwen3next": (
        "Qwen3NextConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            linear_conv_kernel_dim=4,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            full_attention_interval=4,
        ),
        (),
    ),
    # Granite-4: 3 Mamba-2 layers : 1 attention layer
    "tiny-granite4": (
        "GraniteMoeHybridConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            shared_intermediate_size=256,
            num_local_experts=0,
            layer_types=["mamba", "mamba", "mamba", "attention"],
            mamba_n_heads=8,
            mamba_d_head=32,
            mamba_d_state=64,
            mamba_n_groups=1,
            mamba_d_conv=4,
            mamba_expand=2,
            position_embedding_type="rope",
        ),
        (),
    ),
    # Nemotron-H: Mamba-2, MLP, Mamba-2, attention (hybrid_override_pattern "M-M*")
    "tiny-nemotronh": (
        "NemotronHConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            hybrid_override_pattern="M-M*",
            mamba_num_heads=8,
            mamba_head_dim=32,
            ssm_state_size=64,
            n_groups=1,
            conv_kernel=4,
            expand=2,
        ),
        (),
    ),
    # Jamba: Mamba (v1) layers with one attention layer in four
    "tiny-jamba": (
        "JambaConfig",
        dict(
            hidden_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_experts=1,
            attn_layer_period=4,
            attn_layer_offset=3,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            use_mamba_kernels=False,
        ),
        (),
    ),
    # attention-free: Mamba-2 layers only
    "tiny-mamba2": (
        "Mamba2Config",
        dict(
            hidden_size=128,
            num_hidden_layers=2,
            num_heads=8,
            head_dim=32,
            state_size=64,
            n_groups=1,
            conv_kernel=4,
            expand=2,
        ),
        (),
    ),
    # attention-free: Mamba (v1) layers only
    "tiny-mamba1": (
        "MambaConfig",
        dict(hidden_size=128, num_hidden_layers=2, state_size=16, conv_kernel=4, expand=2, intermediate_size=256),
        (),
    ),
}

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus() -> list[str]:
    words = (
        "the model serves requests with a paged key value cache of fixed blocks while the scheduler "
        "admits sequences until memory runs out then queues or preempts them latency throughput "
        "prefix cache hit miss token prompt output decode prefill stream chunk"
    ).split()
    lines = []
    for i in range(400):
        lines.append(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12)) + f" {i}")
    return lines


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(out)


def build(name: str, out: Path) -> Path:
    """Build the checkpoint `name` into `out` (replaced atomically)."""
    if name not in ARCHITECTURES:
        raise InputError(f"model.build: unknown tiny model {name!r}; known: {', '.join(ARCHITECTURES)}")
    import torch
    import transformers

    cls_name, kwargs, drop = ARCHITECTURES[name]
    cfg_kwargs = dict(_COMMON, **kwargs)
    config = getattr(transformers, cls_name)(**cfg_kwargs)
    config.torch_dtype = torch.bfloat16
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        build_tokenizer(tmp)
        cfg_path = tmp / "config.json"
        cfg = json.loads(cfg_path.read_text())
        for key in drop:
            cfg.pop(key, None)
        for key, value in kwargs.items():  # keep what transformers may normalise away
            if key not in drop:
                cfg[key] = value
        cfg["torch_dtype"] = "bfloat16"
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True))
        (tmp / "kvgate-tiny.json").write_text(json.dumps({"name": name, "builder_version": BUILDER_VERSION}))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def ensure_tiny_model(name: str, out: str | os.PathLike) -> Path:
    """Build once; reuse while the marker says the same name and builder version."""
    out = Path(out)
    marker = out / "kvgate-tiny.json"
    if marker.exists():
        try:
            m = json.loads(marker.read_text())
            if m.get("name") == name and m.get("builder_version") == BUILDER_VERSION:
                return out
        except (OSError, ValueError):
            pass
    return build(name, out)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Build kvgate's tiny random-weight models.")
    ap.add_argument("names", nargs="*", default=list(ARCHITECTURES), help="which (default: all)")
    ap.add_argument("--dir", default="models", help="parent directory (default: models/)")
    args = ap.parse_args(argv)
    for n in args.names:
        print(ensure_tiny_model(n, Path(args.dir) / n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
