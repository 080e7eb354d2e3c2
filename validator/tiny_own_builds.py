"""Tiny checkpoints transformers has no class for, built from code.

A Nemotron-NAS (DeciLMForCausalLM, model type nemotron-nas): its checkpoints ship their config class
as remote code, which vLLM loads with --trust-remote-code. This one ships a minimal one (block_configs
as attribute objects, as vLLM's nemotron_nas.py reads them) and writes the weights under the names
vLLM loads (a Llama's), layer by layer as the blocks say: attention skipped in the second block, the
MLP in the third, MLP widths 256 and 512 (ffn_mult 2.0 and 4.5 of hidden 128, rounded up to 256).
A Step 3.5 (step3p5) and a DBRX (transformers refuses to build a DbrxConfig whose attn_config has
no rope_theta, and saves its experts under names vLLM does not load): their config.json only, served
with --load-format dummy (random weights of the shapes vLLM builds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_HIDDEN, _HEADS, _HEAD_DIM, _VOCAB = 128, 4, 32, 512


def _attention(group: int | None) -> dict[str, Any]:
    return {"n_heads_in_group": group, "no_op": group is None, "replace_with_linear": False}


def _ffn(mult: float | None) -> dict[str, Any]:
    return {"ffn_mult": mult, "no_op": mult is None, "replace_with_linear": False}


BLOCKS = [
    {"attention": _attention(2), "ffn": _ffn(2.0)},
    {"attention": _attention(None), "ffn": _ffn(1.5)},
    {"attention": _attention(2), "ffn": _ffn(None)},
    {"attention": _attention(2), "ffn": _ffn(4.5)},
]
CONFIG = {
    "architectures": ["DeciLMForCausalLM"],
    "model_type": "nemotron-nas",
    "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig"},
    "vocab_size": _VOCAB,
    "hidden_size": _HIDDEN,
    "num_hidden_layers": len(BLOCKS),
    "num_attention_heads": _HEADS,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "block_configs": BLOCKS,
}
# the config class the checkpoint ships (remote code): block_configs' dicts as attribute objects
CONFIG_CLASS = """from transformers import PretrainedConfig


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)

    def to_dict(self):
        return dict(self.__dict__)


class _Block:
    def __init__(self, attention, ffn):
        self.attention = _Fields(**attention) if isinstance(attention, dict) else attention
        self.ffn = _Fields(**ffn) if isinstance(ffn, dict) else ffn

    def to_dict(self):
        return {"attention": self.attention.to_dict(), "ffn": self.ffn.to_dict()}


class DeciLMConfig(PretrainedConfig):
    model_type = "nemotron-nas"

    def __init__(self, block_configs=None, vocab_size=512, hidden_size=128, num_hidden_layers=4,
                 num_attention_heads=4, max_position_embeddings=4096, rms_norm_eps=1e-5, hidden_act="silu",
                 rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.max_position_embeddings, self.rms_norm_eps = max_position_embeddings, rms_norm_eps
        self.hidden_act = hidden_act
        self.rope_theta, self.rope_scaling = rope_theta, rope_scaling
        self.head_dim = hidden_size // num_attention_heads
        self.block_configs = [_Block(**b) if isinstance(b, dict) else b for b in (block_configs or [])]
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def to_dict(self):
        d = super().to_dict()
        d["block_configs"] = [b.to_dict() if hasattr(b, "to_dict") else b for b in self.block_configs]
        return d
"""


def _width(mult: float) -> int:
    w = int(2 * mult * _HIDDEN / 3)
    return w if w % 256 == 0 else w + 256 - w % 256


def build_nemotron_nas(out: Path) -> None:
    """Write config.json, its config class and random bfloat16 weights (seed 0) into `out`."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones() -> torch.Tensor:
        return torch.ones(_HIDDEN, dtype=torch.bfloat16)

    q = _HEADS * _HEAD_DIM
    t = {"model.embed_tokens.weight": rand(_VOCAB, _HIDDEN), "model.norm.weight": ones()}
    t["lm_head.weight"] = rand(_VOCAB, _HIDDEN)
    for i, block in enumerate(BLOCKS):
        p, group, mult = f"model.layers.{i}.", block["attention"]["n_heads_in_group"], block["ffn"]["ffn_mult"]
        if group is not None:
            kv = _HEADS // group * _HEAD_DIM
            t |= {p + "self_attn.q_proj.weight": rand(q, _HIDDEN), p + "self_attn.k_proj.weight": rand(kv, _HIDDEN)}
            t |= {p + "self_attn.v_proj.weight": rand(kv, _HIDDEN), p + "self_attn.o_proj.weight": rand(_HIDDEN, q)}
            t[p + "input_layernorm.weight"] = ones()
        if mult is not None:
            w = _width(mult)
            t |= {p + "mlp.gate_proj.weight": rand(w, _HIDDEN), p + "mlp.up_proj.weight": rand(w, _HIDDEN)}
            t |= {p + "mlp.down_proj.weight": rand(_HIDDEN, w), p + "post_attention_layernorm.weight": ones()}
    save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True))
    (out / "configuration_decilm.py").write_text(CONFIG_CLASS)


