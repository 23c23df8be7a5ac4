"""One line explaining the token colours."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from edgespec import TokenKind

from .tokens import TOKEN_CLASSES, component_classes

ENTRIES = (
    (TokenKind.ACCEPTED, "accepted draft"),
    (TokenKind.CORRECTION, "target: correction"),
    (TokenKind.BONUS, "bonus"),
    (TokenKind.PLAIN, "plain"),
    (TokenKind.GRAMMAR, "grammar draft"),
    (TokenKind.FORCED, "forced"),
    (TokenKind.REJECTED, "rejected draft"),
)


class Legend(Widget):
    """Shows each token kind in its own style (the same component classes as a reply)."""

    COMPONENT_CLASSES = component_classes()

    def render(self) -> Text:
        """Textual render hook."""
        out = Text(no_wrap=True, overflow="ellipsis", end="")
        for i, (kind, label) in enumerate(ENTRIES):
            if i:
                out.append(" · ")
            out.append(label, self.get_component_rich_style(TOKEN_CLASSES[kind], partial=True))
        return out
