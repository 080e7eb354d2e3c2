"""The rotary embedding's cos/sin tables, which vLLM builds on the GPU as it loads a model and so
counts in "Model loading took".

vLLM's get_rope() keeps one table per distinct rope configuration (layers that share one share the
table), (positions x rotary_dim) in the model dtype, where the positions depend on the scaling
type (vllm/model_executor/layers/rotary_embedding, read in vLLM 0.32):

- linear: max_position_embeddings x factor (LinearScalingRotaryEmbedding: the scaled range);
- yarn, deepseek_yarn: original_max_position_embeddings x factor;
- longrope: a short table of original_max_position_embeddings and a long one of max_position, stacked;
- default, llama3, ntk, dynamic, mrope and the rest: max_position_embeddings.

Gemma 3 is the case that shows it: its global layers scale linearly by 8 and its sliding layers
rotate with their own base (rope_local_base_freq), two tables, the first 8 x 131,072 positions of
256: 0.50 GiB of its "Model loading took" (4B and 12B; 0.25 GiB for the 27B's 128-wide heads).
"""

from __future__ import annotations

from typing import Any

from validator.plan.classic import NO_ROTARY
from validator.plan.layer_heads import GEMMA4
from validator.plan.layer_kinds import gemma4_layer_types
from validator.plan.vllm_architectures import NATIVE_0_32, REMOVED

