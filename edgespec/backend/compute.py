"""llama.cpp's compute calls, made from one thread per device group.

llama.cpp's CPU backend runs each graph on an OpenMP team, and GNU OpenMP keeps a
team for every thread that ever started one. Once a process holds more of those
threads than it has cores, libgomp stops spinning at barriers and sleeps on a
futex at each one (its "throttled" spin count; no environment variable lifts it),
and a graph has hundreds of barriers. A parallel server whose four slot threads had
each led a decode then decoded one token in 28 ms instead of 17
(docs/history.md, "One compute thread"). So every
``llama_decode`` of the local contexts goes through one long-lived thread, as
llama-server runs all its slots from one loop: one team, whatever thread asks.

A model on RPC workers gets a thread of its own: a lost worker parks the thread
that was decoding through it for good (edgespec.backend.rpc), and that must not
stop the local models' decodes.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any


class ComputeThread:
    """A daemon thread that runs the calls handed to it, one at a time, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on this thread; its result, or its exception raised here.

        The caller waits until the call has returned, even through a
        KeyboardInterrupt (raised once it has): the call uses buffers the caller may
        free as it unwinds.
        """
        if threading.current_thread() is self._thread:
            return fn(*args)
        call = _Call(fn, args)
        self._jobs.put(call)
        interrupted: BaseException | None = None
        while True:
            try:
                call.done.wait()
                break
            except BaseException as exc:  # (a second Ctrl-C must not cut this short)
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        if call.error is not None:
            raise call.error
        return call.result

    def stop(self) -> None:
        """End the thread once the calls handed to it so far have run (it does not wait)."""
        self._jobs.put(_STOP)

    def _loop(self) -> None:
        while True:
            call = self._jobs.get()
            if call is _STOP:
                return
            try:
                call.result = call.fn(*call.args)
            except BaseException as exc:  # handed to the caller
                call.error = exc
            finally:
                call.done.set()


class _Call:
    __slots__ = ("fn", "args", "result", "error", "done")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()


_STOP = _Call(lambda: None, ())
_local: ComputeThread | None = None
_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _local
    _local = None  # a forked child has no copy of the thread: it starts its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def local_compute() -> ComputeThread:
    """The thread that runs every local context's compute calls (started on first use)."""
    global _local
    with _lock:
        if _local is None:
            _local = ComputeThread("edgespec-compute")
        return _local
