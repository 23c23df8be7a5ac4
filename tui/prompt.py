"""Turning a conversation into prompt text: the target's chat template, or plain completion.

Chat templates are rendered with jinja2 the way Hugging Face transformers and
llama.cpp do: a sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``,
variables ``messages``, ``add_generation_prompt``, ``bos_token`` and ``eos_token``,
and the helpers ``raise_exception`` and ``strftime_now``.

A model without a chat template (a base model) gets *completion mode*: the
conversation is one growing document that the model continues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from edgespec.errors import EdgespecError


class ChatTemplateError(EdgespecError):
    """The model's chat template failed to render this conversation."""


@dataclass(frozen=True)
class ChatMessage:
    """One turn of a conversation: role is "system", "user" or "assistant"."""

    role: str
    content: str


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@dataclass(frozen=True)
class PromptFormat:
    """How a conversation becomes text for one target model.

    Args:
        template: the Jinja chat template from the model's GGUF metadata, or None
            for a base model (completion mode).
        bos_token: text of the model's BOS token (templates often start with it).
        eos_token: text of the model's EOS token.
    """

    template: str | None
    bos_token: str = ""
    eos_token: str = ""

    @property
    def chat_mode(self) -> bool:
        """True when the model has a chat template; False means completion mode."""
        return self.template is not None

    @cached_property
    def _compiled(self) -> jinja2.Template:
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True
        )
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            return env.from_string(self.template or "")
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the model's chat template does not parse: {e}") from None

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for messages, ending where the assistant's reply begins."""
        if not self.chat_mode:
            return completion_text(messages)
        try:
            return self._compiled.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template failed: {e}") from None

    def starts_with_bos(self, text: str) -> bool:
        """True when rendered text already begins with the BOS token's text."""
        return bool(self.bos_token) and text.startswith(self.bos_token)


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
