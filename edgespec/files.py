"""Replacing a file whole: readers see the old content or the new, never half of either."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path


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
