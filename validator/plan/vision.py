"""A multimodal model's vision tower, from config.json's vision_config, counted where the layers vLLM
loads and the projector are known (one formula per family): Gemma 3's SigLIP, Mistral 3's Pixtral,
the CLIP or SigLIP ViT of LLaVA and LLaVA-NeXT (granite-vision among them), Llama 4's and Kimi-VL's
MoonViT, Qwen3.5's (Qwen3-VL's vision transformer without deepstack mergers). Elsewhere the tower is
not counted and the ledger says so (Qwen2-VL's, ...)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class VisionTower(ABC):
    """A tower and its projection into the text model; its parameters, in the checkpoint dtype,
    split by TP with the rest of the model (vLLM builds both with parallel linear layers)."""

    name: ClassVar[str]
    hidden: int
    intermediate: int
    layers: int  # the layers vLLM builds, up to the deepest feature layer the model reads
    patch: int
    channels: int
    text_hidden: int

    @property
    @abstractmethod
    def params(self) -> int: ...

    @property
    def replicated_params(self) -> int:
        """Parameters every TP rank holds whole (a projector vLLM builds with ReplicatedLinear)."""
        return 0

    @property
    def rotary_table(self) -> int:
        """Elements of a rotary cos/sin cache the tower holds as a buffer, on every rank."""
        return 0


def _vit_layer(h: int, i: int) -> int:
    """A CLIP / SigLIP encoder layer: q/k/v/o and fc1/fc2 with biases, two LayerNorms."""
    return 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h


@dataclass(frozen=True)
class SiglipTower(VisionTower):
    """Gemma 3: a pre-norm ViT (q/k/v/o and fc1/fc2 with biases, two LayerNorms a layer), learned
    position embeddings, a post-LayerNorm; projector mm_input_projection (vision x text hidden) and
    the soft-embedding RMSNorm."""

    name: ClassVar[str] = "SigLIP"
    image: int

    @property
    def params(self) -> int:
        h = self.hidden
        patches = (self.image // self.patch) ** 2
        embeddings = self.channels * self.patch**2 * h + h + patches * h  # patch convolution, positions
        projector = h * self.text_hidden + h
        return self.layers * _vit_layer(h, self.intermediate) + embeddings + 2 * h + projector  # + post-LayerNorm


@dataclass(frozen=True)
class PixtralTower(VisionTower):
    """Mistral 3 (Mistral-Small-3.1 / 3.2): Pixtral's ViT (vLLM's PixtralHFVisionModel: a patch
    convolution and ln_pre without biases, two RMSNorms, q/k/v/o and a gated MLP without biases a
    layer, 2D rotary positions with no parameters); projector (Mistral3MultiModalProjector): an
    RMSNorm, the patch merger (merge^2 patches x hidden -> hidden), linear_1 (hidden -> text hidden)
    and linear_2 (text hidden -> text hidden), biased only with multimodal_projector_bias."""

    name: ClassVar[str] = "Pixtral"
    attention: int  # heads x head_dim
    merge: int
    projector_bias: bool

    @property
    def params(self) -> int:
        h, i, a, t = self.hidden, self.intermediate, self.attention, self.text_hidden
        per_layer = 2 * h + 3 * h * a + a * h + 3 * h * i
        embeddings = self.channels * self.patch**2 * h + h
        projector = h + self.merge**2 * h * h + h * t + t * t + (2 * t if self.projector_bias else 0)
        return self.layers * per_layer + embeddings + projector


@dataclass(frozen=True)
class _LlavaTower(VisionTower):
    """LLaVA / LLaVA-NeXT: the ViT as vLLM builds it for them (init_vision_tower_for_llava with
    require_post_norm=False: up to the deepest feature layer, no post-LayerNorm, no pooling head);
    projector linear_1 (hidden x the feature layers LLaVA-NeXT concatenates -> text hidden), GELU,
    linear_2 (text hidden -> text hidden), biased per multimodal_projector_bias; LLaVA-NeXT's
    image_newline (text hidden)."""

    image: int
    inputs: int  # feature layers concatenated into linear_1
    projector_bias: bool
    newline: bool

    @property
    @abstractmethod
    def embeddings(self) -> int: ...

    @property
    def params(self) -> int:
        h, t = self.hidden, self.text_hidden
        projector = self.inputs * h * t + t * t + (2 * t if self.projector_bias else 0) + (t if self.newline else 0)
        return self.layers * _vit_layer(h, self.intermediate) + self.embeddings + projector


@dataclass(frozen=True)
class LlavaClipTower(_LlavaTower):
    name: ClassVar[str] = "CLIP"

    @property
    def embeddings(self) -> int:
        """The class embedding, a patch convolution without bias, a position per patch and one for
        the class token, and the pre-LayerNorm."""
        h, patches = self.hidden, (self.image // self.patch) ** 2
        return h + self.channels * self.patch**2 * h + (patches + 1) * h + 2 * h


@dataclass(frozen=True)
class LlavaSiglipTower(_LlavaTower):
    name: ClassVar[str] = "SigLIP"

    @property
    def embeddings(self) -> int:
        """A patch convolution with bias and a position per patch."""
        h, patches = self.hidden, (self.image // self.patch) ** 2
        return self.channels * self.patch**2 * h + h + patches * h


LLAVA_TOWERS: dict[Any, type[_LlavaTower]] = {
    "clip_vision_model": LlavaClipTower,
    "siglip_vision_model": LlavaSiglipTower,
}


@dataclass(frozen=True)
class Llama4Tower(VisionTower):
    """Llama 4 (vLLM's mllama4.py, Llama4VisionModel): a ViT of biased q/k/v/o and fc1/fc2 with two
    LayerNorms a layer, an unfolded patch projection without bias, a class embedding, positions for
    the patches and the class token, LayerNorms before and after; the pixel-shuffle adapter (an MLP
    from intermediate_size through projector_input_dim to projector_output_dim, biased with
    multi_modal_projector_bias) and the projector linear_1 (vision_output_dim -> text hidden, no
    bias)."""

    name: ClassVar[str] = "Llama 4"
    image: int
    adapter_in: int
    adapter_mid: int
    adapter_out: int
    output: int
    adapter_bias: bool

    @property
    def params(self) -> int:
        h = self.hidden
        positions = (self.image // self.patch) ** 2 + 1
        embeddings = self.channels * self.patch**2 * h + h + positions * h + 4 * h
        adapter = self.adapter_in * self.adapter_mid + self.adapter_mid * self.adapter_out
        adapter += self.adapter_mid + self.adapter_out if self.adapter_bias else 0
        return self.layers * _vit_layer(h, self.intermediate) + embeddings + adapter + self.output * self.text_hidden


@dataclass(frozen=True)
class MoonVitTower(VisionTower):
    """Kimi-VL (vLLM's moonvit.py): MoonViT, a ViT of biased fused q/k/v, o and fc0/fc1 with two
    LayerNorms a layer (split by TP: QKVParallelLinear, Column / RowParallelLinear), a patch
    convolution with bias, a learned position table (init_pos_emb_height x width x hidden), a final
    LayerNorm; its 2D rotary table has no parameters. The projector (kimi_vl.py's
    KimiVLMultiModalProjector: a LayerNorm, linear_1 over merge^2 patches, GELU, linear_2 to the text
    hidden, both biased) is a pair of ReplicatedLinear: every rank holds it whole (the H100 rows:
    15.53 GiB at TP 2 of 30.74 at TP 1)."""

    name: ClassVar[str] = "MoonViT"
    positions: int  # the learned table's height x width
    merge: int  # patches merged into one projector input (merge_kernel_size's product)

    @property
    def params(self) -> int:
        h = self.hidden
        embeddings = self.channels * self.patch**2 * h + h + self.positions * h
        return self.layers * _vit_layer(h, self.intermediate) + embeddings + 2 * h

    @property
    def replicated_params(self) -> int:
        m, t = self.merge * self.hidden, self.text_hidden
        return 2 * self.hidden + m * m + m + m * t + t


@dataclass(frozen=True)
class QwenVitTower(VisionTower):
    """Qwen3.5 (vLLM's Qwen3_VisionTransformer): a patch convolution over temporal x patch^2 pixels
    with bias, a learned position table, `layers` blocks of two LayerNorms, fused q/k/v and proj, a
    biased MLP (fc1, fc2), all split by TP; then the merger: a LayerNorm, fc1 over merge^2 patches and
    fc2 into the text hidden, both biased. Its 2D rotary table is a buffer (rotary_table)."""

    name: ClassVar[str] = "Qwen3.5 ViT"
    temporal: int
    positions: int
    merge: int  # patches merged into one merger input (spatial_merge_size squared)
    heads: int

    @property
    def params(self) -> int:
        h, m = self.hidden, self.merge * self.hidden
        embeddings = self.channels * self.temporal * self.patch**2 * h + h + self.positions * h
        merger = 2 * h + m * m + m + m * self.text_hidden + self.text_hidden
        return self.layers * _vit_layer(h, self.intermediate) + embeddings + merger

    @property
    def rotary_table(self) -> int:
        """Elements of the tower's cos/sin cache: 8,192 positions x half its head (get_rope with
        partial_rotary_factor 0.5), in the model's dtype."""
        return 8192 * (self.hidden // self.heads // 2)


def _int(d: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = d.get(key, default)
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 24 else None


def _feature_layers(cfg: dict[str, Any], layers: int, default: int) -> list[int] | None:
    """The tower layers the model reads its features from, as vLLM's get_layer_index counts them
    (-1: the last, so all of them are built); the default is the one transformers' config class
    fills in. vLLM builds the tower up to the deepest of them."""
    f = cfg.get("vision_feature_layer", default)
    picks = f if isinstance(f, list) else [f]
    if not picks or not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= layers for x in picks):
        return None
    return [layers + x + 1 if x < 0 else x for x in picks]


def vision_tower(cfg: dict[str, Any], text_hidden: int | None) -> VisionTower | None:
    """The tower of a (model type, vision model type) pair counted above; else None."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict) or text_hidden is None:
        return None
    model, vit = cfg.get("model_type"), v.get("model_type")
    if model in ("qwen3_5", "qwen3_5_moe"):
        return _qwen_vit(v)
    sizes = [_int(v, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "patch_size")]
    channels, image = _int(v, "num_channels", 3), _int(v, "image_size")
    if channels is None or any(x is None for x in sizes):
        return None
    h, i, n, p = (x for x in sizes if x is not None)
    if (model, vit) == ("gemma3", "siglip_vision_model"):
        return SiglipTower(h, i, n, p, channels, text_hidden, image=image) if image else None
    if (model, vit) == ("mistral3", "pixtral"):
        heads, merge = _int(v, "num_attention_heads"), _int(cfg, "spatial_merge_size", 2)
        picks = _feature_layers(cfg, n, -1)  # Mistral3Config's default: the last layer
        head_dim = _int(v, "head_dim", h // heads) if heads else None
        if heads is None or head_dim is None or merge is None or picks is None:
            return None
        bias = cfg.get("multimodal_projector_bias", False) is True
        return PixtralTower(h, i, max(picks), p, channels, text_hidden, heads * head_dim, merge, bias)
    if (model, vit) == ("llama4", "llama4_vision_model"):
        dims = [_int(v, k) for k in ("projector_input_dim", "projector_output_dim", "vision_output_dim")]
        if image is None or any(x is None for x in dims):
            return None
        mid, out, output = (x for x in dims if x is not None)
        bias = v.get("multi_modal_projector_bias", False) is True
        return Llama4Tower(h, i, n, p, channels, text_hidden, image, i, mid, out, output, bias)
    if (model, vit) == ("kimi_vl", "moonvit"):
        height, width = _int(v, "init_pos_emb_height", 64), _int(v, "init_pos_emb_width", 64)  # MoonViTConfig's
        kernel = v.get("merge_kernel_size", [2, 2])
        sides = [_int({"side": k}, "side") for k in kernel] if isinstance(kernel, list) and len(kernel) == 2 else []
        if height is None or width is None or len(sides) != 2 or sides[0] is None or sides[1] is None:
            return None
        return MoonVitTower(h, i, n, p, channels, text_hidden, height * width, sides[0] * sides[1])
    llava = LLAVA_TOWERS.get(vit) if model in ("llava", "llava_next") else None
    picks = _feature_layers(cfg, n, -2)  # LlavaConfig's default: the penultimate layer
    if llava is None or image is None or picks is None:
        return None
    next_ = model == "llava_next"  # concatenates its feature layers and adds an image_newline
    bias = cfg.get("multimodal_projector_bias", True) is not False
    inputs = len(picks) if next_ else 1  # vLLM's llava.py feeds the projector one layer
    return llava(h, i, max(picks), p, channels, text_hidden, image, inputs, bias, newline=next_)


def _qwen_vit(v: dict[str, Any]) -> VisionTower | None:
    """Qwen3.5's tower from its vision_config, Qwen3_5VisionConfig's defaults where a key is absent
    (fc2's width too: out_hidden_size, as vLLM reads it); None with deepstack mergers (Qwen3-VL's)."""
    keys = {"hidden_size": 1152, "intermediate_size": 4304, "depth": 27, "patch_size": 16, "in_channels": 3}
    keys |= {"temporal_patch_size": 2, "out_hidden_size": 3584, "num_position_embeddings": 2304}
    keys |= {"spatial_merge_size": 2, "num_heads": 16}
    sizes = [_int(v, k, d) for k, d in keys.items()]
    if v.get("deepstack_visual_indexes"):
        return None
    h, i, n, p, c, t, out, positions, merge, heads = (x or 0 for x in sizes)
    if not all(sizes) or h % heads:
        return None
    return QwenVitTower(h, i, n, p, c, out, t, positions, merge * merge, heads)
