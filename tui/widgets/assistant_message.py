"""One assistant reply, built token by token from TokenEvents and styled by kind."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from edgespec import DoneEvent, TokenEvent, TokenKind

from .tokens import TOKEN_CLASSES, component_classes

CURSOR = "▍"


@dataclass
class TokenPiece:
    """Text of one token and where it came from; rejected pieces remember when they arrived."""

    kind: TokenKind
    text: str
    arrived: float | None = None


class AssistantMessage(Widget):
    """The assistant's reply. Accepted, target and rejected tokens each get their style.

    Rejected draft tokens show struck through where they were rejected for
    ``linger_s`` seconds, then disappear; with ``show_rejected`` they stay.
    """

    COMPONENT_CLASSES = component_classes() | {"assistant--status"}

    show_rejected: reactive[bool] = reactive(False)

    def __init__(
        self,
        pieces: Iterable[TokenPiece] = (),
        *,
        linger_s: float = 1.5,
        show_rejected: bool = False,
        streaming: bool = True,
        status: str = "",
        clock: Callable[[], float] = time.monotonic,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.pieces: list[TokenPiece] = list(pieces)
        self.linger_s = linger_s
        self.streaming = streaming
        self.status = status
        self._clock = clock
        self.set_reactive(AssistantMessage.show_rejected, show_rejected)

    @property
    def text(self) -> str:
        """The reply as committed so far (rejected tokens excluded)."""
        return "".join(p.text for p in self.pieces if p.kind is not TokenKind.REJECTED)

    def add_token(self, event: TokenEvent) -> None:
        """Append one token of the stream."""
        arrived = self._clock() if event.kind is TokenKind.REJECTED else None
        self.pieces.append(TokenPiece(event.kind, event.text, arrived))
        if event.kind is TokenKind.REJECTED and 0 < self.linger_s < math.inf:
            self.set_timer(self.linger_s + 0.05, self.refresh)
        self.refresh(layout=True)

    def finish(self, done: DoneEvent | None = None, *, status: str = "") -> None:
        """End of the stream: add text the engine flushed at the end, show a status."""
        if done is not None:
            tail = done.text[len(self.text) :] if done.text.startswith(self.text) else ""
            if tail:
                self.pieces.append(TokenPiece(TokenKind.PLAIN, tail))
        self.streaming = False
        self.status = status
        self.refresh(layout=True)

    def is_visible(self, piece: TokenPiece) -> bool:
        """Whether a piece is drawn now (rejected ones only while lingering or when kept)."""
        if piece.kind is not TokenKind.REJECTED:
            return True
        if self.show_rejected:
            return True
        return piece.arrived is not None and self._clock() - piece.arrived < self.linger_s

    def rich_text(self) -> Text:
        """The styled reply as it is drawn now."""
        out = Text(no_wrap=False, end="")
        for piece in self.pieces:
            if piece.text and self.is_visible(piece):
                style = self.get_component_rich_style(TOKEN_CLASSES[piece.kind], partial=True)
                out.append(piece.text, style)
        status_style = self.get_component_rich_style("assistant--status", partial=True)
        if self.streaming:
            out.append(CURSOR, status_style)
        elif self.status:
            out.append(f" [{self.status}]", status_style)
        return out

    def render(self) -> Text:
        """Textual render hook."""
        return self.rich_text()

    def watch_show_rejected(self) -> None:
        """Redraw when the keep-rejected toggle changes."""
        self.refresh(layout=True)