OWN_BUILDS = {"tiny-nemotron-nas": build_nemotron_nas}


# Step 3.5 (step3p5): vLLM ships its config class; no weights are written, vLLM serves it with
# --load-format dummy (random weights of the shapes it builds). Two sliding layers of 4 KV heads (the
# other setting) between full ones of 2, MoE on layers 1 and 3 (vLLM's class needs one), a head-wise gate.
STEP3P5_CONFIG = {
    "architectures": ["Step3p5ForCausalLM"],
    "model_type": "step3p5",
    "hidden_size": _HIDDEN,
    "intermediate_size": 256,
    "num_attention_heads": _HEADS,
    "num_attention_groups": 2,
    "head_dim": _HEAD_DIM,
    "num_hidden_layers": 4,
    "vocab_size": _VOCAB,
    "max_position_embeddings": 4096,
    "max_seq_len": 4096,
    "sliding_window": 64,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "attention_other_setting": {
        "attention_type": "sliding_attention",
        "num_attention_heads": 8,
        "num_attention_groups": 4,
        "head_dim": _HEAD_DIM,
    },
    "use_moe": True,
    "moe_layers_enum": "1,3",
    "moe_num_experts": 4,
    "moe_top_k": 2,
    "moe_intermediate_size": 64,
    "share_expert_dim": 64,
    # Step-3.5-Flash's rotary layout: its own base and part of the head for each layer type, scaled on one
    "rope_theta": [10000.0, 500000.0, 10000.0, 500000.0],
    "partial_rotary_factors": [1.0, 0.5, 1.0, 0.5],
    "yarn_only_types": ["full_attention"],
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 2.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 32.0,
        "original_max_position_embeddings": 2048,
    },
    "use_head_wise_attn_gate": True,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def build_step3p5(out: Path) -> None:
    (out / "config.json").write_text(json.dumps(STEP3P5_CONFIG, indent=2, sort_keys=True))


OWN_BUILDS["tiny-step3p5"] = build_step3p5


# DBRX: its own key names, attention and MoE settings nested; 4 experts of 64, 2 KV heads of 4
DBRX_CONFIG = {
    "architectures": ["DbrxForCausalLM"],
    "model_type": "dbrx",
    "d_model": _HIDDEN,
    "n_heads": _HEADS,
    "n_layers": 2,
    "max_seq_len": 4096,
    "vocab_size": _VOCAB,
    "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
    "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


def build_dbrx(out: Path) -> None:
    (out / "config.json").write_text(json.dumps(DBRX_CONFIG, indent=2, sort_keys=True))


OWN_BUILDS["tiny-dbrx"] = build_dbrx
