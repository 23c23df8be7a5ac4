"""Engine jobs for worker threads: load, switch drafter, stream a reply.

One lock keeps the engine to one job at a time (llama.cpp contexts are not
thread-safe). Results go back as ``tui.messages`` through ``post``, which must
be thread-safe (a Textual ``post_message``). Nothing here raises: every
failure becomes a message a person can read.

With the target on RPC workers (``watch_rpc``), a lost worker parks the thread
decoding through it for good (edgespec.backend.stay_up_on_worker_loss): each job
therefore runs on a daemon thread of its own, which the caller (a Textual worker,
whose thread pool is joined when the app exits) waits on only until the job ends
or the loss is known. After a loss the runner refuses every job: the parked
thread keeps the lock and the target, and only a new process can load it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual.message import Message

from edgespec import EdgespecError

from .messages import (
    EngineFailed,
    EngineLoaded,
    PlainCallMeasured,
    ReplyEnded,
    ReplyEvent,
    WorkerLost,
)
from .prompt import ChatMessage
from .session import ChatEngine, EngineFactory, GenerationSettings


def error_text(e: BaseException) -> str:
    """An edgespec error's own message, or the exception type and text for anything else."""
    return str(e) if isinstance(e, EdgespecError) else f"internal error: {type(e).__name__}: {e}"


class EngineRunner:
    """Owns the engine once loaded; each method runs one job on the calling (worker) thread."""

    def __init__(
        self, factory: EngineFactory, post: Callable[[Message], Any], *, watch_rpc: bool = False
    ) -> None:
        self.factory = factory
        self.post = post
        self.engine: ChatEngine | None = None
        self.lost: str | None = None  # the lost worker's one-line message, once lost
        self._lock = threading.Lock()
        self._lost_event = threading.Event()
        if watch_rpc:
            from edgespec import on_rpc_worker_lost, stay_up_on_worker_loss

            stay_up_on_worker_loss()
            on_rpc_worker_lost(self._worker_lost)

    def _worker_lost(self, message: str) -> None:
        # called once, from the thread that is about to be parked for good
        self.lost = message
        self._lost_event.set()
        self.post(WorkerLost(message))

    def run_job(self, job: Callable[..., None], *args: Any) -> None:
        """Run job(*args) on a daemon thread; return when it ends or a worker is lost
        (its thread may then never end: see the module)."""
        if self.lost is not None:
            return
        thread = threading.Thread(target=job, args=args, daemon=True, name="edgespec-engine")
        thread.start()
        while thread.is_alive() and not self._lost_event.wait(0.05):
            pass

    def load(self) -> None:
        """Load the models, then time one plain target call for the speed-up estimate."""
        with self._lock:
            try:
                engine = self.factory()
                info = engine.info
            except Exception as e:  # never a traceback: the app shows it
                self.post(EngineFailed(error_text(e)))
                return
            self.engine = engine
            self.post(EngineLoaded(info))
            try:
                seconds = engine.measure_plain_call()
            except Exception:  # only a nicety: the verify-cost estimate remains
                seconds = None
        if seconds:
            self.post(PlainCallMeasured(seconds))

    def switch_drafter(self, choice: str) -> None:
        """Change the drafter (may load a model)."""
        with self._lock:
            if self.engine is None:
                return
            try:
                self.engine.set_drafter(choice)
                info = self.engine.info
            except Exception as e:
                self.post(EngineFailed(f"cannot use drafter {choice}: {error_text(e)}"))
                return
        self.post(EngineLoaded(info))

    def reply(
        self,
        reply_id: int,
        messages: list[ChatMessage],
        settings: GenerationSettings,
        stop: threading.Event,
    ) -> None:
        """Stream one reply as ReplyEvents, then a ReplyEnded.

        ``stop`` is checked between events; when it is set the engine's generator
        is closed, and the next turn's prefix reuse brings both caches back in line.
        """
        stopped = False
        with self._lock:
            if self.engine is None:
                self.post(ReplyEnded(reply_id, error="no model loaded"))
                return
            try:
                events = self.engine.stream_reply(messages, settings)
                try:
                    for ev in events:
                        if stop.is_set():
                            stopped = True
                            break
                        self.post(ReplyEvent(reply_id, ev))
                finally:
                    close = getattr(events, "close", None)
                    if close is not None:
                        close()
            except Exception as e:
                self.post(ReplyEnded(reply_id, error=error_text(e)))
                return
        self.post(ReplyEnded(reply_id, stopped=stopped))
