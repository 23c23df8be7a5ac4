"""Token kinds as styled text: the component classes shared by the reply and the legend."""

from __future__ import annotations

from edgespec import TokenKind

#: Component class of each token kind; the colours live in edgespec.tcss.
TOKEN_CLASSES: dict[TokenKind, str] = {kind: f"token--{kind.value}" for kind in TokenKind}


def component_classes() -> set[str]:
    """The set to use as a widget's COMPONENT_CLASSES."""
    return set(TOKEN_CLASSES.values())
