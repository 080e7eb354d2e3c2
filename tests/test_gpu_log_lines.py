"""The GPU start-up log as real GPUs write it (issue 27): each vector is a line of a public vLLM log
(or, where the issue quotes a line without its thread, the issue's quote), with where it was read.
The figure each must give is what a person reads on that line."""

from __future__ import annotations

import pytest

from validator.judge.startup import kv_shortfall
from validator.serve.startup_log import parse_log, split_line

ISSUE_27 = "kvgate issue 27 (quoted from public GPU start-up logs)"

# (line, the fact, the figure a person reads, where the line was read)
FIGURES = [
    (
        "(EngineCore_DP0 pid=738) INFO 10-25 13:08:43 [gpu_worker.py:298] Available KV cache memory: -0.12 GiB",
        "available_kv_gib",
        -0.12,
        ISSUE_27,
    ),
    (
        "CUDA graph pool memory: -0.19 GiB (actual), 2.43 GiB (estimated), difference: 2.62 GiB",
        "cudagraph_actual_gib",
        -0.19,
        "https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/pull/25 (2x GB10)",
    ),
    (
        "CUDA graph pool memory: -0.19 GiB (actual), 2.43 GiB (estimated), difference: 2.62 GiB",
        "cudagraph_estimated_gib",  # in 0.32 the estimate may appear only here
        2.43,
        "https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/pull/25 (2x GB10)",
    ),
    (
        "(Worker_TP0 pid=1042) INFO 11-20 09:12:01 [gpu_model_runner.py:4512] Estimated MRV2 CUDA graph memory: "
        "0.64 GiB total (0.31 GiB retained in the reusable pool)",
        "cudagraph_estimated_gib",
        0.64,
        ISSUE_27 + ", Model Runner V2 (0.32's default)",
    ),
    (
        "(Worker_TP0 pid=1042) INFO 11-20 09:12:01 [gpu_model_runner.py:4512] Estimated MRV2 CUDA graph memory: "
        "0.36 GiB additional (1.08 GiB captured, 0.72 GiB retained in the reusable pool)",
        "cudagraph_estimated_gib",
        0.36,
        ISSUE_27 + ", Model Runner V2",
    ),
    (
        "(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_worker.py:563] Available KV cache memory: 6.87 GiB",
        "available_kv_gib",
        6.87,
        "https://github.com/gpustack/runner/pull/251 (vLLM 0.27.1, TP 2)",
    ),
    (
        "INFO 08-03 10:21:44 [model_runner.py:1115] Loading model weights took 14.9888 GB",
        "weights_gib",
        14.9888,
        ISSUE_27 + ", vLLM 0.6-0.7 wording in GB",
    ),
    (
        "[2025-03-10T15:07:20Z] INFO 03-10 08:07:20 [gpu_model_runner.py:1067] Model loading took 0.2389 GB and "
        "0.977005 seconds",
        "weights_gib",
        0.2389,
        "https://github.com/vllm-project/vllm/issues/14574 (a CI runner's timestamp in front)",
    ),
    (
        "INFO 12-20 20:25:46 worker.py:241] model weights take 7.51GiB; non_torch_memory takes 0.39GiB; PyTorch "
        "activation peak memory takes 2.53GiB; the rest of the memory reserved for KV Cache is 3.76GiB.",
        "available_kv_gib",
        3.76,
        "https://github.com/vllm-project/vllm/issues/11251 (vLLM 0.6.4, 16 GB card)",
    ),
    (
        "INFO 12-20 20:25:46 worker.py:241] model weights take 7.51GiB; non_torch_memory takes 0.39GiB; PyTorch "
        "activation peak memory takes 2.53GiB; the rest of the memory reserved for KV Cache is 3.76GiB.",
        "activation_peak_gib",
        2.53,
        "https://github.com/vllm-project/vllm/issues/11251 (vLLM 0.6.4, 16 GB card)",
    ),
    (
        "\x1b[0;36m(EngineCore_DP0 pid=738)\x1b[0;0m \x1b[32mINFO\x1b[0m 10-25 13:08:43 [gpu_worker.py:298] "
        "Available KV cache memory: 21.41 GiB",
        "available_kv_gib",
        21.41,
        ISSUE_27 + ", coloured (FORCE_COLOR / VLLM_LOGGING_COLOR in the caller's environment)",
    ),
]


