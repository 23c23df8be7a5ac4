"""Replacing a file whole: readers see the old content or the new, never half of either.

Also :func:`check_regular_file`, which refuses a model path that is no regular file, and
:func:`check_gguf_file`, which also wants GGUF's magic.
"""

from __future__ import annotations

import contextlib
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
def exclusive_lock(
    lock_path: Path,
    on_wait: Callable[[], object] | None = None,
    *,
    remove: bool = False,
) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (created if absent) for the duration.

    A :class:`filelock.FileLock` (``flock`` on POSIX, ``msvcrt.locking`` on Windows), so
    it serialises processes, and threads too (each call takes its own lock object and
    descriptor). ``on_wait`` is called once if another holder makes this one wait.
    With ``remove`` the holder unlinks the lock file before letting go, so nothing is
    left behind: filelock (4.0 on) notices when the file it locked was unlinked
    meanwhile and takes the one now at the path instead. Raises OSError.
    """
    from filelock import FileLock, Timeout  # imported here: most commands never lock

    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if on_wait is not None:
            on_wait()
        lock.acquire()
    try:
        yield
    finally:
        if remove:
            with contextlib.suppress(OSError):  # Windows: an open file cannot be unlinked
                lock_path.unlink()
        lock.release()


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


GGUF_MAGIC = b"GGUF"


def check_gguf_file(path: Path) -> None:
    """ModelLoadError (one line) unless path is a readable regular file with GGUF's magic."""
    check_regular_file(path)  # by stat, before opening: a named pipe would block the open
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file (bad magic {magic!r}): {path}")
