"""A multimodal model's vision tower, from config.json's vision_config, counted where vLLM loads the
whole tower and the projector is known (Gemma 3: SigLIP). Elsewhere the tower is not counted and the
ledger says so: LLaVA-style models drop trailing layers (vision_feature_layer), other families run
towers of their own (Pixtral, MoonViT, Llama 4's), none backed by a start-up row here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VIT_TYPES = ("siglip_vision_model",)  # pre-norm ViT: q/k/v/o and fc1/fc2 with biases, two LayerNorms
PROJECTORS = ("gemma3",)  # model types whose projector is counted below


@dataclass(frozen=True)
class VisionTower:
    hidden: int
    intermediate: int
    layers: int
    patch: int
    image: int
    channels: int
    projector: int  # parameters of the projection into the text model

    @property
    def params(self) -> int:
        h, i = self.hidden, self.intermediate
        per_layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
        patches = (self.image // self.patch) ** 2
        embeddings = self.channels * self.patch**2 * h + h + patches * h  # patch convolution, positions
        return self.layers * per_layer + embeddings + 2 * h + self.projector  # + the post-LayerNorm


def _int(d: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = d.get(key, default)
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 24 else None


def vision_tower(cfg: dict[str, Any], text_hidden: int | None) -> VisionTower | None:
    """The tower of a model type listed in PROJECTORS with a ViT listed in VIT_TYPES; else None."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict) or cfg.get("model_type") not in PROJECTORS or v.get("model_type") not in VIT_TYPES:
        return None
    sizes = [_int(v, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "patch_size", "image_size")]
    channels = _int(v, "num_channels", 3)
    if text_hidden is None or channels is None or any(x is None for x in sizes):
        return None
    h, i, n, p, img = (x for x in sizes if x is not None)
    # Gemma 3: mm_input_projection_weight (vision x text hidden) and the soft-embedding RMSNorm
    return VisionTower(h, i, n, p, img, channels, projector=h * text_hidden + h)
