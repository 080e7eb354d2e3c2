"""Per-request state of linear-attention and state-space layers, and which layers have it.

Mirrors vLLM 0.32's ``MambaStateShapeCalculator`` (``model_executor/layers/mamba/mamba_utils.py``)
and each hybrid model's ``get_mamba_state_shape_from_config``, without importing either: one
frozen value per state kind, its bytes a derived figure, one formula each. A request holds a
fixed number of these pages whatever its length (see ``kv_spec.MambaSpec``).

Pure: reads a config.json's contents only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from validator.errors import InputError


class StateKind(Enum):
    MAMBA1 = "mamba1"
    MAMBA2 = "mamba2"
    GATED_DELTA_NET = "gated_delta_net"
    SHORT_CONV = "short_conv"


def _split(n: int, tp: int, what: str) -> int:
    if n % tp:
        raise InputError(f"tensor_parallel_size: {tp} does not divide the model's {what} ({n}); pick a divisor")
    return n // tp


@dataclass(frozen=True)
class LayerState:
    """One layer's state for one request: a convolution window and a recurrent (temporal) state."""

    kind: ClassVar[StateKind]
    # align mode (prefix caching on) keeps this many extra pages per request beyond the running
    # and the last block-boundary state: Mamba-2 mixers export a prefill checkpoint (1), others 0
    prefill_checkpoint_blocks: ClassVar[int] = 0
    # speculative decoding widens the conv window by the draft tokens (num_spec in vLLM's
    # mamba2_state_shape and gated_delta_net_state_shape; Mamba (v1) takes none)
    spec_conv_rows: ClassVar[bool] = False
    conv_kernel: int

    def conv_width(self, tp: int) -> int:
        """The channels the convolution window holds, on one rank."""
        raise NotImplementedError

    def conv_elements(self, tp: int, spec_tokens: int = 0) -> int:
        """The window: kernel - 1 rows of conv_width (plus a row a draft token where the mixer keeps one)."""
        rows = self.conv_kernel - 1 + (spec_tokens if self.spec_conv_rows else 0)
        return self.conv_width(tp) * rows

    def temporal_elements(self, tp: int) -> int:
        raise NotImplementedError

    def bytes(self, tp: int, conv_bytes: int, temporal_bytes: int, spec_tokens: int = 0) -> int:
        """vLLM's ``MambaSpec.page_size_bytes`` before padding, for one rank."""
        return self.conv_elements(tp, spec_tokens) * conv_bytes + self.temporal_elements(tp) * temporal_bytes


@dataclass(frozen=True)
class Mamba1State(LayerState):
    """Mamba (Jamba's mixer): conv (d_inner, kernel - 1), SSM (d_inner, d_state)."""

    kind: ClassVar[StateKind] = StateKind.MAMBA1
    intermediate_size: int
    state_size: int

    def conv_width(self, tp: int) -> int:
        return _split(self.intermediate_size, tp, "mamba intermediate size")

    def temporal_elements(self, tp: int) -> int:
        return _split(self.intermediate_size, tp, "mamba intermediate size") * self.state_size


@dataclass(frozen=True)
class Mamba2State(LayerState):
    """Mamba-2 (Granite-4, Nemotron-H, Mamba2): conv over x, B and C; SSM (heads, head_dim, d_state)."""

    kind: ClassVar[StateKind] = StateKind.MAMBA2
    prefill_checkpoint_blocks: ClassVar[int] = 1
    spec_conv_rows: ClassVar[bool] = True
    intermediate_size: int
    n_groups: int
    num_heads: int
    head_dim: int
    state_size: int

    def conv_width(self, tp: int) -> int:
        # groups are replicated up to the TP size when they do not divide it
        groups = self.n_groups if self.n_groups % tp == 0 else tp
        return _split(self.intermediate_size + 2 * groups * self.state_size, tp, "mamba conv width")

    def temporal_elements(self, tp: int) -> int:
        return _split(self.num_heads, tp, "mamba heads") * self.head_dim * self.state_size


@dataclass(frozen=True)
class GatedDeltaNetState(LayerState):
    """Gated DeltaNet (Qwen3-Next): conv over q, k and v; state (v heads, v dim, k dim)."""

    kind: ClassVar[StateKind] = StateKind.GATED_DELTA_NET
    spec_conv_rows: ClassVar[bool] = True
    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int

    def conv_width(self, tp: int) -> int:
        conv_dim = 2 * self.head_k_dim * self.num_k_heads + self.head_v_dim * self.num_v_heads
        return _split(conv_dim, tp, "linear-attention conv width")

    def temporal_elements(self, tp: int) -> int:
        return _split(self.num_v_heads, tp, "linear value heads") * self.head_v_dim * self.head_k_dim


