"""GPT-2-era decoders' config.json as vLLM 0.32 builds them (pure), rewritten to the keys the rest
of the planner reads: GPT-2 (gpt2.py), StarCoder 1 / SantaCoder (GPTBigCode, through the
Transformers backend), OPT (opt.py), GPT-J (gpt_j.py) and BLOOM (bloom.py).

- Learned position embeddings (GPT-2, GPTBigCode: n_positions x hidden; OPT: 2 more rows, its
  offset), a plain embedding every rank holds whole; no rotary table (nor BLOOM's: ALiBi). OPT with
  a word_embed_proj_dim of its own (OPT-350m) embeds at that width and projects in and out with two
  replicated matrices; BLOOM normalises its embeddings (a LayerNorm every rank holds).
- An ungated MLP of n_inner (4 x hidden where null; BLOOM's always; OPT's ffn_dim), LayerNorms, and a
  bias on every linear layer (OPT: enable_bias); GPT-J's attention has none, its MLP and LM head do, and one
  LayerNorm a layer feeds attention and MLP side by side. GPT-J rotates rotary_dim of each head.
- GPTBigCode: one KV head with multi_query (its default); at TP >= 2 its MLP whole on every rank. OPT's
  last LayerNorm only with do_layer_norm_before and without _remove_final_layer_norm (OPT-350m has none).
- transformers' config defaults where config.json is silent (tied embeddings but for GPT-J).
Measured on tiny models of each (tests/test_legacy_families.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPT2_TYPES = ("gpt2", "gpt_bigcode")
CLASSIC_TYPES = (*GPT2_TYPES, "opt", "gptj", "bloom")
NO_ROTARY = (*GPT2_TYPES, "opt", "bloom")  # learned positions, ALiBi
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": dict(tie_word_embeddings=True, n_positions=1024),
    "gpt_bigcode": dict(tie_word_embeddings=True, n_positions=1024, multi_query=True),
    "opt": dict(tie_word_embeddings=True, enable_bias=True, do_layer_norm_before=True, max_position_embeddings=2048),
    "gptj": dict(tie_word_embeddings=False, n_positions=2048, rotary_dim=64),
    "bloom": dict(tie_word_embeddings=True),
}
# vLLM 0.32's Transformers backend with no TP plan in the config splits what its fusers match (q/k/v with
# o; gate/up, and down where the activation has an AndMul kernel) and holds every other linear layer
# whole on every rank (transformers/base.py: "replicate the rest"). What each family's tiny one held whole
# at TP 2 (rank 0 measured): GPTBigCode its ungated MLP (c_attn and c_proj split); BitNet its MLP's down
# (ReLU squared has none); Persimmon (a packed query_key_value no fuser matches) and JetMoE (attention and
# MLP experts) every layer: only the vocabulary is split
WHOLE_AT_TP = {"gpt_bigcode": "mlp", "bitnet": "down", "persimmon": "all", "jetmoe": "all"}
# Of these, vLLM 0.32 starts BitNet, Persimmon and JetMoE at TP 2 (the weights above) but fails their first
# forward pass: a norm or reshape across the width it split meets half of it (tiny ones, with
# tests/vllm_weights.py FORWARD=1; each ran at TP 1, GPTBigCode at TP 2)
FAILS_AT_TP = ("bitnet", "persimmon", "jetmoe")
OPT_POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: positions + 2


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def classic_reads(cfg: dict[str, Any]) -> dict[str, Any]:
    """A GPT-2 / GPTBigCode / OPT / GPT-J / BLOOM config.json as the planner's keys (any other as is)."""
    model_type = cfg.get("model_type")
    if model_type not in CLASSIC_TYPES:
        return cfg
    cfg = _DEFAULTS[model_type] | cfg
    if model_type == "opt":
        return _opt(cfg)
    hidden = _int(cfg.get("n_embd", cfg.get("hidden_size", cfg.get("n_embed"))))
    positions = cfg.get("n_positions", cfg.get("max_position_embeddings"))
    out = cfg | {"hidden_size": hidden, "max_position_embeddings": positions}
    inner = cfg.get("n_inner") if model_type != "bloom" else None
    out["intermediate_size"] = inner if inner is not None else 4 * hidden if hidden else None
    if model_type == "gptj":
        heads = _int(cfg.get("num_attention_heads", cfg.get("n_head")))
        rotary = _int(cfg.get("rotary_dim"))
        if hidden and heads and rotary and hidden % heads == 0:
            out["partial_rotary_factor"] = rotary / (hidden // heads)
        return out | {"attention_bias": False, "mlp_bias": True, "lm_head_bias": True, "classic_layer_norms": 1}
    if model_type == "gpt_bigcode" and cfg.get("multi_query") is True:
        out["num_key_value_heads"] = 1
    if model_type == "bloom":
        return out | {"attention_bias": True, "mlp_bias": True, "embedding_norm": True}
    return out | {"attention_bias": True, "mlp_bias": True, "learned_positions": _int(positions)}


def _opt(cfg: dict[str, Any]) -> dict[str, Any]:
    hidden = _int(cfg.get("hidden_size"))
    proj = _int(cfg.get("word_embed_proj_dim")) or hidden
    positions = _int(cfg.get("max_position_embeddings"))
    bias = cfg.get("enable_bias") is not False
    final = cfg.get("do_layer_norm_before") is not False and cfg.get("_remove_final_layer_norm") is not True
    return cfg | {
        "intermediate_size": cfg.get("ffn_dim"),
        "attention_bias": bias,
        "mlp_bias": bias,
        "learned_positions": positions + OPT_POSITION_OFFSET if positions else None,
        "embedding_width": proj,
        "final_layer_norm": final,
    }


@dataclass(frozen=True)
class ClassicEdges:
    """What these families hold beside the embedding table, whole on every rank."""

    positions: int  # learned position embedding rows (0: none), hidden_size wide
    width: int | None  # the token embedding's width where not hidden_size (OPT's word_embed_proj_dim)
    final_norm: bool  # the last LayerNorm before the LM head
    embedding_norm: bool = False  # a LayerNorm after the embedding (BLOOM's)

    def replicated_params(self, hidden: int) -> int:
        """Learned positions, OPT's project_in and project_out (hidden x width each, no bias), BLOOM's norm."""
        return (
            self.positions * hidden + (2 * hidden * self.width if self.width else 0) + 2 * hidden * self.embedding_norm
        )


def classic_edges(cfg: dict[str, Any]) -> ClassicEdges | None:
    """The edges of a config.json classic_reads rewrote (None for any other family)."""
    if cfg.get("model_type") not in CLASSIC_TYPES:
        return None
    width, hidden = _int(cfg.get("embedding_width")), _int(cfg.get("hidden_size"))
    return ClassicEdges(
        positions=_int(cfg.get("learned_positions")) or 0,
        width=width if width != hidden else None,
        final_norm=cfg.get("final_layer_norm") is not False,
        embedding_norm=cfg.get("embedding_norm") is True,
    )
