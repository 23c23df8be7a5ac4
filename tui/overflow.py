"""A chat longer than the context: the oldest turns leave the prompt, and the app says so.

With ``--context-overflow truncate-middle`` (chat's default) each reply's prompt is
the conversation without its oldest turns, as few as let it fit with room for the
reply (edgespec's ``fit_messages``, the server's rule: the system prompt and the
last message stay). The conversation itself, on screen and saved, stays whole;
the reply's events start with a ``ContextTrimmed`` and the chat log shows a note.
With ``error`` a conversation past the context fails as before (a notification,
the message back in the box).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from edgespec import fit_messages, reply_reserve

from .prompt import ChatMessage

TRUNCATE_MIDDLE = "truncate-middle"


@dataclass(frozen=True)
class ContextTrimmed:
    """A reply's first event when its prompt left out the oldest messages.

    Attributes:
        messages: how many of the conversation's oldest messages the prompt left out.
        tokens: how many prompt tokens that saved.
        n_ctx: the context they did not fit.
    """

    messages: int
    tokens: int
    n_ctx: int

    def note(self) -> str:
        """The line the chat log shows."""
        what = "message" if self.messages == 1 else f"{self.messages} messages"
        return (
            f"⋯ The oldest {what} ({self.tokens:,} tokens) no longer fit the "
            f"{self.n_ctx:,}-token context: the model no longer sees them."
        )


def fit_conversation(
    messages: Sequence[ChatMessage],
    measure: Callable[[list[ChatMessage]], list[int]],
    *,
    mode: str,
    max_tokens: int,
    n_ctx: int,
) -> tuple[list[int], ContextTrimmed | None]:
    """The prompt for the reply to messages, and what it left out (None: nothing).

    mode "error": the whole conversation (the engine refuses it when it is too long);
    "truncate-middle": the oldest turns dropped until it fits with room for
    max_tokens (edgespec's ContextFullError when even the last message does not).
    """
    if mode != TRUNCATE_MIDDLE:
        return measure(list(messages)), None
    fit = fit_messages(
        messages,
        role=lambda m: m.role,
        measure=measure,
        n_ctx=n_ctx,
        reserve=reply_reserve(max_tokens, n_ctx),
    )
    if not fit.dropped_messages:
        return fit.tokens, None
    return fit.tokens, ContextTrimmed(fit.dropped_messages, fit.dropped_tokens, n_ctx)


def noted(trimmed: ContextTrimmed, events: Iterator[Any]) -> Iterator[Any]:
    """trimmed, then events; closing this closes events."""
    try:
        yield trimmed
        yield from events
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
