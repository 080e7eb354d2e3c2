"""Configs the model shape cannot describe, refused by name (exit 2) rather than planned as the
generic decoder they resemble: such a plan would be silently wrong, by more than the 3 % bound."""

from __future__ import annotations

from typing import Any

from validator.errors import NotModelled
from validator.plan.layer_heads import GEMMA4

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
