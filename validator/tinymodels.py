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

from validator.errors import InputError
from validator.tiny_architectures import ARCHITECTURES, COMMON, VOCAB
from validator.tiny_own_builds import OWN_BUILDS

BUILDER_VERSION = "1"


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


def _from_transformers(name: str, out: Path) -> None:
    """Save the model transformers builds from ARCHITECTURES[name]'s config class into `out`."""
    import torch
    import transformers

    cls_name, kwargs, drop = ARCHITECTURES[name]
    config = getattr(transformers, cls_name)(**dict(COMMON, **kwargs))
    config.torch_dtype = torch.bfloat16
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in drop:
        cfg.pop(key, None)
    for key, value in kwargs.items():  # keep what transformers may normalise away
        if key not in drop:
            cfg[key] = value
    cfg["torch_dtype"] = "bfloat16"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True))


def build(name: str, out: Path) -> Path:
    """Build the checkpoint `name` into `out` (replaced atomically)."""
    if name not in ARCHITECTURES and name not in OWN_BUILDS:
        known = ", ".join([*ARCHITECTURES, *OWN_BUILDS])
        raise InputError(f"model.build: unknown tiny model {name!r}; known: {known}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        if name in OWN_BUILDS:  # no transformers class: written tensor by tensor
            OWN_BUILDS[name](tmp)
        else:
            _from_transformers(name, tmp)
        build_tokenizer(tmp)
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
    ap.add_argument("names", nargs="*", default=[*ARCHITECTURES, *OWN_BUILDS], help="which (default: all)")
    ap.add_argument("--dir", default="models", help="parent directory (default: models/)")
    args = ap.parse_args(argv)
    for n in args.names:
        print(ensure_tiny_model(n, Path(args.dir) / n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
