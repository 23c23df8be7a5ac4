"""Slots: the sequences a server generates on at once, and the queue in front of them.

Each slot is one sequence of the target's context (``--parallel N``: N slots) with
a thread, its own drafter, its own adaptive policy and its own KV cache; the
slots' decodes are merged into shared llama_decode calls by the backend
(edgespec.backend.parallel), so every running request advances round by round,
interleaved, and none waits for another to finish. With one slot, the session's
own model is used as it is (the serial server of earlier versions).

HTTP handler threads submit a job (a function of the slot's CompletionSession
that yields results) and read its output from a queue. When every slot is busy,
jobs wait in a bounded queue (a full one refuses: ``QueueFull``, a 429 with
Retry-After), code completions (/infill, FIM) before other requests, then in
arrival order. A free slot takes the job whose prompt shares the longest prefix
with what its KV cache holds, as llama-server's slot selection does, so an
editor's next completion lands on the cache its last one left. A job's
``cancel`` event, set by a handler whose client went away or by a newer /infill
from the same client, is polled between engine events; a job cancelled while
queued is skipped.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..prefix import common_prefix
from .errors import from_exception

if TYPE_CHECKING:
    from ..completion.session import CompletionSession

Work = Callable[["CompletionSession", Callable[[], bool]], Iterable[Any]]

_ITEM, _ERROR, _END = "item", "error", "end"
#: Jobs that may wait for a slot before the server answers 429.
DEFAULT_MAX_QUEUE = 32
#: Priorities: code completions (an editor waits on each keystroke) before the rest ...
PRIORITY_CODE, PRIORITY_OTHER = 0, 1
#: ... except a request that has waited this long (seconds): it goes by arrival order,
#: so that editors sending back to back cannot keep a chat waiting for ever.
PRIORITY_AGE_S = 2.0
#: A newer /infill replaces an older one from the same client only when their prompts
#: share this much of the older one: the same file, the editor moved on (two editors
#: on one machine send the same address and User-Agent, but other files).
REPLACE_SHARE = 0.5


class QueueFull(Exception):
    """Every slot is busy and the queue holds its maximum of jobs."""


class Job:
    """A submitted request: its output queue, its cancel flag, what to match slots by."""

    def __init__(
        self,
        work: Work,
        *,
        prompt: list[int] | None = None,
        priority: int = PRIORITY_OTHER,
        client: str | None = None,
        task: int = 0,
        slot: int = -1,
    ) -> None:
        self.work = work
        self.slot = slot  # the slot it must run on (-1: any)
        self.prompt = prompt or []
        self.priority = priority
        self.client = client  # who sent it, for replacing an editor's stale /infill
        self.task = task
        self.cancel = threading.Event()
        self.queued_at = time.monotonic()
        self.replaced = False  # cancelled by a newer request from the same client
        self._out: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._done = False

    def put(self, kind: str, value: Any = None) -> None:
        """Slot side: hand an item, an error or the end to the reader."""
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


@dataclass
class Slot:
    """One sequence and what it is doing."""

    id: int
    session: CompletionSession
    job: Job | None = None
    started: float = 0.0
    last_used: float = 0.0
    thread: threading.Thread | None = None

    def cached(self) -> list[int]:
        """The tokens this slot's KV cache holds."""
        return self.session.target.tokens

    def state(self) -> dict[str, Any]:
        """What /slots shows of it (llama-server's names where they exist)."""
        job = self.job
        cached = len(self.cached())
        return {
            "id": self.id,
            "id_task": job.task if job is not None else -1,
            "n_ctx": self.session.target.n_ctx,
            "is_processing": job is not None,
            "n_prompt_tokens": len(job.prompt) if job is not None else 0,
            "n_cached": cached,
            "n_decoded": max(0, cached - len(job.prompt)) if job is not None else 0,
            "drafter": self.session.drafter_name,
        }


