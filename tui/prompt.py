"""Turning a conversation into prompt text: the target's chat template, or plain completion.

Chat templates are rendered by edgespec's one renderer (``edgespec.chat_template``);
what is the app's own is the conversation type and *completion mode*: a model
without a chat template (a base model) sees the conversation as one growing
document that it continues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec import ChatFormat


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation: role is "system", "user" or "assistant"."""

    role: str
    content: str


@dataclass(frozen=True)
class PromptFormat:
    """How a conversation becomes text for one target model.

    Args:
        chat: the model's chat template and special-token texts, or None for a
            base model (completion mode).
    """

    chat: ChatFormat | None = None

    @property
    def chat_mode(self) -> bool:
        """True when the model has a chat template; False means completion mode."""
        return self.chat is not None

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for messages, ending where the assistant's reply begins.

        Chat text is meant to be tokenized with BOS added and special tokens parsed
        (see ChatFormat.render); completion text with BOS added and no specials.
        Raises edgespec's ChatTemplateError when the template refuses the messages.
        """
        if self.chat is None:
            return completion_text(messages)
        return self.chat.render([{"role": m.role, "content": m.content} for m in messages])


def completion_text(messages: Sequence[ChatMessage]) -> str:
    """Completion mode: one document, the user's texts and the model's continuations.

    The model continues the user's text directly; a new user text starts on a new
    line unless the document already ends in whitespace. System messages are ignored.
    """
    out = ""
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "user" and out and not out[-1].isspace():
            out += "\n"
        out += m.content
    return out
