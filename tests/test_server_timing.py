"""The client's latency percentiles against vLLM's per-request timing, on mixed-length traffic.

The vectors: 40 requests of ShareGPT replayed on the tiny gpt-oss by real vLLM 0.32 (CPU), each as
(output tokens, vLLM's mean_itl_ms, the client's mean gap first token to last in ms): 6 to 60
tokens, the client within 0.5 ms of the engine's gaps on all but six (a stretch of at most 7.8 ms
over a whole request)."""

from loadgen.results.records import RequestRecord
from tests.test_compare import cold_run
from validator.judge.servertiming import ShareBounds, client_stalls, per_request_latency_checks
from validator.rundir.samples import Sample

SHAREGPT_GPTOSS = [
    (6, 6.28, 6.26), (6, 10.23, 9.94), (9, 5.63, 5.62), (9, 5.58, 5.56), (9, 6.71, 6.67), (10, 9.04, 9.01),
    (11, 6.68, 6.4), (15, 6.64, 6.62), (16, 9.35, 9.34), (16, 8.35, 8.32), (18, 7.31, 7.77), (18, 7.74, 7.76),
    (19, 7.52, 7.77), (20, 6.49, 6.55), (21, 6.31, 6.33), (22, 7.75, 8.12), (23, 6.28, 6.26), (23, 9.48, 9.46),
    (23, 6.72, 6.73), (25, 6.35, 6.3), (27, 6.95, 6.93), (30, 6.64, 6.64), (37, 7.3, 7.45), (39, 7.48, 7.4),
    (40, 6.66, 6.64), (42, 7.58, 7.56), (45, 8.88, 8.92), (47, 9.08, 9.01), (48, 7.92, 7.92), (49, 8.49, 8.54),
    (51, 8.12, 8.12), (52, 6.28, 6.33), (53, 7.57, 7.6), (54, 6.43, 6.43), (55, 7.44, 7.4), (56, 7.4, 7.37),
    (56, 7.48, 7.45), (56, 6.82, 6.75), (59, 7.29, 7.26), (60, 6.92, 6.9),
]  # fmt: skip
BOUNDS = ShareBounds(api_ms=80.0, api_p99_ms=250.0, itl_ms=80.0, step_ms=60.0)


def judged(last_late_ms=lambda n: 0.0, first_late_ms=0.0, squeeze=1.0, bounds=BOUNDS, scrapes=None):
    """The run's ITL checks, the last token of a request of n tokens read `last_late_ms(n)` later, each
    first token `first_late_ms` later (the rest on time), every gap times `squeeze`; `scrapes`: the
    client's /metrics scrapes as (sent, returned) in run time, s."""
    run = cold_run()
    if scrapes is not None:
        run.samples = [
            Sample(t=run.started_at + back, values={}, t_sent=run.started_at + sent) for sent, back in scrapes
        ]
    run.records = [
        RequestRecord(
            id=f"r{i}",
            run="cold",
            sent=0.0,
            chunk_times=[0.03 + first_late_ms / 1e3]
            + [0.03 + k * gap * squeeze / 1e3 for k in range(1, n - 1)]
            + [0.03 + ((n - 1) * gap * squeeze + last_late_ms(n)) / 1e3],
            prompt_tokens=64,
            output_tokens=n,
            status=200,
            server_queue_ms=0.5,
            server_ttft_ms=20.0,
            server_itl_ms=itl,
        )
        for i, (n, itl, gap) in enumerate(SHAREGPT_GPTOSS)
    ]
    checks = per_request_latency_checks(run, bounds)
    assert checks is not None
    return {c.name.removeprefix("cold."): c for c in checks}


def test_the_recorded_run_passes_and_each_request_keeps_its_own_slack():
    c = judged()
    assert c["itl_p50_client_vs_server"].status == c["itl_p99_client_vs_server"].status == "pass"
    # the p99's bound: the 6-token requests may stand 80 / 5 = 16 ms a gap off, the 60-token ones 1.4;
    # the top two of vLLM's ITL + slack, 22.28 (6.28 + 16) and 26.23 (10.23 + 16), give 24.7; of
    # ITL - slack, 7.06 and 7.34 (45 and 47 tokens) give 7.2
    assert c["itl_p99_client_vs_server"].expected == "7.2 to 24.7 ms"
    assert "6-60 tokens a request" in c["itl_p99_client_vs_server"].explanation


def test_a_short_requests_late_last_token_within_its_slack_passes():
    """A client starved on a busy host reads the 6-token requests' last token 34 ms late: 6.8 ms a
    gap, the client's p99 15.3 ms, past the 12.9 that vLLM's p99 (9.9) plus the median request's
    slack (80 ms over 27 gaps) allowed; such a bound failed a ShareGPT run in CI. Within the 80 ms a
    request may drift: pass."""
    c = judged(lambda n: 34.0 if n == 6 else 0.0)
    assert c["itl_p99_client_vs_server"].status == "pass"
    assert c["itl_p99_client_vs_server"].observed == 15.305


