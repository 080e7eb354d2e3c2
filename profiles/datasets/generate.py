"""Writes the small datasets kvgate ships for its tests and demo (nothing is downloaded), sized for
the tiny CPU model (block 32; the chat files need max_model_len 1024, so max_num_seqs 2 on the tiny
profile's 64 blocks). Deterministic: `python generate.py` rewrites the
same bytes, and a test checks the files in the repository are exactly what it writes.

- sharegpt-tiny.json: ShareGPT format, 40 conversations of mixed lengths, some asked twice, some
  of four turns;
- chat-system-prompt.jsonl: chat requests sharing a long system prompt, request data at the back;
- chat-system-prompt-timestamp.jsonl: the same requests with a timestamp at the front of the
  system prompt (the template mistake the audit must find);
- trace-mooncake.jsonl: a Mooncake-format trace (timestamps in ms, hash ids of 32 tokens) whose
  requests share three system prompts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

# words the tiny model's tokenizer was trained on: about one token each
WORDS = (
    "the model serves requests with a paged key value cache of fixed blocks while the scheduler "
    "admits sequences until memory runs out then queues or preempts them latency throughput "
    "prefix cache hit miss token prompt output decode prefill stream chunk"
).split()


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


SYSTEM = (
    "You are the serving assistant of the inference team. "
    + words(random.Random(7), 790)
    + ". Answer in one short paragraph."
)
QUESTIONS = [
    "what does prefill cost",
    "why do requests queue",
    "how many blocks does a prompt take",
    "when is a request preempted",
    "what is a prefix cache hit",
    "how fast is decode",
    "why is the first token slow",
    "what limits throughput",
]


def chat(timestamp_first: bool) -> list[dict]:
    out = []
    for i in range(32):
        t = f"13:04:{i:02d}"
        q = QUESTIONS[i % len(QUESTIONS)]
        if timestamp_first:
            system, user = f"Current time: {t}. " + SYSTEM, f"Request {i}: {q}?"
        else:
            system, user = SYSTEM, f"Request {i} at {t}: {q}?"
        out.append(
            {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "output_tokens": 16,
            }
        )
    return out


def sharegpt() -> list[dict]:
    rng = random.Random(11)
    convs = []
    for i in range(40):
        if i in (9, 17, 25, 33, 39):  # asked again, word for word
            first = convs[i - 8]["conversations"][0]["value"]
        else:
            first = words(rng, rng.randint(12, 180))
        turns = [{"from": "human", "value": first}, {"from": "gpt", "value": words(rng, rng.randint(6, 60))}]
        if i % 10 == 4:  # a conversation of four turns
            for _ in range(3):
                turns.append({"from": "human", "value": words(rng, rng.randint(6, 24))})
                turns.append({"from": "gpt", "value": words(rng, rng.randint(6, 30))})
        convs.append({"id": f"tiny-{i}", "conversations": turns})
    return convs


def trace() -> list[dict]:
    """48 requests over about 9.6 s; three system prompts of 6, 8 and 4 hash ids (32 tokens each)
    shared by most requests, then each request's own hash ids."""
    rng = random.Random(5)
    systems = [list(range(0, 6)), list(range(100, 108)), list(range(200, 204))]
    rows, t, own = [], 0, 1000
    for _ in range(48):
        k = rng.randrange(4)
        head = systems[k] if k < 3 else []
        tail_n = rng.randint(1, 6)
        hashes = head + list(range(own, own + tail_n))
        own += tail_n
        length = min(len(hashes) * 32 - rng.randint(0, 31), 448)
        rows.append({"timestamp": t, "input_length": length, "output_length": rng.randint(8, 48), "hash_ids": hashes})
        t += rng.randint(80, 320)
    return rows


def files() -> dict[str, str]:
    def jsonl(rows: list[dict]) -> str:
        return "".join(json.dumps(r) + "\n" for r in rows)

    return {
        "sharegpt-tiny.json": json.dumps(sharegpt(), indent=1) + "\n",
        "chat-system-prompt.jsonl": jsonl(chat(timestamp_first=False)),
        "chat-system-prompt-timestamp.jsonl": jsonl(chat(timestamp_first=True)),
        "trace-mooncake.jsonl": jsonl(trace()),
    }


if __name__ == "__main__":
    for name, text in files().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")
