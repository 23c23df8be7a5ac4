"""Messages the engine workers post to the UI: small dataclasses, safe to post from threads."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from edgespec import Event

from .session import EngineInfo


@dataclass
class EngineLoaded(Message):
    """The model pair is loaded (or the drafter changed): what to show about it."""

    info: EngineInfo


@dataclass
class PlainCallMeasured(Message):
    """Seconds one plain target call took (for the estimated speed-up)."""

    seconds: float


@dataclass
class EngineFailed(Message):
    """Loading the models, or changing the drafter, failed; the message is for a person."""

    error: str


@dataclass
class ReplyEvent(Message):
    """One engine event of reply number reply_id."""

    reply_id: int
    event: Event


@dataclass
class ReplyEnded(Message):
    """The reply's worker finished: normally, stopped by the user, or with an error."""

    reply_id: int
    stopped: bool = False
    error: str | None = None


@dataclass
class WorkerLost(Message):
    """An RPC worker holding the target's layers was lost: the reply streaming, if any,
    ends here, and the target cannot be used again in this process."""

    error: str


@dataclass
class WorkersProbed(Message):
    """After a loss: the workers that do not answer yet (none: all are back)."""

    attempt: int
    missing: tuple[str, ...]
