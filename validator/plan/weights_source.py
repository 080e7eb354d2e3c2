"""The words a plan gives for weights counted from config.json alone, and the checkpoint's headers
as vLLM holds them (pure)."""

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


def headers_as_held(
    headers: int,
    count: WeightCount,
    stored: WeightCount | None,
    tp: int,
    pp: int,
    held: list[str],
    *,
    ep: bool = False,
    width: int = 0,
) -> tuple[int, int, str]:
    """The checkpoint's bytes as vLLM holds them (the whole model's, rank 0's, and the words of the
    source): its rotary cos/sin tables on every rank beside the tensors (2.5 GiB for Llama 4 Scout's
    10M positions), and where the count as stored (`stored`: at the checkpoint's dtype, MXFP4 experts
    unpadded) equals the headers to the byte, the count as held: its split by TP (norms, KV heads
    fewer than the ranks, whole on each; tiny-gqa at TP 2, measured), a float32 checkpoint in
    bfloat16, MXFP4 experts padded to the GPU kernel's tile (gpt-oss-20b: 13,761,264,768 B stored,
    the count to the byte; 13.70 GiB held on an A100, 13.72 logged). Experts whole on each rank
    (`ep`) or padded (`width`) add rank 0's surplus either way."""
    rope = f" + {count.rope_cache / 2**20:.1f} MiB of rotary cos/sin tables vLLM allocates on every rank"
    rope = rope if count.rope_cache else ""
    if stored is None or headers != stored.total_bytes:
        rank = cdiv(headers, tp * pp) + count.rope_cache + (count.ep_surplus(tp, pp) if ep else 0)
        return headers, rank + count.pad_surplus(tp, width, pp), "safetensors headers, split evenly by TP/PP" + rope
    how = "".join(f", {h}" for h in held)
    source = f"safetensors headers (equal to the count from config.json{how}, split by TP/PP as vLLM does){rope}"
    return count.total_bytes, count.rank_bytes(tp, pp, ep=ep, width=width), source
