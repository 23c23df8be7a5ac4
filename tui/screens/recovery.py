"""The chat screen after a lost RPC worker: keep the conversation, wait, offer a retry.

A lost worker parks the thread that decoded through it and takes the target with it
(tui.runner); nothing in this process can load it again. So the screen drops the
half-streamed reply, keeps the conversation saved up to the person's last message,
probes the workers (their HELLO) with backoff, and once all of them answer offers
Ctrl+R: the app ends and ``edgespec chat`` starts itself again with ``--resume``,
which reopens the conversation and generates the missing reply.
A mixin of ChatScreen, which provides the state it reads.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading

from textual import work

from edgespec import unanswering_rpc_workers

from ..messages import WorkerLost, WorkersProbed
from ..runner import EngineRunner
from ..store import Conversation
from ..widgets.assistant_message import AssistantMessage
from ..widgets.prompt_input import PromptInput
from ..widgets.stats_panel import StatsPanel

# probing the workers: the first wait, doubled after each miss up to the last (the same
# backoff as ``edgespec serve --rpc-retry``'s supervisor)
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 2.0


class WorkerRecovery:
    """What the chat screen does when an RPC worker is lost, and Ctrl+R after it."""

    conversation: Conversation
    generating: bool
    rpc: tuple[str, ...]
    runner: EngineRunner
    _reply: AssistantMessage | None
    _reply_id: int
    _stop_probing: threading.Event
    workers_back: bool = False

    def on_worker_lost(self, msg: WorkerLost) -> None:
        """Drop the reply being streamed (the retry generates it again), keep the turn."""
        self.app.worker_lost = True
        if self.generating:
            self._reply_id += 1  # its late events, if any, are ignored
            self.generating = False
        if self._reply is not None:
            self._reply.remove()
            self._reply = None
        self._save()
        self.sub_title = "RPC worker lost"
        self.query_one(StatsPanel).show(status="worker lost")
        self.query_one(
            PromptInput
        ).placeholder = "An RPC worker was lost: waiting for it (Ctrl+R retries once it answers)"
        self.notify(
            f"{msg.error}. The conversation is saved; waiting for the workers to answer.",
            title="Worker lost",
            severity="error",
            timeout=15,
        )
        self._probe_workers()

    @work(thread=True, group="probe", exit_on_error=False)
    def _probe_workers(self) -> None:
        delay, attempt = BACKOFF_FIRST_S, 0
        while not self._stop_probing.is_set():
            attempt += 1
            missing = tuple(ep for ep, _ in unanswering_rpc_workers(self.rpc))
            self.post_message(WorkersProbed(attempt, missing))
            if not missing:
                return
            self._stop_probing.wait(delay)
            delay = min(BACKOFF_MAX_S, delay * 2)

    def on_workers_probed(self, msg: WorkersProbed) -> None:
        """Say who is still missing; when none is, offer the retry."""
        panel = self.query_one(StatsPanel)
        if msg.missing:
            panel.show(status=f"waiting for {', '.join(msg.missing)} (attempt {msg.attempt})")
            return
        self.workers_back = True
        what = "and retries the reply" if self.pending_reply() else "and reopens this chat"
        panel.show(status="workers back: Ctrl+R")
        self.notify(
            f"The workers answer again: Ctrl+R loads the target onto them {what}.",
            title="Workers back",
            timeout=30,
        )

    def pending_reply(self) -> bool:
        """The conversation ends with the person's message: a reply is owed."""
        return bool(self.conversation.messages) and self.conversation.messages[-1].role == "user"

    def action_retry(self) -> None:
        """Ctrl+R after a loss: start again on the workers, resuming this conversation."""
        if self.runner.lost is None:
            self.notify("Ctrl+R retries after a lost RPC worker; none was lost.")
            return
        if not self.workers_back:
            self.notify("Still waiting for the workers to answer.", severity="warning")
            return
        self._save()
        self.app.restart_history = self._save_history()
        saved = bool(self.conversation.messages)
        self.app.restart_with = self.conversation.id if saved else ""
        self.app.exit(0)

    def _save_history(self) -> str | None:
        # The lookup history of this session's replies, for the restarted chat to read
        # (the parked thread does not hold its lock: that is taken only around lookups).
        history = getattr(self.runner.engine, "history", None)
        if history is None or not len(history):
            return None
        fd, path = tempfile.mkstemp(prefix="edgespec-chat-history-", suffix=".json")
        os.close(fd)
        try:
            history.save(path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        return path
