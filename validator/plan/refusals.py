"""Configs the model shape cannot describe, refused by name (exit 2) rather than planned as the
generic decoder they resemble: such a plan would be silently wrong, by more than the 3 % bound."""

from __future__ import annotations

from typing import Any

from validator.errors import InputError, NotModelled
from validator.plan.layer_heads import GEMMA4
from validator.plan.vllm_architectures import REMOVED, refused_as_removed

# Keys that give some layers an attention shape of their own: read for Gemma 4 (plan/layer_heads.py,
# as vLLM's gemma4.py builds them) and Step 3.5 (attention_other_setting, plan/step3p5.py); elsewhere refused
PER_LAYER_ATTENTION_KEYS = (
    "per_layer_config",
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_other_setting",
)


def refuse_unmodelled(cfg: dict[str, Any], model_type: str) -> None:
    """Raise NotModelled for a config with per-layer attention shapes kvgate does not read."""
    if model_type in (*GEMMA4, "step3p5"):  # plan/step3p5.py reads attention_other_setting
        return
    own = [k for k in PER_LAYER_ATTENTION_KEYS if cfg.get(k) is not None]
    if own:
        raise NotModelled(
            f"{model_type}: layers with an attention shape of their own ({own[0]} in config.json); "
            "read the capacity from vLLM's start-up log (GPU KV cache size)"
        )


def refuse_removed(cfg: dict[str, Any], version: str, parsed: tuple[int, int, int]) -> None:
    """Raise InputError for a config vLLM `version` will not serve: every architecture it names was
    removed by then and has no path through the Transformers backend (vLLM refuses it at start-up with
    "was supported in vLLM until ..."); and for MPT, whose config keys (n_heads, d_model, attn_config)
    kvgate does not read."""
    given = cfg.get("architectures")
    archs = [a for a in given if isinstance(a, str)] if isinstance(given, list) else []
    auto_map = cfg.get("auto_map")
    own_code = isinstance(auto_map, dict) and any(str(k).startswith("AutoModel") for k in auto_map)
    if archs and all(refused_as_removed(a, own_code, parsed) for a in archs):
        removed = ".".join(map(str, REMOVED[archs[0]]))
        raise InputError(
            f"config.json: architectures {archs[0]} was removed from vLLM in {removed} and vLLM {version} "
            f"does not serve it (no class, none on its Transformers backend); plan and serve with vLLM "
            f"below {removed} (vllm.version in the profile) or convert the checkpoint to a served architecture"
        )
    if cfg.get("model_type") == "mpt":
        raise NotModelled(
            "mpt: its config keys (n_heads, d_model, attn_config) are not read; vLLM serves MPT "
            "only below 0.28.0: read the capacity from its start-up log (GPU KV cache size)"
        )