@dataclass(frozen=True)
class ShortConvState(LayerState):
    """A short convolution (LFM2): its window only, (conv_dim, L_cache - 1), no recurrent state."""

    kind: ClassVar[StateKind] = StateKind.SHORT_CONV
    spec_conv_rows: ClassVar[bool] = True  # ShortConv.get_state_shape passes num_spec
    conv_dim: int

    def conv_width(self, tp: int) -> int:
        return _split(self.conv_dim, tp, "short-conv width")

    def temporal_elements(self, tp: int) -> int:
        return 0


# ---- which layers hold state, from config.json ------------------------------------------------

ATTENTION, STATE, NO_CACHE = "attention", "state", "no_cache"

_BLOCK_TYPE = {
    "attention": ATTENTION,
    "full_attention": ATTENTION,
    "mamba": STATE,
    "mamba2": STATE,
    "linear_attention": STATE,
    "conv": STATE,
    "mlp": NO_CACHE,
    "moe": NO_CACHE,
}
_PATTERN_CHAR = {"*": ATTENTION, "M": STATE, "-": NO_CACHE, "E": NO_CACHE}

# model_type -> how its layers and state are described (the families vLLM 0.32 serves on the CPU)
# Gated DeltaNet hybrids: Qwen3-Next, and Qwen3.5 / 3.6 / 3.8 (dense and MoE; the released checkpoints
# nest these under a multimodal config whose text_config carries the *_text model type)
QWEN35_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
QWEN_GDN_TYPES = ("qwen3_next", *QWEN35_TYPES)
LFM2_TYPES = ("lfm2", "lfm2_moe")  # short convolutions beside attention (Liquid AI)
HYBRID_MODEL_TYPES = ("mamba", "mamba2", "jamba", "nemotron_h", "granitemoehybrid", *QWEN_GDN_TYPES, *LFM2_TYPES)


def _int(cfg: dict[str, Any], key: str) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        mt = cfg.get("model_type")
        raise InputError(f"config.json: {key} must be a positive integer for a {mt} model, got {v!r:.60}")
    return v


def _roles_from_list(cfg: dict[str, Any], key: str) -> list[str]:
    types = cfg.get(key)
    if not isinstance(types, list) or not types:
        raise InputError(f"config.json: {key} must list one type per layer")
    roles = []
    for t in types:
        if not isinstance(t, str) or t not in _BLOCK_TYPE:
            raise InputError(f"config.json: unknown layer type {t!r:.40} in {key} (known: {', '.join(_BLOCK_TYPE)})")
        roles.append(_BLOCK_TYPE[t])
    return roles


