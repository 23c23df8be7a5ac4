"""Keep a long-running server's C heap small (glibc's ``malloc_trim`` and ``mallopt``).

A server that runs a thread per connection spreads its native allocations (Python
objects, sockets, llama.cpp's per-call buffers) over glibc's arenas, up to 8 per core,
each a heap of its own that stays resident once touched; and the pages freed inside a
heap stay resident until it is trimmed (glibc trims only each heap's top by itself).
``limit_arenas`` caps the arenas, ``trim_heap`` releases every free page. Measured
with benchmarks/bench_soak.py (docs/self-healing.md): RSS after 1,000 requests.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

DEFAULT_TRIM_INTERVAL_S = 1.0  # at most one trim a second: it takes the arenas' locks

SERVER_ARENAS = 2  # a server's arenas: 1.09x and 1.08x RSS growth, against 1.11x and 1.12x
_M_ARENA_MAX = -8  # malloc.h

_libc: ctypes.CDLL | None = None
_trim = None
_lock = threading.Lock()
_last = 0.0


def _glibc() -> ctypes.CDLL | None:
    global _libc, _trim
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _libc = ctypes.CDLL(None)
        _trim = getattr(_libc, "malloc_trim", None)  # glibc only (not macOS, musl)
        if _trim is not None:
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
    return _libc if _trim is not None else None


def _malloc_trim():
    _glibc()
    return _trim


def limit_arenas(n: int = SERVER_ARENAS) -> bool:
    """Let threads started from now on share at most n malloc arenas (glibc's
    M_ARENA_MAX). True if the C library took it."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, n))


def trim_heap(min_interval_s: float = DEFAULT_TRIM_INTERVAL_S) -> bool:
    """Release the C heap's free pages unless that was done under min_interval_s ago
    (or another thread is doing it). True if pages were released; False where the C
    library has no malloc_trim."""
    global _last
    trim = _malloc_trim()
    if trim is None or not _lock.acquire(blocking=False):
        return False
    try:
        now = time.monotonic()
        if now - _last < min_interval_s:
            return False
        _last = now
        return bool(trim(0))
    finally:
        _lock.release()