@pytest.mark.parametrize(("line", "attr", "value", "source"), FIGURES)
def test_each_figure_is_read_as_a_person_reads_it(line, attr, value, source):
    assert getattr(parse_log(line), attr) == value, source


# (log, the failure as kvgate must name it, where the lines were read)
FAILURES = [
    (
        '  File ".../pydantic/_internal/_dataclasses.py", line 123, in __init__\n'
        "    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)\n"
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, User-specified max_model_len (8192) is greater than the derived max_model_len "
        "(max_position_embeddings=4096 or model_max_length=None in model's config.json). To allow overriding this "
        "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 [type=value_error, input_value=ArgsKwargs((), "
        "{'model': 'x'}), input_type=ArgsKwargs]",
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig: User-specified "
        "max_model_len (8192) is greater than the derived max_model_len",
        "https://github.com/vllm-project/vllm/pull/19660 (the wording); " + ISSUE_27,
    ),
    (
        "(EngineCore_DP0 pid=5120) ERROR 09-02 11:40:13 [core.py:842] torch.AcceleratorError: CUDA error: an "
        "illegal memory access was encountered\n"
        "(APIServer pid=5001) ERROR 09-02 11:40:14 [core_client.py:610] Engine core proc EngineCore_DP0 died "
        "unexpectedly, shutting down client.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause.",
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        ISSUE_27,
    ),
    (
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
        "the root cause.",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
        ISSUE_27 + " (the wrapper alone: it is named, for want of a root)",
    ),
    (
        "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: "
        "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
        "cached files.",
        "requests.exceptions.HTTPError: 403 Client Error: Forbidden",
        "https://github.com/ShivamShrirao/diffusers/issues/57 (the HTTPError wording); " + ISSUE_27,
    ),
    (
        "[2026-08-30T12:56:45Z] (EngineCore_DP0 pid=3584999) ERROR 08-19 05:56:57 [core.py:1346] ValueError: No "
        "available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the "
        "engine.",
        "ValueError: No available memory for the cache blocks",
        "https://github.com/vllm-project/vllm/issues/53013 (with a CI timestamp in front, as in vllm-omni#6836)",
    ),
    (
        "\x1b[0;36m(EngineCore_DP0 pid=738)\x1b[0;0m \x1b[31mERROR\x1b[0m 10-25 13:08:43 [core.py:708] ValueError: "
        "To serve at least one request with the models's max seq len (131072), (4.5 GiB KV cache is needed, which "
        "is larger than the available KV cache memory (-0.12 GiB).",
        "ValueError: To serve at least one request",
        ISSUE_27 + ", coloured",
    ),
    (
        "vllm-1  | ERROR 11-18 18:07:31 engine.py:366] RuntimeError: CUDA out of memory",
        "RuntimeError: CUDA out of memory",
        "https://github.com/vllm-project/vllm/issues/10439 (docker compose's `vllm-1  | ` in front)",
    ),
]


@pytest.mark.parametrize(("log", "named", "source"), FAILURES)
def test_each_failed_start_up_is_named_by_its_root_cause(log, named, source):
    got = parse_log(log).fatal_error
    assert got is not None and got.startswith(named), (got, source)


def test_with_pipeline_parallelism_rank_0s_figure_is_taken_and_the_rank_named():
    """PP2's profile line comes first (1.05 GiB), PP0's later (1.1 GiB): the headline is PP0's, every
    rank's is kept. Lines in the wording of vLLM 0.2x's memory profile (vllm/utils/mem_utils.py)."""
    log = (
        "(Worker_PP2 pid=811) INFO 07-02 08:11:40 [gpu_worker.py:290] Memory profiling takes 4.02 seconds. Total "
        "non KV cache memory: 17.32GiB; torch peak memory increase: 1.05GiB; non-torch forward increase memory: "
        "0.21GiB; weights memory: 16.06GiB.\n"
        "(Worker_PP0 pid=809) INFO 07-02 08:11:41 [gpu_worker.py:290] Memory profiling takes 4.11 seconds. Total "
        "non KV cache memory: 17.41GiB; torch peak memory increase: 1.1GiB; non-torch forward increase memory: "
        "0.21GiB; weights memory: 16.1GiB.\n"
    )
    f = parse_log(log)
    assert f.activation_peak_gib == 1.1 and f.figures_rank == "PP0"
    assert f.per_rank == {"PP2": {"activation_peak_gib": 1.05}, "PP0": {"activation_peak_gib": 1.1}}
    only_pp2 = parse_log(log.splitlines()[0])
    assert only_pp2.activation_peak_gib == 1.05 and only_pp2.figures_rank == "PP2"  # said, not passed off as rank 0


