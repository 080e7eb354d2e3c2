"""The quality A/B's prompt set (pure): tasks a quantized KV cache is known to hurt, each with its
answer, at lengths near the limit (the error grows with context).

- retrieval: a pass key planted at a depth of a long filler context, asked for at the end;
- copy: a span of words to repeat exactly, after the filler;
- arithmetic: a chain of sums to continue, after the filler.

Lengths are asked in tokens and met with the server's tokenizer (observe/quality.py sizes the
filler); here a prompt is built from a filler word count.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum


class TaskKind(Enum):
    RETRIEVAL = "retrieval"
    COPY = "copy"
    ARITHMETIC = "arithmetic"
    GIVEN = "given"  # the user's prompt (a dataset file): an answer only when the file has one


@dataclass(frozen=True)
class Task:
    """One prompt to build: its kind, where its needle sits, the share of the length budget it fills."""

    id: str
    kind: TaskKind
    length_share: float  # of the longest prompt allowed
    depth: float = 0.0  # retrieval: where the key sits in the filler (0 start, 1 end)
    seed: int = 0


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: TaskKind
    text: str
    answer: str | None  # None: no known answer (a user prompt without one)
    target_tokens: int | None = None  # the length asked (None: a user prompt, as given)


LENGTH_SHARES = (0.3, 0.6, 0.95)
DEPTHS = (0.1, 0.5, 0.9)

_WORDS = (
    "river stone garden window morning silver paper market bridge candle forest letter winter "
    "harbor pocket ladder orchard meadow lantern valley thunder ribbon planet basket mirror "
    "feather island castle engine violin saddle pepper blanket compass anchor marble velvet"
).split()


def builtin_tasks() -> list[Task]:
    """Retrieval at 3 depths x 3 lengths, copy and arithmetic at 3 lengths: 15 prompts."""
    tasks = [
        Task(f"retrieval-d{int(d * 100)}-l{int(s * 100)}", TaskKind.RETRIEVAL, s, depth=d, seed=i)
        for i, (s, d) in enumerate((s, d) for s in LENGTH_SHARES for d in DEPTHS)
    ]
    tasks += [Task(f"copy-l{int(s * 100)}", TaskKind.COPY, s, seed=100 + i) for i, s in enumerate(LENGTH_SHARES)]
    tasks += [
        Task(f"arithmetic-l{int(s * 100)}", TaskKind.ARITHMETIC, s, seed=200 + i) for i, s in enumerate(LENGTH_SHARES)
    ]
    return tasks


def filler(words: int, rng: random.Random) -> list[str]:
    """Plain sentences of common words: long context with nothing to retrieve in it."""
    out: list[str] = []
    while len(out) < words:
        n = rng.randint(6, 12)
        sentence = [rng.choice(_WORDS) for _ in range(n)]
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        out += sentence
    return out[:words]


def build(task: Task, filler_words: int, target_tokens: int | None = None) -> Prompt:
    """The prompt of `task` with `filler_words` words of filler (deterministic in the task's seed)."""
    rng = random.Random(task.seed)
    words = filler(filler_words, rng)
    if task.kind is TaskKind.RETRIEVAL:
        key = str(rng.randint(10000, 99999))
        at = int(len(words) * task.depth)
        body = words[:at] + f"The pass key is {key}. Remember it.".split() + words[at:]
        text = " ".join(body) + "\nWhat is the pass key? The pass key is"
        return Prompt(task.id, task.kind, text, key, target_tokens)
    if task.kind is TaskKind.COPY:
        span = " ".join(rng.choice(_WORDS) for _ in range(8))
        text = " ".join(words) + f"\nCopy this text exactly: {span}\nCopy:"
        return Prompt(task.id, task.kind, text, span, target_tokens)
    a = rng.randint(10, 60)
    steps = []
    for _ in range(3):
        b = rng.randint(10, 60)
        steps.append(f"{a} + {b} = {a + b}.")
        a += b
    last = rng.randint(10, 60)
    text = " ".join(words) + "\nCompute: " + " ".join(steps) + f" {a} + {last} ="
    return Prompt(task.id, task.kind, text, str(a + last), target_tokens)


def answered(output: str, answer: str | None) -> bool | None:
    """Whether the output gives the answer first (leading spaces and a final period aside); None
    when there is no known answer."""
    if answer is None:
        return None
    return output.strip().startswith(answer)
