"""The scrolling conversation: user messages and streaming assistant replies."""

from __future__ import annotations

from collections.abc import Iterable

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from edgespec import TokenKind

from ..store import StoredMessage
from .assistant_message import AssistantMessage, TokenPiece

_KINDS = {k.value for k in TokenKind}


class UserMessage(Static):
    """What the person typed (shown verbatim, no markup)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, markup=False)
        self.text = text


class ModeBanner(Static):
    """One line saying whether this is a chat (template) or a plain completion."""


class ContextNote(Static):
    """A line saying that the oldest turns no longer fit the context (tui.overflow)."""


class ChatLog(VerticalScroll, can_focus=False):
    """The conversation, kept scrolled to the newest line while it streams."""

    def follow(self) -> None:
        """Content grew: stay at the bottom if we were there (a person scrolled up stays put)."""
        if self.max_scroll_y - self.scroll_y <= 1:
            self.call_after_refresh(self.scroll_end, animate=False)

    def set_banner(self, text: str, *, completion: bool) -> None:
        """Show the mode line at the top of the conversation."""
        banners = self.query(ModeBanner)
        banner = banners.first() if banners else None
        if banner is None:
            banner = ModeBanner(text)
            self.mount(banner, before=0) if self.children else self.mount(banner)
        else:
            banner.update(text)
        banner.set_class(completion, "-completion")

    def add_user(self, text: str) -> UserMessage:
        """Append a user message."""
        msg = UserMessage(text)
        self.mount(msg)
        self.follow()
        return msg

    def add_note(self, text: str, *, before: Widget | None = None) -> ContextNote:
        """Add a context note before a widget of the log (None: at the end)."""
        note = ContextNote(text, markup=False)
        if before is not None and before.parent is self:
            self.mount(note, before=before)
        else:
            self.mount(note)
        self.follow()
        return note

    def add_assistant(
        self,
        pieces: Iterable[TokenPiece] = (),
        *,
        linger_s: float,
        show_rejected: bool,
        streaming: bool = True,
        status: str = "",
    ) -> AssistantMessage:
        """Append an assistant reply (empty and streaming, or rebuilt from saved pieces)."""
        msg = AssistantMessage(
            pieces,
            linger_s=linger_s,
            show_rejected=show_rejected,
            streaming=streaming,
            status=status,
        )
        self.mount(msg)
        self.follow()
        return msg

    def show_messages(
        self, messages: Iterable[StoredMessage], *, linger_s: float, show_rejected: bool
    ) -> None:
        """Replace the conversation with saved messages (replies keep their token colours)."""
        self.clear_messages()
        for m in messages:
            if m.role == "user":
                self.add_user(m.content)
            elif m.role == "assistant":
                segments = m.segments or [(TokenKind.PLAIN.value, m.content)]
                self.add_assistant(
                    [TokenPiece(TokenKind(k), t) for k, t in segments if k in _KINDS],
                    linger_s=linger_s,
                    show_rejected=show_rejected,
                    streaming=False,
                    status="stopped" if m.stopped else "",
                )

    def clear_messages(self) -> None:
        """Remove every message (the mode banner stays)."""
        for child in list(self.children):
            if not isinstance(child, ModeBanner):
                child.remove()