def layer_roles(cfg: dict[str, Any]) -> list[str] | None:
    """ATTENTION / STATE / NO_CACHE per decoder layer, or None when the model is not a hybrid kvgate models."""
    mt = cfg.get("model_type")
    if mt in ("mamba", "mamba2"):
        return [STATE] * _int(cfg, "num_hidden_layers")
    if mt == "jamba":
        n, period, offset = _int(cfg, "num_hidden_layers"), _int(cfg, "attn_layer_period"), cfg.get("attn_layer_offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < period:
            raise InputError(
                f"config.json: attn_layer_offset must be an integer in [0, attn_layer_period), got {offset!r:.40}"
            )
        return [ATTENTION if i % period == offset else STATE for i in range(n)]
    if mt == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        if isinstance(pattern, str) and pattern:
            bad = sorted(set(pattern) - set(_PATTERN_CHAR))
            if bad:
                raise InputError(f"config.json: hybrid_override_pattern has unknown layer marks {''.join(bad)!r}")
            return [_PATTERN_CHAR[c] for c in pattern]
        return _roles_from_list(cfg, "layers_block_type")
    if mt in LFM2_TYPES and "layer_types" not in cfg:  # older configs: the attention layers' indices
        n, idxs = _int(cfg, "num_hidden_layers"), cfg.get("full_attn_idxs")
        if not isinstance(idxs, list) or not all(isinstance(i, int) and 0 <= i < n for i in idxs):
            raise InputError(f"config.json: full_attn_idxs must list layer indices below {n}, got {idxs!r:.60}")
        return [ATTENTION if i in idxs else STATE for i in range(n)]
    if mt == "granitemoehybrid" or mt in QWEN_GDN_TYPES or mt in LFM2_TYPES:
        if "layer_types" in cfg:
            return _roles_from_list(cfg, "layer_types")
        if mt in QWEN_GDN_TYPES:  # older configs: every full_attention_interval-th layer is attention
            n, every = _int(cfg, "num_hidden_layers"), _int(cfg, "full_attention_interval")
            return [ATTENTION if (i + 1) % every == 0 else STATE for i in range(n)]
        return _roles_from_list(cfg, "layers_block_type")
    return None


def hybrid_defaults(cfg: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """A hybrid's config as the attention reader expects it: the layer count from its pattern
    (Nemotron-H may give only the pattern), and, for a model without attention (Mamba), a
    placeholder head so that the attention fields are not demanded."""
    layers = cfg.get("num_hidden_layers")
    if layers is not None and layers != len(roles):
        raise InputError(
            f"config.json: num_hidden_layers ({layers!r:.20}) differs from the {len(roles)} layers its pattern lists"
        )
    out = dict(cfg, num_hidden_layers=len(roles))
    if ATTENTION not in roles:
        out.update(num_attention_heads=1, num_key_value_heads=1, head_dim=1)  # the state's own sizes: layer_state
    return out


# model_type -> the state's class and, per field, the config.json key (a pair: their product) that
# gives it, as each model's get_mamba_state_shape_from_config reads them in vLLM 0.32
_STATE_FIELDS: dict[str, tuple[type[LayerState], dict[str, str | tuple[str, str]]]] = {
    "mamba": (Mamba1State, {"intermediate_size": "intermediate_size", "state_size": "state_size",
                            "conv_kernel": "conv_kernel"}),
    "jamba": (Mamba1State, {"intermediate_size": ("mamba_expand", "hidden_size"), "state_size": "mamba_d_state",
                            "conv_kernel": "mamba_d_conv"}),
    "mamba2": (Mamba2State, {"intermediate_size": ("expand", "hidden_size"), "n_groups": "n_groups",
                             "num_heads": "num_heads", "head_dim": "head_dim", "state_size": "state_size",
                             "conv_kernel": "conv_kernel"}),
    "nemotron_h": (Mamba2State, {"intermediate_size": ("mamba_num_heads", "mamba_head_dim"), "n_groups": "n_groups",
                                 "num_heads": "mamba_num_heads", "head_dim": "mamba_head_dim",
                                 "state_size": "ssm_state_size", "conv_kernel": "conv_kernel"}),
    "granitemoehybrid": (Mamba2State, {"intermediate_size": ("mamba_expand", "hidden_size"),
                                       "n_groups": "mamba_n_groups", "num_heads": "mamba_n_heads",
                                       "head_dim": "mamba_d_head", "state_size": "mamba_d_state",
                                       "conv_kernel": "mamba_d_conv"}),
    **dict.fromkeys(QWEN_GDN_TYPES, (GatedDeltaNetState, {
        "num_k_heads": "linear_num_key_heads", "num_v_heads": "linear_num_value_heads",
        "head_k_dim": "linear_key_head_dim", "head_v_dim": "linear_value_head_dim",
        "conv_kernel": "linear_conv_kernel_dim"})),
    "lfm2": (ShortConvState, {"conv_dim": "conv_dim", "conv_kernel": "conv_L_cache"}),
    "lfm2_moe": (ShortConvState, {"conv_dim": "hidden_size", "conv_kernel": "conv_L_cache"}),  # its ShortConv's dim
}  # fmt: skip


def layer_state(cfg: dict[str, Any]) -> LayerState:
    """The state of one stateful layer of a model whose layer_roles is not None."""
    mt = cfg.get("model_type")
    if mt not in _STATE_FIELDS:
        raise InputError(f"config.json: model_type {mt!r} has no state layers kvgate knows")
    cls, keys = _STATE_FIELDS[mt]

    def value(key: str | tuple[str, str]) -> int:
        return _int(cfg, key[0]) * _int(cfg, key[1]) if isinstance(key, tuple) else _int(cfg, key)

    return cls(**{f: value(k) for f, k in keys.items()})


def ssm_dtype_from_config(cfg: dict[str, Any]) -> str | None:
    """The recurrent state's dtype when the model fixes it (Nemotron-H: float32 unless its config
    says otherwise, vLLM's NemotronHForCausalLMConfig; Qwen3.5 and later: its mamba_ssm_dtype,
    float32 in the released checkpoints, vLLM's Qwen3_5ForConditionalGenerationConfig; Qwen3-Next
    has no such hook); None: vLLM's default applies."""
    mt = cfg.get("model_type")
    if mt in QWEN35_TYPES:
        v = cfg.get("mamba_ssm_dtype")
        return v if isinstance(v, str) and v != "auto" else None
    if mt != "nemotron_h":
        return None
    v = cfg.get("mamba_ssm_cache_dtype")
    return v if isinstance(v, str) and v != "auto" else "float32"


def mtp_layers_from_config(cfg: dict[str, Any]) -> int:
    """The draft layers MTP speculative decoding runs beside the model, each a full-attention
    layer in the KV pool: Qwen3.5 and later, mtp_num_hidden_layers (default 1, vLLM's
    Qwen3_5MultiTokenPredictor); 0 for the models whose MTP kvgate does not model."""
    mt = cfg.get("model_type")
    if mt not in QWEN35_TYPES:
        return 0
    v = cfg.get("mtp_num_hidden_layers", 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 1
