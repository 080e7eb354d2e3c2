"""Files written so that nothing planted in a directory can redirect them: a new file is created
with O_CREAT | O_EXCL | O_NOFOLLOW (never through an existing name, a symlink included), written,
and renamed over the target (a rename replaces a symlink itself, never what it points to); files
appended to are opened with O_NOFOLLOW. Modes 0600, directories 0700: run files hold logs and
profiles."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, TextIO

FILE_MODE = 0o600
DIR_MODE = 0o700
_CALLER_UMASK: int | None = None


def restrict_umask() -> None:
    """Everything this process creates from now on is its user's only (also what a library writes
    behind kvgate's back); the caller's umask is kept for the programs kvgate starts (vLLM's caches)."""
    global _CALLER_UMASK
    previous = os.umask(0o077)
    if _CALLER_UMASK is None:
        _CALLER_UMASK = previous


def caller_umask() -> int:
    """The umask kvgate was started with (-1, Popen's "leave it", when restrict_umask() never ran)."""
    return -1 if _CALLER_UMASK is None else _CALLER_UMASK


def write_atomic(path: Path, data: str | bytes) -> None:
    """Whole or not at all: a reader never sees half a file, and a symlink at `path` or at any
    temporary name is replaced, never followed."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _append_fd(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)


def open_append(path: Path) -> TextIO:
    """Append text to a file created by this run (never through a symlink)."""
    return os.fdopen(_append_fd(path), "a", encoding="utf-8")


def open_append_bytes(path: Path) -> BinaryIO:
    """Append bytes (a child process's output) to a file created by this run (never through a symlink)."""
    return os.fdopen(_append_fd(path), "ab")


def make_dirs(path: Path) -> None:
    Path(path).mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def real_dir_inside(root: Path, *parts: str) -> Path:
    """root/parts, each part one plain name and each directory on the way a real directory, not a
    symlink (a directory someone else handed over for re-judging may hold planted links). Raises
    OSError otherwise."""
    here = Path(root)
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\x00" in part:
            raise OSError(f"{part!r} is not a plain name")
        here = here / part
        if here.is_symlink():
            raise OSError(f"{here} is a symlink")
    return here