def test_a_rank_is_read_from_every_prefix_vllm_writes():
    for raw, rank in (
        ("(Worker_DP1_TP0_EP8 pid=12) INFO 08-19 05:56:57 [gpu_model_runner.py:6936] x", "DP1_TP0_EP8"),
        ("(Worker_TP1 pid=448) INFO 08-14 14:07:20 [gpu_model_runner.py:6681] x", "TP1"),
        ("(EngineCore_DP0 pid=223840) ERROR 10-25 13:08:43 [core.py:708] x", None),
        ("(VllmWorkerProcess pid=90) INFO 12-20 20:25:49 model_runner.py:1413] x", "worker"),
    ):
        ln = split_line(raw)
        assert (ln.rank, ln.message) == (rank, "x"), raw
    assert not split_line("(Worker_DP1_TP0_EP8 pid=12) INFO 08-19 05:56:57 [a.py:1] x").rank0
    assert split_line("(Worker_DP0_TP0_EP0 pid=12) INFO 08-19 05:56:57 [a.py:1] x").rank0


def test_the_cuda_graph_estimate_line_wins_over_the_pool_lines_repeat():
    log = (
        "(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_model_runner.py:6806] Estimated CUDA graph memory: 0.36 GiB "
        "total\n"
        "(Worker_TP0 pid=447) INFO 08-14 14:07:40 [gpu_worker.py:972] CUDA graph pool memory: 0.34 GiB (actual), "
        "0.37 GiB (estimated), difference: 0.03 GiB (8.8%).\n"
    )
    f = parse_log(log)
    assert (f.cudagraph_estimated_gib, f.cudagraph_actual_gib, f.cudagraph_wording) == (0.36, 0.34, "total")


def test_a_negative_kv_memory_is_the_refusals_headline():
    from validator.units import GiB

    log = (
        "(Worker_TP0 pid=1) INFO 10-25 13:08:40 [gpu_model_runner.py:2602] Model loading took 65.97 GiB and 41.2 "
        "seconds\n"
        "(Worker_TP0 pid=1) INFO 10-25 13:08:43 [gpu_worker.py:298] Available KV cache memory: -0.12 GiB\n"
    )
    ledger = {"kv_cache_bytes": int(3.5 * GiB), "weights_bytes": int(62.5 * GiB), "activation_peak_bytes": None}
    line = kv_shortfall(ledger, parse_log(log))
    assert line is not None and line.startswith(
        "vLLM found -0.12 GiB for the KV cache: the plan expected 3.50 GiB; the difference is 3.62 GiB "
        "(weights 65.97 logged vs 62.50 planned"
    ), line
    assert kv_shortfall(ledger, parse_log(log.replace("-0.12", "0.12"))) is None  # enough room: no headline


