"""Where a family's layers carry biases, and whether its MLP has a gate, as vLLM 0.32 builds them
(its model classes, or transformers' through the Transformers backend), read from config.json.
Measured on tiny models of each family (tests/test_bias_families.py): a bias the count missed was
0.2 % to 0.7 % of those models' bytes, an ungated MLP counted as gated 8 % to 18 %."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# families whose MLP is up, activation, down (no gate): vLLM's phi, gpt_neox, starcoder2, ...;
# Nemotron's, Arcee's and Jais 2's squared ReLU, Apertus' xIELU
UNGATED_MLP = ("phi", "gpt_neox", "gpt2", "gptj", "gpt_bigcode", "starcoder2", "opt", "falcon", "bloom", "mpt",
               "nemotron", "arcee", "apertus", "jais2", "persimmon")  # fmt: skip
# attention_bias gives q/k/v a bias and leaves o without (their classes' qkv_bias); elsewhere, as in
# vLLM's llama.py (and Granite, EXAONE, Gemma 2 / 3, Nemotron, Apertus, gpt-oss, transformers' Arcee,
# SmolLM3, OLMo 3, HunYuan) o follows it
QKV_ONLY = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "minimax_m2")
# LayerNorms (a bias beside each weight): GPT-NeoX, Starcoder2, Phi-2, StableLM, PhiMoE, Jais 2; Nemotron's
# LayerNorm1P, Falcon; GPT-2, GPTBigCode, OPT, BLOOM, Persimmon (and GPT-J's one a layer)
LAYER_NORM = ("gpt_neox", "starcoder2", "phi", "stablelm", "phimoe", "nemotron", "jais2", "falcon", "gpt2",
              "gpt_bigcode", "opt", "bloom", "persimmon")  # fmt: skip
# xIELU's learned scalars (alpha_p, alpha_n), held in bfloat16 whatever the dtype (vLLM's activation.py)
XIELU_SCALARS = {"apertus": 2}


@dataclass(frozen=True)
class Biases:
    """Which linear layers carry a bias and whether the norms are LayerNorms. Split by TP as their
    layers: q/k/v's, a gate/up's and the LM head's (by vocabulary); on every rank: o's and down's
    (row-parallel layers add theirs after the reduction) and the norms'."""

    qkv: bool = False
    o: bool = False
    mlp: bool = False  # a dense MLP's gate/up and down
    norm: bool = False
    lm_head: bool = False
    norms: int | None = None  # the norms a layer holds, where config.json decides it (Falcon's)


def _flag(cfg: dict[str, Any], key: str, default: bool) -> bool:
    v = cfg.get(key)
    return v if isinstance(v, bool) else default


def biases(cfg: dict[str, Any], model_type: str) -> Biases:
    """The family's biases (vLLM 0.32's classes; transformers' defaults where config.json is silent)."""
    if model_type == "starcoder2":  # use_bias on every linear layer
        every = _flag(cfg, "use_bias", True)
        return Biases(qkv=every, o=every, mlp=every, norm=True)
    if model_type == "gpt_neox":  # the MLP's always
        attn = _flag(cfg, "attention_bias", True)
        return Biases(qkv=attn, o=attn, mlp=True, norm=True)
    if model_type == "phi":
        return Biases(qkv=True, o=True, mlp=True, norm=True, lm_head=True)
    if model_type == "phimoe":  # vLLM's phimoe.py builds them whatever config.json says
        return Biases(qkv=True, o=True, norm=True, lm_head=True)
    if model_type == "falcon":  # as plan/falcon.py rewrote it: `bias` on every linear layer
        every = cfg.get("attention_bias") is True
        norms = cfg.get("falcon_layer_norms")
        return Biases(qkv=every, o=every, mlp=every, norm=True, norms=norms if isinstance(norms, int) else None)
    if model_type == "gptj":  # no attention biases; the MLP's and the LM head's; one LayerNorm a layer
        return Biases(mlp=True, norm=True, lm_head=True, norms=1)
    if model_type == "persimmon":  # transformers' modeling_persimmon: every linear layer
        return Biases(qkv=True, o=True, mlp=True, norm=True)
    if model_type == "stablelm":
        return Biases(qkv=_flag(cfg, "use_qkv_bias", False), norm=True)
    attn = bool(cfg.get("attention_bias")) or model_type in ("qwen2", "qwen2_moe")
    if model_type == "seed_oss":
        o = _flag(cfg, "attention_out_bias", False)
    else:
        o = attn and model_type not in QKV_ONLY
    return Biases(qkv=attn, o=o, mlp=_flag(cfg, "mlp_bias", False), norm=model_type in LAYER_NORM)
