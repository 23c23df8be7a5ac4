"""One thread per model pair runs the requests, one at a time, in arrival order.

HTTP handler threads submit a job (a function that yields results) and read its
output from a queue. A job's ``cancel`` event, set by a handler whose client went
away, is polled by the job between engine events; a job cancelled while it still
waits in the queue is skipped. The model is only ever touched by this thread.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .errors import from_exception

Work = Callable[[Callable[[], bool]], Iterable[Any]]

_ITEM, _ERROR, _END = "item", "error", "end"


class Job:
    """A submitted request: its output queue and its cancel flag."""

    def __init__(self, work: Work) -> None:
        self.work = work
        self.cancel = threading.Event()
        self._out: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._done = False

    def put(self, kind: str, value: Any = None) -> None:
        """Worker side: hand an item, an error or the end to the reader."""
        self._out.put((kind, value))

    def next(self, timeout: float) -> tuple[bool, Any]:
        """Reader side: (True, item), or (False, None) at the end; raises the job's error.

        Raises queue.Empty when nothing arrived within ``timeout`` seconds.
        """
        if self._done:
            return False, None
        kind, value = self._out.get(timeout=timeout)
        if kind == _ERROR:
            self._done = True
            raise value
        if kind == _END:
            self._done = True
            return False, None
        return True, value

    def items(self, poll: Callable[[], bool] = lambda: False, interval: float = 0.05) -> Iterator:
        """Every item until the end; ``poll`` returning True (client gone) cancels the job."""
        while True:
            try:
                more, value = self.next(interval)
            except queue.Empty:
                if poll():
                    self.cancel.set()
                    return
                continue
            if not more:
                return
            yield value


class Worker:
    """The thread that runs jobs for one model pair, first come, first served."""

    def __init__(self, name: str = "edgespec-worker") -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self.served = 0
        self.cancelled = 0
        self.rejected = 0  # jobs that raised a client error (a 4xx: bad token ids, ...)
        self.failed = 0  # jobs that raised anything else: a defect, or the engine's failure
        self.busy = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def queued(self) -> int:
        """Jobs waiting for their turn."""
        return self._queue.qsize()

    def submit(self, work: Work) -> Job:
        """Queue ``work``; it runs after every job submitted before it."""
        job = Job(work)
        self._queue.put(job)
        return job

    def stop(self, timeout: float | None = 5.0) -> None:
        """Finish the current job and stop (jobs still queued are not run)."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if job.cancel.is_set():
                self.cancelled += 1
                job.put(_END)
                continue
            self.busy = True
            items = iter(())
            try:
                items = iter(job.work(job.cancel.is_set))
                for item in items:
                    job.put(_ITEM, item)
                    if job.cancel.is_set():
                        break
                _close(items)  # here, on this thread, before the next job touches the model
                if job.cancel.is_set():
                    self.cancelled += 1
                else:
                    self.served += 1
                job.put(_END)
            except Exception as e:  # the request's failure, never the worker's
                _close(items)
                if from_exception(e).status < 500:
                    self.rejected += 1
                else:
                    self.failed += 1
                job.put(_ERROR, e)
            finally:
                self.busy = False


def _close(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