def test_stretched_gaps_past_a_requests_slack_fail():
    short = judged(lambda n: 120.0 if n <= 9 else 0.0)  # 24 ms a gap on the shortest: p99 32.5 > 24.7
    assert short["itl_p99_client_vs_server"].status == "fail"
    every = judged(lambda n: 120.0)  # 2.2 to 24 ms a gap: the median moves past its slack
    assert every["itl_p50_client_vs_server"].status == "fail"
    assert judged(lambda n: 60.0)["itl_p50_client_vs_server"].status == "pass"  # 60 ms of 80: within


def test_a_first_token_read_late_shortens_the_clients_gaps_within_its_ttft_share():
    """Seen in CI on the tiny Gemma 4: a first token read 146 ms late (the API server busy) put a
    32-token request's mean ITL 4.7 ms under vLLM's, past 80 ms over its 31 gaps. The delay is in
    the request's TTFT share (here 9.5 + 146 ms), which bounds it: on these 7 ms gaps the client's
    p50 falls to 1.46 ms and passes. It fails with the gaps squeezed besides (to 90 %), with the
    same p50 reached by gaps squeezed to 20 % and the first token on time (share 9.5 ms), and with
    a delay past the API server's bound (b.api_ms: 597 ms in that run, 16 ITLs; 80 ms here)."""
    host = ShareBounds(api_ms=597.0, api_p99_ms=1194.0, itl_ms=80.0, step_ms=60.0)
    late = judged(first_late_ms=146.0, bounds=host)
    assert late["itl_p50_client_vs_server"].status == late["itl_p99_client_vs_server"].status == "pass"
    assert late["itl_p50_client_vs_server"].observed == 1.46
    assert judged(first_late_ms=146.0, squeeze=0.9, bounds=host)["itl_p50_client_vs_server"].status == "fail"
    on_time = judged(squeeze=0.2, bounds=host)["itl_p50_client_vs_server"]
    assert on_time.status == "fail" and abs(on_time.observed - 1.46) < 0.2
    assert judged(first_late_ms=146.0, bounds=BOUNDS)["itl_p50_client_vs_server"].status == "fail"


def _scrapes(stall: tuple[float, float] | None = None, slow: tuple[float, float] | None = None) -> list:
    """Scrapes sent every 0.1 s for 8 s, each back 10 ms later; none sent within `stall` (the client
    stopped), or one scrape sent at slow[0] that the server answers only at slow[1]."""
    out, t = [], 0.0
    while t < 8.0:
        if stall and stall[0] < t < stall[1]:
            t = stall[1]
        back = slow[1] if slow and abs(t - slow[0]) < 1e-9 else t + 0.01
        out.append((t, back))
        t = max(round(t + 0.1, 3), back)
    return out


def test_a_client_that_stopped_reads_late_and_says_so():
    """Seen in CI on the tiny Gemma 4: the client's loop sent no scrape for 0.84 s past its time,
    and 4 requests' last 5 tokens, which vLLM produced 40 ms apart, were read at its end: the p50
    stood past its 80 ms slack. The stall is measured by the client's own sampler (a scrape sent
    late, not a slow server's), and the requests decoding through it may stand that much more above:
    every last token read 120 ms late passes with a 0.4 s stall over the decode windows, and fails
    with the stall after every request ended or with the server slow to answer instead."""
    stalled = judged(lambda n: 120.0, scrapes=_scrapes(stall=(0.1, 0.6)))
    assert stalled["itl_p50_client_vs_server"].status == "pass"
    assert "the client itself stalled 400 ms" in stalled["itl_p50_client_vs_server"].explanation
    assert judged(lambda n: 120.0, scrapes=_scrapes(stall=(5.0, 5.5)))["itl_p50_client_vs_server"].status == "fail"
    slow = judged(lambda n: 120.0, scrapes=_scrapes(slow=(0.1, 0.6)))
    assert slow["itl_p50_client_vs_server"].status == "fail"
    assert "stalled" not in slow["itl_p50_client_vs_server"].explanation


def test_client_stalls_are_idle_time_past_the_sampler_cadence():
    run = cold_run()
    run.samples = [Sample(t=run.started_at + b, values={}, t_sent=run.started_at + a) for a, b in _scrapes((1.0, 1.84))]
    assert [(round(a, 3), round(b, 3)) for a, b in client_stalls(run)] == [(1.1, 1.84)]
    run.samples = [Sample(t=run.started_at + b, values={}, t_sent=run.started_at + a) for a, b in _scrapes()]
    assert client_stalls(run) == []
