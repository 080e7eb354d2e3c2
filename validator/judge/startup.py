"""Start-up checks: the plan against what vLLM reported (blocks, tokens, concurrency,
max_model_len, and on a GPU its memory terms)."""

from __future__ import annotations

from typing import Any

from validator.judge.check import Check
from validator.plan.record import Ledger, LedgerMode, PlanRecord, Platform
from validator.rundir.startup import StartupFacts
from validator.units import GiB


def cross_check(
    plan: PlanRecord, facts: StartupFacts, started_here: bool = True, config_required: bool = False
) -> list[Check]:
    """Predicted vs reported, exact: blocks, block size, KV tokens, max concurrency, max_model_len,
    and the scheduler's limits. The log line is judged only for a server kvgate started (it has no
    log of any other); the limits, which only a dev-mode server tells, are required of a server
    kvgate started in dev mode (`config_required`) unless its vLLM gives no JSON config; of any other
    server they are judged where it told them."""

    def check(name: str, expected: Any, observed: Any, why: str, tol: str = "exact", judged: bool = True) -> Check:
        if observed is None:
            return Check(
                name=name,
                expected=expected,
                observed=None,
                passed=None,
                tolerance=tol,
                explanation="not reported by the server: " + why,
                judged=judged,
            )
        ok = expected == observed if tol == "exact" else abs(expected - observed) <= 0.005
        return Check(name=name, expected=expected, observed=observed, passed=ok, tolerance=tol, explanation=why)

    tokens = facts.kv_cache_size_tokens if facts.kv_cache_size_tokens is not None else facts.kv_cache_tokens
    models = "from /v1/models" + (f" ({facts.models_error})" if facts.models_error else "")
    config = "the scheduler's, from /server_info (dev mode)" + (
        f" ({facts.server_config_error})" if facts.server_config_error else ""
    )
    limits_required = config_required and facts.server_config_json is not False
    return gpu_memory_checks(plan, facts, started_here) + [
        check(
            "startup.num_gpu_blocks",
            plan.num_blocks,
            facts.num_gpu_blocks,
            "floor(KV bytes / bytes per pool block), or the override",
        ),
        check("startup.block_size", plan.block_size, facts.block_size, "tokens per block"),
        check(
            "startup.kv_cache_tokens",
            plan.kv_cache_tokens,
            tokens,
            "int(max concurrency x max_model_len), as vLLM reports it",
        ),
        check(
            "startup.max_concurrency",
            plan.max_concurrency,
            facts.kv_cache_max_concurrency,
            "num_gpu_blocks / blocks per request at max_model_len",
        ),
        check(
            "startup.max_concurrency_logged",
            round(plan.max_concurrency, 2),
            facts.max_concurrency_logged,
            "the start-up log line (2 decimals)",
            tol="0.005",
            judged=started_here,
        ),
        check("startup.max_model_len", plan.max_model_len, facts.max_model_len, models),
        check(
            "startup.enable_prefix_caching",
            plan.enable_prefix_caching,
            facts.enable_prefix_caching,
            "the cache's setting, from vllm:cache_config_info: the runs' hits and shared blocks are judged by it",
        )
        if plan.enable_prefix_caching is not None
        else Check(
            name="startup.enable_prefix_caching",
            expected=None,
            observed=facts.enable_prefix_caching,
            passed=None,
            tolerance="exact",
            explanation="not judged: plan.json was written by a kvgate that did not record the setting "
            "(its runs judged with the prefix cache on)",
            judged=False,
        ),
        *[
            check(f"startup.{name}", planned, served, config, judged=limits_required)
            for name, planned, served in (
                ("max_num_seqs", plan.max_num_seqs, facts.max_num_seqs),
                ("max_num_batched_tokens", plan.max_num_batched_tokens, facts.max_num_batched_tokens),
            )
        ],
    ]


# tolerances of the start-up memory checks: the model's error on 25 logged start-ups is at most
# 0.4 % (docs/kv-accounting.md); the CUDA-graph figure is a constant estimate (0.49-1.82 GiB seen)
MEMORY_REL_TOL = 0.03
CUDAGRAPH_ABS_TOL_GIB = 0.5


