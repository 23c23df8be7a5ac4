"""Replacing a file whole: readers see the old content or the new, never half of either."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
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
