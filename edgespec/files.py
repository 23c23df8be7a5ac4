"""Replacing a file whole: readers see the old content or the new, never half of either.

Also :func:`check_regular_file`, which refuses a model path that is no regular file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import ModelLoadError


def replace_file(path: Path, write: Callable[[Path], object]) -> None:
    """Have ``write`` fill a temporary file beside ``path``, then rename it over ``path``.

    The temporary name is this thread's own (a server's sessions write caches from
    several threads of one process), and it is gone afterwards whatever happened.
    Raises OSError; ``path`` is then as it was.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, on_wait: Callable[[], object] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if absent) for the duration.

    Serialises processes, and threads too (each call opens its own descriptor); ``on_wait``
    is called once if another holder makes this one wait. Raises OSError.
    """
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


#: What a path that is not a regular file is, by the stat mode test that tells it.
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular_file(path: str | Path) -> None:
    """Raise ModelLoadError unless ``path`` is a regular file (after symlinks).

    Looks with stat only: opening a named pipe with no writer would block forever.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ModelLoadError(f"model file not found: {path}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ModelLoadError(f"cannot read {path}: {reason}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
        raise ModelLoadError(f"cannot load {path}: it is {kind}, not a regular file")
