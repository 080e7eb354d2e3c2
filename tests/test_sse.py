"""The SSE parser on byte streams shaped like vLLM 0.32's, split every way."""

import json
from pathlib import Path

import pytest

from loadgen.transport.sse import StreamParser


def tok(i, text=" a", finish=None):
    """A token event shaped as vLLM 0.32 sends it (see tests/data/vllm-0.32-completions-stream.txt)."""
    return (
        "data: "
        + json.dumps(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": finish,
                        "stop_reason": None,
                        "prompt_token_ids": None,
                        "token_ids": None,
                    }
                ],
            },
            separators=(",", ":"),
        )
        + "\n\n"
    ).encode()


USAGE = (
    b'data: {"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}\n\n'
)
DONE = b"data: [DONE]\n\n"
STREAM = tok(0) + tok(1, text="") + tok(2) + tok(3, finish="length") + USAGE + DONE


def run(pieces, **kw):
    p = StreamParser(**kw)
    for i, piece in enumerate(pieces):
        p.feed(piece, float(i))
    p.close(float(len(pieces)))
    return p


def test_whole_stream_in_one_read():
    p = run([STREAM])
    assert list(p.token_times) == [0.0] * 4
    assert p.usage["completion_tokens"] == 4 and p.finish_reason == "length" and p.done
    assert p.error is None


@pytest.mark.parametrize("size", [1, 2, 3, 7, 50, 101])
def test_split_anywhere_gives_the_same_events(size):
    pieces = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    p = run(pieces)
    assert len(p.token_times) == 4
    assert p.usage["prompt_tokens"] == 7 and p.finish_reason == "length" and p.done
    assert list(p.token_times) == sorted(p.token_times)


def test_time_is_when_the_event_completes():
    t1 = tok(1)
    p = run([tok(0) + t1[:10], t1[10:], tok(2)])
    assert list(p.token_times) == [0.0, 1.0, 2.0]


def test_empty_text_chunks_count_as_token_events():
    # vllm bench serve counts every event with choices, whatever its text
    p = run([tok(0, text=""), tok(1, text=""), USAGE, DONE])
    assert len(p.token_times) == 2
    assert p.text_events == 0


def test_usage_chunk_is_not_a_token():
    p = run([USAGE, DONE])
    assert list(p.token_times) == [] and p.usage["completion_tokens"] == 4


def test_error_event():
    p = run([tok(0), b'data: {"error": {"message": "boom", "code": 500}}\n\n'])
    assert p.error == "server error event: boom"
    p = run([b'event: error\ndata: {"message": "named"}\n\n'])
    assert p.error.startswith("server error event")


def test_bad_json_is_an_error_not_a_crash():
    p = run([tok(0), b'data: {"choices": [{\n\n', tok(1)])
    assert p.bad_events == 1 and p.error.startswith("malformed SSE data")
    assert len(p.token_times) == 2


def test_done_without_trailing_blank_line():
    p = run([tok(0) + USAGE + b"data: [DONE]"])
    assert p.done and p.usage is not None


def test_comments_and_crlf():
    s = STREAM.replace(b"\n", b"\r\n")
    p = run([b": ping\r\n\r\n" + s])
    assert len(p.token_times) == 4 and p.done


def test_spaced_json_and_chat_deltas():
    chat = (
        b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
        b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
        b'data: {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]}\n\n' + DONE
    )
    p = run([chat])
    assert len(p.token_times) == 3 and p.text_events == 2 and p.finish_reason == "stop"


def test_token_ids_are_collected_when_asked():
    ev = b'data: {"choices":[{"index":0,"text":"x","token_ids":[5,6]}]}\n\n'
    p = run([ev, ev], want_token_ids=True)
    assert p.token_ids == [5, 6, 5, 6]


def test_fast_and_slow_paths_agree():
    body = b"".join(tok(i) for i in range(200)) + tok(200, finish="length") + USAGE + DONE
    fast = run([body[i : i + 4096] for i in range(0, len(body), 4096)])
    slow = run([body], want_token_ids=True)  # forces full decoding of every event
    assert len(fast.token_times) == len(slow.token_times) == 201
    assert fast.usage == slow.usage and fast.finish_reason == slow.finish_reason


RECORDED = (Path(__file__).parent / "data" / "vllm-0.32-completions-stream.txt").read_bytes()


@pytest.mark.parametrize("size", [1, 13, 100, 4096])
def test_recorded_vllm_stream(size):
    """6 tokens asked with ignore_eos from the tiny model; some events carry empty text."""
    p = run([RECORDED[i : i + size] for i in range(0, len(RECORDED), size)])
    assert len(p.token_times) == 6
    assert p.usage == {"prompt_tokens": 5, "total_tokens": 11, "completion_tokens": 6}
    assert p.finish_reason == "length" and p.done and p.error is None


def tok_with_usage(completion_tokens, text=" a", finish=None):
    """A token event with vLLM's continuous_usage_stats: the tokens so far ride in every chunk."""
    ev = json.loads(tok(0, text, finish)[6:])
    ev["usage"] = {"prompt_tokens": 7, "total_tokens": 7 + completion_tokens, "completion_tokens": completion_tokens}
    return ("data: " + json.dumps(ev, separators=(",", ":")) + "\n\n").encode()


def test_continuous_usage_counts_tokens_even_when_the_server_merges_them():
    # the server fell behind and merged tokens 2-4 into one chunk: 3 events, 5 tokens
    stream = tok_with_usage(1) + tok_with_usage(4, text=" b c d") + tok_with_usage(5, finish="length") + USAGE + DONE
    p = run([stream[:40], stream[40:200], stream[200:]], want_counts=True)
    assert len(p.token_times) == 3
    assert p.token_counts == [1, 4, 5]
    counted = run([stream])  # without want_counts the parser counts events, not tokens
    assert counted.token_counts == [] and len(counted.token_times) == 3


def test_a_chunk_without_usage_is_marked_unknown_not_guessed():
    p = run([tok_with_usage(1) + tok(1) + tok_with_usage(3) + DONE], want_counts=True)
    assert p.token_counts == [1, None, 3]
