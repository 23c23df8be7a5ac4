"""A deadline on every call into llama.cpp that talks to RPC workers.

ggml-rpc's sockets have no timeout: a worker that stops answering without closing
its connection (a stopped process, a machine gone to sleep, a cable pulled after
the request was sent) leaves the decode waiting in recv() for ever, and with it
the command or every request of the server. llama.cpp has no option for it. So a
watchdog thread keeps each watched call's deadline, and when one passes it shuts
the process's connections to that model's workers down: the waiting recv() then
fails, ggml-rpc reports the worker lost, and edgespec's handler for a lost worker
takes over (edgespec.backend.rpc: one line and exit status 1, or in the server a
parked thread and 503s). ``timed_out`` tells that handler why.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator, Sequence

#: Seconds one decode (or cache edit) may wait on the workers before they count as
#: lost. A decode of a full 512-token batch of a large model on slow CPU workers can
#: take a minute; a silent worker is waited for this long at most.
DEFAULT_RPC_TIMEOUT_S = 120.0

_cv = threading.Condition()
_watches: dict[object, tuple[float, tuple[str, ...], float]] = {}  # -> deadline, eps, s
_thread: threading.Thread | None = None
_timed_out: str | None = None  # what passed its deadline, once something has


def check_rpc_timeout(seconds: object) -> float:
    """seconds as a float, or ValueError with one line unless it is a positive number."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"the RPC timeout must be a number of seconds, got {seconds!r}")
    if not 0 < seconds < float("inf"):
        raise ValueError(f"the RPC timeout must be more than 0 seconds, got {seconds!r}")
    return float(seconds)


@contextlib.contextmanager
def watched(endpoints: Sequence[str], timeout_s: float) -> Iterator[None]:
    """Run the body (a call into llama.cpp) under a deadline of timeout_s seconds: past
    it, this process's connections to the endpoints are shut down (see the module)."""
    if not endpoints:
        yield
        return
    token = object()
    with _cv:
        _watches[token] = (time.monotonic() + timeout_s, tuple(endpoints), timeout_s)
        _ensure_thread()
        _cv.notify_all()
    try:
        yield
    finally:
        with _cv:
            _watches.pop(token, None)


def timed_out() -> str | None:
    """Why workers were cut off ("no answer from HOST:PORT within N s ..."), or None."""
    return _timed_out


def _ensure_thread() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_watch, name="edgespec-rpc-watchdog", daemon=True)
        _thread.start()


def _watch() -> None:
    global _timed_out
    while True:
        with _cv:
            now = time.monotonic()
            expired = [(t, w) for t, w in _watches.items() if w[0] <= now]
            if not expired:
                nearest = min((w[0] for w in _watches.values()), default=None)
                _cv.wait(None if nearest is None else nearest - now)
                continue
            for token, _ in expired:
                _watches.pop(token)
            endpoints = sorted({ep for _, w in expired for ep in w[1]})
            timeout_s = max(w[2] for _, w in expired)
            if _timed_out is None:
                _timed_out = (
                    f"no answer from {','.join(endpoints)} within {timeout_s:g} s "
                    "(a stopped or unreachable worker; --rpc-timeout sets the limit)"
                )
        cut_connections(endpoints)


def cut_connections(endpoints: Sequence[str]) -> int:
    """Shut down every socket of this process connected to one of the endpoints (the
    file descriptors stay open for their owner, whose next read fails); how many."""
    peers = set()
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM):
                peers.add((info[4][0], info[4][1]))
    cut = 0
    for name in _open_fds():
        try:
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except (ValueError, OSError):
            continue
        with s:
            try:
                peer = s.getpeername()
            except OSError:
                continue
            if isinstance(peer, tuple) and (peer[0], peer[1]) in peers:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)  # on the socket: every descriptor of it
                    cut += 1
    return cut


def _open_fds() -> list[str]:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return os.listdir(folder)
    return [str(i) for i in range(1024)]
