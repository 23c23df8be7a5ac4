"""A modal list of saved conversations; choosing one reopens it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from ..store import Conversation


def describe(conv: Conversation) -> str:
    """One line: when, how many messages, the title, the target model."""
    when = conv.updated.replace("T", " ")[:16]
    model = f"  [{conv.target}]" if conv.target else ""
    return f"{when}  {len(conv.messages):>3} msgs  {conv.title or conv.default_title()}{model}"


class ConversationsScreen(ModalScreen[str | None]):
    """Pick a saved conversation (Enter) or go back (Escape). Dismisses with its id or None."""

    BINDINGS = [Binding("escape", "dismiss(None)", "Back")]

    def __init__(self, conversations: list[Conversation]) -> None:
        super().__init__()
        self.conversations = conversations

    def compose(self) -> ComposeResult:
        """A title and the list (or a note that there is nothing saved yet)."""
        with Vertical(id="conversations-box"):
            yield Label(
                "Saved conversations (Enter opens, Esc goes back)", id="conversations-title"
            )
            if self.conversations:
                yield OptionList(
                    *(Option(describe(c), id=c.id) for c in self.conversations),
                    id="conversations-list",
                )
            else:
                yield Label("Nothing saved yet.", id="conversations-empty")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Reopen the chosen conversation."""
        self.dismiss(event.option.id)