def gpu_memory_checks(plan: PlanRecord, facts: StartupFacts, started_here: bool = True) -> list[Check]:
    """The ledger's GPU memory terms against vLLM's start-up log lines (GPU runs kvgate launched)."""
    if plan.platform is not Platform.GPU:
        return []
    L = plan.ledger
    judged = started_here  # no log of a server kvgate did not start
    rank = facts.figures_rank
    # rank 0's lines are the ledger's; a log whose first lines of a figure came from another rank says so
    where = f" (rank {rank}'s line)" if rank not in (None, "0") else ""

    def rel(name: str, exp: int | None, logged: float | None, what: str) -> Check:
        if exp is None:
            return Check(
                name=name,
                expected=None,
                observed=logged,
                passed=None,
                tolerance="3 %",
                explanation=f"{what}: the plan has no such term (given directly)",
                judged=False,
            )
        exp_g = round(exp / GiB, 2)
        if logged is None:
            return Check(
                name=name,
                expected=exp_g,
                observed=None,
                passed=None,
                tolerance="3 %",
                explanation=f"{what}: not in vLLM's log",
                judged=judged,
            )
        return Check(
            name=name,
            expected=exp_g,
            observed=logged,
            passed=abs(logged - exp_g) <= MEMORY_REL_TOL * max(exp_g, 0.01),
            tolerance="3 %",
            explanation=f"{what} (GiB): the ledger vs vLLM's start-up log" + where,
        )

    out = [
        rel("startup.weights_gib", L.weights_bytes, facts.weights_gib, "Model loading took"),
        _runner(L, facts, judged),
    ]
    if L.kv_pinned or L.mode is LedgerMode.GIVEN:
        # vLLM took the budget as given and skipped its memory profile: it logs the reservation
        exp = round(L.kv_cache_bytes / GiB, 2) if L.kv_cache_bytes is not None else None
        got = facts.kv_reserved_gib
        out += [
            Check(
                name="startup.kv_reserved_gib",
                expected=exp,
                observed=got,
                passed=None if got is None or exp is None else abs(got - exp) <= 0.01,
                tolerance="0.01 GiB",
                explanation="--kv-cache-memory-bytes as vLLM reserved it (its log rounds to 2 decimals)",
                judged=judged,
            ),
            Check(
                name="startup.available_kv_gib",
                expected=exp,
                observed=None,
                passed=None,
                tolerance="3 %",
                explanation="not judged: the KV budget is pinned (--kv-cache-memory-bytes), so vLLM skips "
                "the memory profile that would log it",
                judged=False,
            ),
        ]
    else:
        out.append(
            rel("startup.available_kv_gib", L.kv_cache_bytes, facts.available_kv_gib, "Available KV cache memory")
        )
    cg, logged = L.cudagraph_bytes, facts.cudagraph_estimated_gib
    exp = None if cg is None else round(cg / GiB, 2)
    tol = f"+/- {CUDAGRAPH_ABS_TOL_GIB} GiB"
    if exp is None or logged is None:
        out.append(
            Check(
                name="startup.cudagraph_estimate_gib",
                expected=exp,
                observed=logged,
                passed=None,
                tolerance=tol,
                judged=False,
                explanation="Estimated CUDA graph memory: not logged "
                "(--enforce-eager, or a version that does not estimate it)",
            )
        )
    else:
        out.append(
            Check(
                name="startup.cudagraph_estimate_gib",
                expected=exp,
                observed=logged,
                passed=abs(logged - exp) <= CUDAGRAPH_ABS_TOL_GIB,
                tolerance=tol,
                explanation="the plan's CUDA-graph estimate vs vLLM's",
            )
        )
    return out


def _runner(L: Ledger, facts: StartupFacts, judged: bool) -> Check:
    """The model runner the ledger's activation and non-torch terms follow, against the one vLLM ran:
    its profile step differs (V2: forward pass and penalty state, V1: the sampler warm-up)."""
    planned, ran = L.model_runner, facts.model_runner
    if planned is None:
        why = "the plan has no profile terms (KV budget given): no runner assumed"
    elif ran is None:
        why = (
            "not in vLLM's log: neither 'Using V2 Model Runner' nor V1's fallback line, and no "
            "'Model loading took' to show the runner was chosen"
        )
    else:
        why = (
            f"the runner whose profile the ledger follows ({L.sources.get('model_runner', '')}) vs vLLM's log "
            "('Using V2 Model Runner', or '... using the V1 model runner' or no V2 line); another runner: set "
            "VLLM_USE_V2_MODEL_RUNNER in vllm.env or --vllm-version"
        )
    return Check(
        name="startup.model_runner",
        expected=planned,
        observed=ran,
        passed=None if planned is None or ran is None else planned == ran,
        tolerance="exact",
        explanation=why,
        judged=planned is not None and (ran is not None or judged),  # judged: vLLM's log is kvgate's own
    )


def kv_shortfall(ledger: dict[str, Any], facts: StartupFacts) -> str | None:
    """The refusal's headline when vLLM found no room for the KV cache (a negative "Available KV cache
    memory"): what it found, what the plan expected, and the terms that differ, largest first."""
    got = facts.available_kv_gib
    if got is None or got >= 0:
        return None
    exp_b = ledger.get("kv_cache_bytes")
    exp = None if exp_b is None else exp_b / GiB
    head = f"vLLM found {got:.2f} GiB for the KV cache"
    if exp is None:
        return head + "; the plan has no KV budget of its own to compare"
    terms = []
    for what, planned, logged in (
        ("weights", ledger.get("weights_bytes"), facts.weights_gib),
        ("activation", ledger.get("activation_peak_bytes"), facts.activation_peak_gib),
        ("CUDA graphs", ledger.get("cudagraph_bytes"), facts.cudagraph_estimated_gib),
        ("non-torch", ledger.get("non_torch_bytes"), facts.non_torch_gib),
    ):
        if planned is not None and logged is not None:
            terms.append((logged - planned / GiB, what, planned / GiB, logged))
    explained = sum(d for d, *_ in terms)
    parts = [f"{what} {logged:.2f} logged vs {p:.2f} planned" for d, what, p, logged in sorted(terms, reverse=True)]
    rest = (exp - got) - explained
    parts.append(f"{'the rest' if facts.non_torch_gib is not None else 'non-torch and the rest'} {rest:+.2f}")
    return f"{head}: the plan expected {exp:.2f} GiB; the difference is {exp - got:.2f} GiB ({'; '.join(parts)})"
