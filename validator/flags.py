"""vLLM's command-line spellings (pure): which option a word of an argv names, as vLLM's parser
reads it. The launcher refuses owned flags in every spelling with it; the judge reads the argv it
started vLLM with."""

from __future__ import annotations


def flag_key(word: str) -> str | None:
    """A word as vLLM's parser reads it as an option (None: a value). vLLM (FlexibleArgumentParser)
    reads `_` as `-` and `--flag=value` as `--flag value`, and takes `--flag.key value` as a key of
    a JSON flag; argparse then accepts any unambiguous prefix of a flag."""
    if not word.startswith("-") or word == "-" or word[1:2].isdigit() or word.startswith("-."):
        return None
    if word.startswith("--"):
        key = word[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
        return "--" + key
    return word.split("=", 1)[0]


def names(key: str, flag: str) -> bool:
    """Whether an option spelled `key` (flag_key's) may set `flag`: the flag itself, or a prefix of
    it argparse may take for it."""
    return key == flag or (key.startswith("--") and len(key) > 2 and flag.startswith(key))


def env_bool(value: object) -> bool | None:
    """A boolean vLLM environment variable as vLLM reads it (1 / 0; true / false taken too), None
    when unset or unreadable: the release's default then applies."""
    v = str(value if value is not None else "").strip().lower()
    return True if v in ("1", "true") else False if v in ("0", "false") else None


def value(args: list[str], flag: str) -> str | None:
    """The value an argv gives `flag` (the last one, as argparse keeps), in any spelling flag_key
    reads; None when it is not given or has no word after it."""
    found = None
    for i, word in enumerate(args):
        key = flag_key(word)
        if key is None or not names(key, flag):
            continue
        if "=" in word:
            found = word.split("=", 1)[1]
        elif i + 1 < len(args):
            found = args[i + 1]
    return found
