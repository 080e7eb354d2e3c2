"""Checkpoints derived from a tiny bfloat16 one (test helpers).

`write_autoround`: an AutoRound int4 checkpoint, every linear
layer of the decoder in GPTQ's packing as AutoRound writes it, symmetric (qweight: int32 of 8
weights along the input, qzeros: int32 of 8 zero points along the output, scales: float16, one row
per group), or in AWQ's with zero points (qweight packed along the output); the embeddings, norms
and tied LM head as they were; `keep`: the linear layers left so too (substrings of their names),
which `extra_config` then names at 16 bits, as AutoRound writes a checkpoint's exceptions. The values
are random: vLLM only loads them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GDN_LINEAR = ("in_proj_qkvz", "in_proj_qkv", "in_proj_z", "in_proj_ba", "in_proj_b", "in_proj_a", "out_proj")


def write_autoround(
    src: Path,
    dst: Path,
    group_size: int = 32,
    bits: int = 4,
    awq: bool = False,
    linear: tuple[str, ...] = LINEAR,
    keep: tuple[str, ...] = (),
    extra_config: dict | None = None,
) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, dirs_exist_ok=True)
    tensors = load_file(str(src / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    gen = torch.Generator().manual_seed(0)
    per_int = 32 // bits
    for name, t in tensors.items():
        stem = name.removesuffix(".weight")
        if not (name.endswith(".weight") and stem.rsplit(".", 1)[-1] in linear) or any(k in name for k in keep):
            out[name] = t
            continue
        n_out, n_in = t.shape  # a Linear stores out x in
        groups = n_in // group_size
        packed = (n_in, n_out // per_int) if awq else (n_in // per_int, n_out)
        out[f"{stem}.qweight"] = torch.randint(-(2**31), 2**31 - 1, packed, dtype=torch.int32, generator=gen)
        out[f"{stem}.qzeros"] = torch.full((groups, n_out // per_int), 0x88888888 - 2**32, dtype=torch.int32)
        out[f"{stem}.scales"] = torch.full((groups, n_out), 1e-3, dtype=torch.float16)
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "auto-round",
        "bits": bits,
        "group_size": group_size,
        "sym": not awq,
        "data_type": "int",
        "packing_format": "auto_round:auto_awq" if awq else "auto_round:auto_gptq",
    } | ({"extra_config": extra_config} if extra_config else {})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (dst / "kvgate-tiny.json").unlink(missing_ok=True)
    return dst


def write_float32(src: Path, dst: Path) -> Path:
    """The same checkpoint stored in float32, as config.json then says (vLLM holds it in bfloat16)."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst, dirs_exist_ok=True)
    tensors = load_file(str(src / "model.safetensors"))
    save_file(
        {k: v.to(torch.float32) for k, v in tensors.items()}, str(dst / "model.safetensors"), metadata={"format": "pt"}
    )
    cfg = json.loads((dst / "config.json").read_text())
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    (dst / "kvgate-tiny.json").unlink(missing_ok=True)
    return dst
