"""Layers with their own attention shape (Gemma 4's full layers) read from config.json as
transformers' Gemma4TextConfig builds its per_layer_config, which vLLM's gemma4.py reads; pages of
two sizes raised to one as vLLM's unify_kv_cache_spec_page_size does."""

from __future__ import annotations

import pytest

from validator.errors import NotModelled
from validator.plan.capacity import group_layers
from validator.plan.kv_spec import FullAttentionSpec, SlidingWindowSpec
from validator.plan.model_shape import shape_from_config

BASE = dict(
    model_type="gemma4_text",
    num_hidden_layers=6,
    hidden_size=256,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    sliding_window=128,
    vocab_size=512,
    torch_dtype="bfloat16",
    layer_types=["sliding_attention"] * 5 + ["full_attention"],
)


@pytest.mark.parametrize(
    "extra",
    [
        {},  # no global keys: transformers' default global_head_dim, 512
        {"global_head_dim": 128},
        {"global_head_dim": 128, "num_global_key_value_heads": 1},  # without K as V: the heads stay 4
        {"global_head_dim": 128, "num_global_key_value_heads": 1, "attention_k_eq_v": True},
        {"global_head_dim": 64, "attention_k_eq_v": True},  # no global KV heads given: the layer's own
    ],
)
@pytest.mark.parametrize("as_saved", [False, True])
def test_each_layers_heads_are_what_transformers_gives_vllm(extra, as_saved):
    """A config.json as the hub has them (global keys) or as transformers >= 5.19 saves them
    (per_layer_config): every layer's head size and KV heads equal transformers' per_layer_config."""
    from transformers import Gemma4TextConfig

    cfg = dict(BASE, **extra)
    config = Gemma4TextConfig(**{k: v for k, v in cfg.items() if k != "torch_dtype"})
    saved = config.to_dict() | {"torch_dtype": "bfloat16"} if as_saved else cfg
    layers = config.per_layer_config  # as vLLM's Gemma4DecoderLayer reads it
    truth = [(layers[i].head_dim, layers[i].num_key_value_heads) for i in range(6)]
    assert truth[:5] == [(64, 4)] * 5  # the sliding layers keep the model's shape
    shape = shape_from_config(saved)
    assert list(shape.layer_heads or [(64, 4)] * 6) == truth


def test_a_per_layer_config_kvgate_does_not_read_is_an_error_naming_it():
    from validator.errors import InputError

    with pytest.raises(InputError, match="per_layer_config sets 'sliding_window'"):
        shape_from_config(dict(BASE, per_layer_config={"5": {"sliding_window": 64}}))
    with pytest.raises(InputError, match=r"per_layer_config\['9'\] names no layer of 6"):
        shape_from_config(dict(BASE, per_layer_config={"9": {"head_dim": 64}}))


def test_pages_of_two_sizes_are_raised_to_the_largest_and_odd_ones_refused():
    """vLLM 0.32 (recorded on a tiny Gemma 4): a full page of 1,024 B a token beside sliding pages of
    512 leaves the full block at 128 and raises the sliding ones to 256; a page that does not divide
    the largest it pads instead, which kvgate does not model."""
    full = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=256, dtype_bytes=2)
    sliding = SlidingWindowSpec(block_size=128, num_kv_heads=2, head_size=64, dtype_bytes=2, sliding_window=128)
    groups = group_layers([sliding] * 5 + [full])
    assert (
        sorted((type(g.spec).__name__, g.spec.block_size, g.num_layers) for g in groups)
        == [("FullAttentionSpec", 128, 1)] + [("SlidingWindowSpec", 256, 1)] * 5
    )
    odd = FullAttentionSpec(block_size=128, num_kv_heads=3, head_size=64, dtype_bytes=2)
    with pytest.raises(NotModelled, match="not dividing the largest"):
        group_layers([sliding] * 5 + [odd])


def test_shared_caches_hold_nothing_in_gemma4_and_are_refused_elsewhere():
    """Gemma 4's last num_kv_shared_layers read earlier layers' caches (vLLM skips them in the KV
    spec): 8 layers, 3 shared, leave 5 caching groups; the same key in another family (Gemma 3n's
    sharing is not recorded here) is refused, not planned as if every layer cached."""
    from validator.plan.capacity import layer_specs

    cfg = dict(BASE, num_hidden_layers=8, num_kv_shared_layers=3, layer_types=(BASE["layer_types"][2:]) * 2)
    shape = shape_from_config(cfg)
    assert shape.layer_kinds[5:] == ("none",) * 3 and len(layer_specs(shape, 128)) == 5
    other = shape_from_config(dict(cfg, model_type="gemma3n_text"))
    with pytest.raises(NotModelled, match="cross-layer KV sharing"):
        layer_specs(other, 128)