Config = dict[str, Any]
SCALED_BY_FACTOR_OF_ORIGINAL = ("yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 << 24 else None


def _positions(params: Config, max_pos: int) -> int:
    kind = params.get("rope_type") or params.get("type") or "default"
    factor = _number(params.get("factor")) or 1.0
    original = _number(params.get("original_max_position_embeddings"))
    if kind == "linear":
        return int(max_pos * factor)
    if kind in SCALED_BY_FACTOR_OF_ORIGINAL:
        return int((original or max_pos) * factor)
    if kind == "longrope":
        return int(original or 0) + max_pos
    return max_pos


def _configurations(cfg: Config) -> list[tuple[str | None, Config]]:
    """Each rope configuration the model's layers use, as get_rope() is given them, with the layer
    type it is for where config.json gives one per type (transformers >= 4.56)."""
    given = cfg.get("rope_parameters")
    if isinstance(given, dict) and given and all(isinstance(v, dict) for v in given.values()):
        return list(given.items())  # {"full_attention": {...}, "sliding_attention": {...}}
    params: Config = given if isinstance(given, dict) and given else {}
    if not params and isinstance(cfg.get("rope_scaling"), dict):
        params = cfg["rope_scaling"]
    base = dict(params, rope_theta=cfg.get("rope_theta", params.get("rope_theta")))
    out: list[tuple[str | None, Config]] = [(None, base)]
    local = cfg.get("rope_local_base_freq")  # Gemma 3's sliding layers: unscaled, their own base
    if local is not None and cfg.get("sliding_window"):
        out.append((None, {"rope_type": "default", "rope_theta": local}))
    return out


def rope_tables(
    cfg: Config, rotary_dim: int, max_pos: int | None, type_dims: dict[str, int] | None = None
) -> tuple[tuple[int, int], ...]:
    """(positions, rotary_dim) of each distinct table; none without max_position_embeddings.
    `type_dims`: where layer types have head sizes of their own (Gemma 4), each type's, and only
    the types given have layers. `proportional` RoPE (Gemma4RotaryEmbedding) rotates part of the
    head but builds its table over the whole head size."""
    if not max_pos:
        return ()
    seen: dict[str, tuple[int, int]] = {}
    for kind, params in _configurations(cfg):
        if type_dims is not None and kind is not None and kind not in type_dims:
            continue  # a layer type no layer has
        head = type_dims[kind] if type_dims is not None and kind is not None else rotary_dim
        factor = _number(params.get("partial_rotary_factor", cfg.get("partial_rotary_factor")))
        proportional = params.get("rope_type") == "proportional"
        dim = int(head * factor) if factor and factor < 1 and not proportional else head
        seen.setdefault(repr(sorted(params.items(), key=str)), (_positions(params, max_pos), dim))
    return tuple(seen.values())


# architectures vLLM 0.32 serves through its Transformers modeling backend (registry.py
# _TRANSFORMERS_SUPPORTED_MODELS, text ones): the model's own rotary embedding computes cos/sin each step
# from inv_freq (256 B), no table is held (measured on tiny Olmo 2, Olmo 3, Seed-OSS, HunYuan). They moved
# from native classes between 0.14 (GPTBigCode, Starcoder2) and 0.30 (Olmo 3, HunYuan): before 0.32 the
# table is still counted (unmeasured)
TRANSFORMERS_BACKEND = ("ArceeForCausalLM", "CwmForCausalLM", "FlexOlmoForCausalLM", "GlmForCausalLM",
    "GPTBigCodeForCausalLM", "GPTNeoXForCausalLM", "HunYuanDenseV1ForCausalLM", "HunYuanMoEV1ForCausalLM",
    "Jais2ForCausalLM", "MellumForCausalLM", "NanbeigeForCausalLM", "OlmoForCausalLM", "Olmo2ForCausalLM",
    "Olmo3ForCausalLM", "PhiForCausalLM", "SeedOssForCausalLM", "SmolLM3ForCausalLM", "Starcoder2ForCausalLM",
    "VaultGemmaForCausalLM")  # fmt: skip
TRANSFORMERS_BACKEND_FROM = (0, 32, 0)
# transformers architectures vLLM has no class for and serves through the backend (registry.py's fallback
# for an architecture it does not list; measured on 0.32, planned so for every version)
FALLBACK_TO_BACKEND = ("HeliumForCausalLM", "MinistralForCausalLM")


def holds_rope_table(architecture: str, version: tuple[int, int, int]) -> bool:
    """Whether vLLM builds the model's rotary cos/sin table: not through its Transformers backend, which
    serves the architectures mapped to it, those it removed from that release (dots.llm1 measured on
    0.32, its class removed in 0.23), and from 0.32 any it has no class for (plan/vllm_architectures.py:
    Solar Open measured)."""
    if architecture in FALLBACK_TO_BACKEND:
        return False
    if architecture in REMOVED:
        return version < REMOVED[architecture]
    if version >= TRANSFORMERS_BACKEND_FROM and architecture != "unknown" and architecture not in NATIVE_0_32:
        return False
    return architecture not in TRANSFORMERS_BACKEND or version < TRANSFORMERS_BACKEND_FROM


UNSCALED_CONTEXT = ("su", "longrope", "llama3")  # their max_position_embeddings is the scaled context
YARN_FROM = (0, 30, 0)  # vllm-project/vllm#56446 (merged 2026-09-11, after 0.29.0): YaRN stops scaling the context
YARN_NAMES = (*SCALED_BY_FACTOR_OF_ORIGINAL, "telechat3-yarn")  # from 0.30 vLLM reads telechat3-yarn as yarn


def context_limits(cfg: Config, model_type: str, max_pos: int | None) -> tuple[int | None, int | None]:
    """The longest max_model_len vLLM accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN (its
    _get_and_verify_max_len), before 0.30 and from 0.30: max_position_embeddings times the factor
    of a scaled rope (linear, dynamic, ntk, ...; the last configuration's), none for su, longrope and
    llama3, nor for Gemma 3 (already scaled). YaRN's names scale it no more from 0.30, as in
    transformers; before, plain "yarn" gave original_max_position_embeddings x factor and the other
    YaRN names multiplied max_position_embeddings."""
    if max_pos is None:
        return None, None
    limits = []
    for rule_from_030 in (False, True):
        derived, factor = float(max_pos), 1.0
        for _, params in _configurations(cfg) if "gemma3" not in model_type else []:
            kind = params.get("rope_type") or params.get("type") or "default"
            if kind in UNSCALED_CONTEXT or (rule_from_030 and kind in YARN_NAMES):
                continue
            factor = _number(params.get("factor")) or factor
            if kind == "yarn":
                derived = _number(params.get("original_max_position_embeddings")) or derived
        limits.append(int(derived * factor))
    return limits[0], limits[1]


GEMMA4_DEFAULT_ROPE = {  # Gemma4TextConfig's rope_parameters where config.json has none
    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
}
GEMMA4_MAX_POSITIONS = 131_072  # Gemma4TextConfig's max_position_embeddings


def model_rope_tables(
    cfg: dict[str, Any], model_type: str, heads: tuple[tuple[int, int], ...], head_dim: int, max_pos: int | None
) -> tuple[tuple[int, int], ...]:
    """The rotary tables vLLM builds for the model. Gemma 4's: one per layer type in use, at that
    type's head size (vLLM gives each layer's rotary embedding its own), with Gemma4TextConfig's
    rope parameters and positions where config.json has none."""
    if cfg.get("alibi") is True or model_type in NO_ROTARY:  # ALiBi (Falcon-RW, BLOOM); learned positions
        return ()
    rotary = cfg.get("rotary_dim")  # MiniMax-M2's rotated part of the head, where no factor is given
    if model_type == "minimax_m2" and "partial_rotary_factor" not in cfg and isinstance(rotary, int) and head_dim:
        cfg = {**cfg, "partial_rotary_factor": rotary / head_dim}
    if model_type == "step3p5":
        return step_rope_tables(cfg, heads, head_dim, max_pos)
    if model_type not in GEMMA4:
        return rope_tables(cfg, head_dim, max_pos)
    dims: dict[str, int] = {}
    n = len(heads) if heads else int(cfg.get("num_hidden_layers") or 0)
    for i, kind in enumerate(gemma4_layer_types(cfg, n)):
        dims.setdefault(kind, heads[i][0] if heads else head_dim)
    with_rope = {**cfg, "rope_parameters": cfg.get("rope_parameters") or GEMMA4_DEFAULT_ROPE}
    return rope_tables(with_rope, head_dim, max_pos or GEMMA4_MAX_POSITIONS, dims)


def step_rope_tables(
    cfg: Config, heads: tuple[tuple[int, int], ...], head_dim: int, max_pos: int | None
) -> tuple[tuple[int, int], ...]:
    """Step 3.5's (vLLM's step3p5.py): a rotary embedding a layer of its head size, its rope_theta (a list:
    one a layer) and partial_rotary_factors; the scaling only on yarn_only_types' layers where given. get_rope
    shares a table where its arguments match (their order too): the scaled layers' parameters match the others'
    ({rope_type: default, rope_theta, partial_rotary_factor}) only where config.json's scaling is that default
    in that order; transformers' dict for none puts rope_theta first (Step3p5Config measured)."""
    if not max_pos:
        return ()
    types, only = cfg.get("layer_types"), cfg.get("yarn_only_types") or []
    theta, factors = cfg.get("rope_theta"), cfg.get("partial_rotary_factors")
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    scaling = scaling if isinstance(scaling, dict) else {}
    default = list(scaling) in (["rope_type"], ["rope_type", "rope_theta"]) and scaling["rope_type"] == "default"
    seen: dict[tuple[object, ...], tuple[int, int]] = {}
    for i in range(int(cfg.get("num_hidden_layers") or 0)):
        head = heads[i][0] if heads else head_dim
        scaled = not default and (not only or (isinstance(types, list) and i < len(types) and types[i] in only))
        base = theta[i] if isinstance(theta, list) and i < len(theta) else theta
        factor = _number(factors[i]) if isinstance(factors, list) and i < len(factors) else None
        params = scaling if scaled else {}
        dim = int(head * factor) if factor and factor < 1 else head
        seen.setdefault((head, dim, scaled, repr(base)), (_positions(params, max_pos), dim))
    return tuple(seen.values())
