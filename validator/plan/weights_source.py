"""The words a plan gives for weights counted from config.json alone (pure): what the count holds."""

from __future__ import annotations

from validator.plan.layer_heads import GEMMA4
from validator.plan.model_shape import ModelShape
from validator.plan.weights import WeightCount
from validator.units import cdiv


def estimated_source(shape: ModelShape, count: WeightCount, served: str, ep: bool, split_words: str, tp: int) -> str:
    """The ledger's source for a count from config.json: each term it includes that a reader may doubt."""
    return (
        "estimated from config.json (parameter count: "
        + ("MoE experts, " if shape.num_experts else "")
        + ("state layers with their float32 A, " if shape.state else "")
        + ("Gemma 4's layers as vLLM builds them, " if shape.model_type in GEMMA4 else "")
        + ("Gemma 4 vision tower, " if shape.model_type in GEMMA4 and count.vision_replicated else "")
        + ("tied embeddings, " if shape.tie_word_embeddings and count.lm_head == 0 else "")
        + (f"{shape.vision.name} vision tower, " if shape.vision else "")
        + (
            "NOT the vision tower (not modelled for this family: give model.weights_bytes or the checkpoint), "
            if shape.multimodal and not shape.vision and not count.vision_replicated
            else ""
        )
        + (f"{count.format_label}, " if shape.quant or shape.quant_method else "")
        + (f"float32 checkpoint held in {served}, " if shape.dtype == "float32" and served != "float32" else "")
        + (f"experts whole on each rank ({cdiv(count.num_experts, tp)} of them on rank 0), " if ep else "")
        + split_words
        + "split by TP/PP)"
    )