# vLLM >= 0.21 logs the activation / non-torch split at info level only after CUDA-graph capture
GLM_026 = "a public GLM-5.3-Flash TP 3 runtime record, vLLM 0.26.1rc0 on 95 GiB GPUs (search index file 63441798540)"
GLM_LOG = (
    "(Worker_TP0_EP0 pid=1159) INFO 09-04 11:00:12 [gpu_worker.py:624] Available KV cache memory: 17.79 GiB\n"
    "(Worker_TP0_EP0 pid=1159) INFO 09-04 11:00:12 [gpu_worker.py:639] CUDA graph memory profiling is enabled "
    "(default since v0.21.0). The current --gpu-memory-utilization=0.9100 is equivalent to "
    "--gpu-memory-utilization=0.9060 without CUDA graph memory profiling.\n"
    "(Worker_TP0_EP0 pid=1159) INFO 09-04 11:00:17 [gpu_worker.py:792] CUDA graph pool memory: 0.25 GiB (actual), "
    "0.38 GiB (estimated), difference: 0.12 GiB (50.0%).\n"
    "(Worker_TP0_EP0 pid=1159) INFO 09-04 11:00:17 [gpu_worker.py:855] Free memory on device (91.64/94.97 GiB) on "
    "startup. Desired GPU memory utilization is (0.91, 86.42 GiB). Actual usage is 64.44 GiB for consumed memory "
    "(weights + non-torch), 4.19 GiB for peak activation, and 0.25 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=18676332626` (17.39 GiB) to fit into requested memory, "
    "or `--kv-cache-memory=24274632704` (22.61 GiB) to fully utilize gpu memory. Current kv cache memory in use is "
    "17.79 GiB.\n"
)
# a Windows build's start-up of Qwen3.6-35B-A3B int4 (its README re-prints vLLM's lines without the header)
WIN_LOG = (
    "INFO  Model loading took 9.96 GiB memory and 78.064675 seconds\n"
    "INFO  Free memory on device (22.6/24.0 GiB) on startup.\n"
    "INFO  Desired GPU memory utilization is (0.7, 16.8 GiB).\n"
    "INFO  Actual usage is 10.7 GiB for consumed memory (weights + non-torch), 1.54 GiB for peak activation, and "
    "0.54 GiB for CUDAGraph memory.\n"
)
WIN_SRC = "a public vLLM Windows-build guide, RTX 24 GB (search index file 59875247307)"


def test_the_post_capture_usage_line_gives_activation_and_non_torch():
    """The activation peak the profile measured is the line's "peak activation" less the CUDA-graph
    estimate the log says was applied (GLM: 4.19 - 0.38 = 3.81, and requested 86.42 - consumed 64.44 -
    4.19 = the 17.79 GiB of KV it logged); without that notice the figure is the peak itself."""
    f = parse_log(GLM_LOG)
    assert (f.consumed_gib, f.activation_peak_gib, f.cudagraph_estimated_gib) == (64.44, 3.81, 0.38), GLM_026
    assert f.non_torch_gib is None  # no "Model loading took" line in the record: not measured, not 0
    assert round(86.42 - f.consumed_gib - (f.activation_peak_gib + f.cudagraph_estimated_gib), 2) == 17.79
    w = parse_log(WIN_LOG)
    assert (w.weights_gib, w.consumed_gib, w.non_torch_gib, w.activation_peak_gib) == (9.96, 10.7, 0.74, 1.54), WIN_SRC
    unknown = parse_log(GLM_LOG.replace("0.38 GiB (estimated)", "n/a"))
    assert unknown.activation_peak_gib is None  # applied, but no estimate to take off


def test_the_usage_line_of_another_rank_is_read_when_rank_0_has_none():
    """Pipeline stages: rank PP2 may be the only one whose "Actual usage" line reached the log."""
    log = "(Worker_PP0 pid=1) INFO 09-04 11:00:12 [gpu_worker.py:624] Available KV cache memory: 17.79 GiB\n" + (
        GLM_LOG.splitlines()[-1].replace("Worker_TP0_EP0", "Worker_PP2") + "\n"
    )
    f = parse_log(log)
    assert (f.consumed_gib, f.activation_peak_gib) == (64.44, 4.19)  # no estimate applied in this log


def test_the_debug_profile_split_wins_over_the_usage_line():
    debug = "INFO 01-01 00:00:00 [gpu_worker.py:300] torch peak memory increase: 3.70 GiB\n"
    assert parse_log(debug + GLM_LOG).activation_peak_gib == 3.7


def test_the_refusal_headline_names_non_torch_when_the_log_gives_it():
    from validator.rundir.startup import StartupFacts
    from validator.units import GiB

    facts = StartupFacts(available_kv_gib=-0.5, weights_gib=10.0, non_torch_gib=1.7)
    ledger = {"kv_cache_bytes": int(1.5 * GiB), "weights_bytes": int(10 * GiB), "non_torch_bytes": int(0.2 * GiB)}
    line = kv_shortfall(ledger, facts)
    assert line is not None and "non-torch 1.70 logged vs 0.20 planned" in line and line.endswith("; the rest +0.50)")
