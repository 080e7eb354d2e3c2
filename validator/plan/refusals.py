"""Configs the model shape cannot describe, refused by name (exit 2) rather than planned as the
generic decoder they resemble: such a plan would be silently wrong, by more than the 3 % bound."""

from __future__ import annotations

from typing import Any

from validator.errors import NotModelled

# Families whose layers the shape cannot describe, by model type
NOT_MODELLED = {
    "gemma4_text": (
        "Gemma 4: its full-attention layers have their own head size and KV heads (global_head_dim, "
        "num_global_key_value_heads with attention_k_eq_v), so their KV pages differ from the sliding "
        "layers' (vLLM 0.32 raises the smaller pages' block size to match), and per-layer input embeddings "
        "and a dense MLP beside the experts add weights; read the capacity from vLLM's start-up log (GPU KV "
        "cache size)"
    ),
}
# Keys that give some layers an attention shape of their own (Gemma 4's global layers, Step 3.5's
# other-setting layers): the shape here has one head size and KV head count for every layer
PER_LAYER_ATTENTION_KEYS = (
    "per_layer_config",
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_other_setting",
)


def refuse_unmodelled(cfg: dict[str, Any], model_type: str) -> None:
    """Raise NotModelled for a family above or a config with per-layer attention shapes."""
    family = "gemma4_text" if model_type == "gemma4" else model_type  # a text_config may lack its own
    if family in NOT_MODELLED:
        raise NotModelled(NOT_MODELLED[family])
    own = [k for k in PER_LAYER_ATTENTION_KEYS if cfg.get(k) is not None]
    if own:
        raise NotModelled(
            f"{model_type}: layers with an attention shape of their own ({own[0]} in config.json); "
            "read the capacity from vLLM's start-up log (GPU KV cache size)"
        )
