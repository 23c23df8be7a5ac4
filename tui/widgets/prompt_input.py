"""The message box: Enter sends, Shift+Enter (or Ctrl+J) starts a new line."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = ("shift+enter", "ctrl+j", "alt+enter")


class PromptInput(TextArea, inherit_bindings=False):
    """A multi-line input that posts Submitted on Enter."""

    # TextArea's keys, except F6 (select line), which the chat screen uses
    BINDINGS = [b for b in TextArea.BINDINGS if not (isinstance(b, Binding) and b.key == "f6")]

    @dataclass
    class Submitted(Message):
        """The person pressed Enter with this text in the box."""

        input: PromptInput
        text: str

    def __init__(self, *, placeholder: str = "", id: str | None = None) -> None:
        super().__init__(
            soft_wrap=True, tab_behavior="focus", show_line_numbers=False, id=id, compact=True
        )
        self.placeholder = placeholder

    def on_mount(self) -> None:
        """No blinking cursor in headless runs (tests, snapshots): screens must be stable."""
        if self.app.is_headless:
            self.cursor_blink = False

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.action_submit()
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)

    def action_submit(self) -> None:
        """Post the text (the screen decides whether to send it and clear the box)."""
        if self.text.strip():
            self.post_message(self.Submitted(self, self.text))