class Scheduler:
    """The slots of one model pair, their threads, and the queue of waiting jobs."""

    def __init__(
        self, sessions: list[CompletionSession], *, max_queue: int = DEFAULT_MAX_QUEUE
    ) -> None:
        self.slots = [Slot(i, s) for i, s in enumerate(sessions)]
        self.max_queue = max_queue
        self._cv = threading.Condition()
        self._queue: list[Job] = []
        self._tasks = itertools.count(1)
        self._stopping = False
        self.served = 0
        self.cancelled = 0
        self.rejected = 0  # jobs that raised a client error (a 4xx: bad token ids, ...)
        self.failed = 0  # jobs that raised anything else: a defect, or the engine's failure
        self.refused = 0  # jobs refused with the queue full
        self.broken: Exception | None = None  # the model is gone (fail_all): refuse all
        for slot in self.slots:
            slot.thread = threading.Thread(
                target=self._loop, args=(slot,), name=f"edgespec-slot-{slot.id}", daemon=True
            )
            slot.thread.start()

    # ------------------------------------------------------------------ state

    @property
    def queued(self) -> int:
        """Jobs waiting for a slot."""
        with self._cv:
            return len(self._queue)

    @property
    def processing(self) -> int:
        """Slots running a job."""
        return sum(s.job is not None for s in self.slots)

    @property
    def busy(self) -> bool:
        """True while any slot runs a job."""
        return self.processing > 0

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about one job's time per queue-full."""
        return 1 if self.processing < len(self.slots) else 2

    # ------------------------------------------------------------------ jobs

    def submit(
        self,
        work: Work,
        *,
        prompt: list[int] | None = None,
        priority: int = PRIORITY_OTHER,
        client: str | None = None,
        slot: int = -1,
    ) -> Job:
        """Queue work for a slot; QueueFull when every slot is busy and the queue is full.

        slot: the slot it must run on (llama-server's id_slot), -1 for the best free one.

        A job with a ``client`` cancels that client's earlier jobs (queued or running)
        on the same text (their prompts share REPLACE_SHARE of the older one): an
        editor sends a new /infill on each keystroke and wants only the last.
        """
        with self._cv:
            if self.broken is not None:
                raise self.broken
            if self._stopping:
                raise QueueFull("the server is shutting down")
            free = any(s.job is None for s in self.slots)
            waiting = [j for j in self._queue if not j.cancel.is_set()]
            if not free and len(waiting) >= self.max_queue:
                self.refused += 1
                raise QueueFull(f"{len(self.slots)} slots busy and {len(waiting)} requests queued")
            job = Job(
                work,
                prompt=prompt,
                priority=priority,
                client=client,
                task=next(self._tasks),
                slot=slot,
            )
            if client is not None:
                running = [s.job for s in self.slots if s.job is not None]
                for old in [*self._queue, *running]:
                    if (
                        old.client == client
                        and not old.cancel.is_set()
                        and common_prefix(old.prompt, job.prompt) >= REPLACE_SHARE * len(old.prompt)
                    ):
                        old.replaced = True
                        old.cancel.set()
            self._queue.append(job)
            self._cv.notify_all()
        return job

    def stop(self, timeout: float | None = 5.0) -> None:
        """Finish the running jobs and stop (jobs still queued are not run)."""
        with self._cv:
            self._stopping = True
            for job in self._queue:
                job.cancel.set()
                job.put(_END)
            self._queue.clear()
            self._cv.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for slot in self.slots:
            if slot.thread is not None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                slot.thread.join(left)

    def fail_all(self, exc: Exception) -> None:
        """The model is gone for good (a lost RPC worker): every running and queued job
        ends with exc now, and every later submit raises it. A slot's thread that is
        parked in the lost decode never ends its job itself."""
        with self._cv:
            self.broken = exc
            for job in [*(s.job for s in self.slots if s.job is not None), *self._queue]:
                job.cancel.set()
                job.put(_ERROR, exc)
                self.failed += 1
            self._queue.clear()
            self._cv.notify_all()

    def _pick(self, slot: Slot) -> Job | None:
        """The job this free slot should take now (holding the lock), or None.

        The most urgent, oldest job goes first; it goes to the free slot whose cache
        shares the longest prefix with its prompt (then the least recently used), so a
        slot takes it only when it is that slot.
        """
        for job in [j for j in self._queue if j.cancel.is_set()]:
            self._queue.remove(job)
            self.cancelled += 1
            job.put(_END)
        free = [s for s in self.slots if s.job is None]
        # (a job pinned to a busy slot waits for it, and lets the others go by)
        ready = [j for j in self._queue if j.slot < 0 or self.slots[j.slot] in free]
        if not ready:
            return None
        now = time.monotonic()
        job = min(ready, key=lambda j: (_rank(j, now), j.task))
        if job.slot >= 0:
            best = self.slots[job.slot]
        else:
            best = max(free, key=lambda s: (common_prefix(s.cached(), job.prompt), -s.last_used))
        if best is not slot:
            self._cv.notify_all()  # (that slot's thread takes it)
            return None
        self._queue.remove(job)
        return job

    def _loop(self, slot: Slot) -> None:
        while True:
            with self._cv:
                job = None
                while job is None:
                    if self._stopping:
                        return
                    job = self._pick(slot)
                    if job is None:
                        self._cv.wait(0.5)
                slot.job, slot.started = job, time.monotonic()
            try:
                self._run(slot, job)
            finally:
                with self._cv:
                    slot.job, slot.last_used = None, time.monotonic()
                    self._cv.notify_all()

    def _run(self, slot: Slot, job: Job) -> None:
        working = getattr(slot.session.target, "working", None)  # a sequence view's
        urgent = job.priority == PRIORITY_CODE
        with working(urgent=urgent) if working is not None else contextlib.nullcontext():
            self._run_job(slot, job)

    def _run_job(self, slot: Slot, job: Job) -> None:
        items: Iterator[Any] = iter(())
        try:
            items = iter(job.work(slot.session, job.cancel.is_set))
            for item in items:
                job.put(_ITEM, item)
                if job.cancel.is_set():
                    break
            _close(items)  # here, on this thread, before the next job touches the slot
            with self._cv:
                if job.cancel.is_set():
                    self.cancelled += 1
                else:
                    self.served += 1
            job.put(_END)
        except Exception as e:  # the request's failure, never the slot's
            _close(items)
            with self._cv:
                if from_exception(e).status < 500:
                    self.rejected += 1
                else:
                    self.failed += 1
            job.put(_ERROR, e)

    def health(self) -> tuple[int, dict[str, Any]]:
        """/health's status code and body: 503 with the reason once the model is gone."""
        broken = self.broken
        states = [slot.state() for slot in self.slots]
        processing = sum(s["is_processing"] for s in states)
        body = {
            "status": "ok" if broken is None else "error",
            **({} if broken is None else {"error": str(broken)}),
            "busy": processing > 0,
            "queued": self.queued,
            "slots": len(self.slots),
            "slots_processing": processing,
            "slots_idle": len(self.slots) - processing,
            "slot_states": [
                {"id": s["id"], "state": "processing" if s["is_processing"] else "idle"}
                for s in states
            ],
            **self.counts(),
        }
        return (200 if broken is None else 503), body

    def counts(self) -> dict[str, int]:
        """Jobs by outcome, for /health and /metrics."""
        return {
            "served": self.served,
            "cancelled": self.cancelled,
            "rejected": self.rejected,
            "failed": self.failed,
            "refused": self.refused,
        }


def _rank(job: Job, now: float) -> int:
    """A job's priority in the queue: its own, or the first once it waited long."""
    return PRIORITY_CODE if now - job.queued_at >= PRIORITY_AGE_S else job.priority


def _close(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
