"""Render a conversation with a model's Jinja chat template, as HF transformers and llama.cpp do.

A sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``; the template
sees ``messages``, ``add_generation_prompt``, ``bos_token`` and ``eos_token`` and
may call ``raise_exception`` and ``strftime_now``. A model without a template
gets ChatML, llama.cpp server's fallback.

``ChatFormat`` is one model's template with the texts of its BOS and EOS tokens;
the server and the terminal app both turn conversations into prompts with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import InvalidParameterError

if TYPE_CHECKING:
    from .backend import LlamaModel

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(InvalidParameterError):
    """The template does not parse, or refused (or failed on) this conversation."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"the chat template does not parse: {e}") from None


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, str]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for ``messages`` (dicts with "role" and "content").

    Raises ChatTemplateError when the template fails on them (e.g. roles that do
    not alternate, which many templates refuse with raise_exception).
    """
    compiled = _compile(template)
    try:
        return compiled.render(
            messages=[dict(m) for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except ChatTemplateError:
        raise
    except Exception as e:  # the template is code from a file: any failure is the input's
        raise ChatTemplateError(f"the chat template failed on this conversation: {e}") from None


@dataclass(frozen=True)
class ChatFormat:
    """A model's chat template and what it sees of the model's special tokens.

    Attributes:
        template: the Jinja chat template.
        bos_token: the BOS token's text ("" when the model has none).
        eos_token: the EOS token's text ("" when the model has none).
        add_bos: whether the model's tokenizer adds BOS itself.
    """

    template: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False

    @classmethod
    def of(cls, model: LlamaModel, template: str) -> ChatFormat:
        """``template`` (the model's own, or a fallback) with the model's special tokens.

        Their texts are the tokens' pieces with specials rendered, as llama.cpp gives
        them to a template.
        """
        info = model.vocab_info()

        def text(token: int) -> str:
            if token < 0:  # llama.cpp's LLAMA_TOKEN_NULL: the model has no such token
                return ""
            return model.token_bytes(token, special=True).decode("utf-8", "replace")

        return cls(template, text(info.bos), text(info.eos), info.add_bos)

    def render(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The prompt text for messages, to tokenize with BOS added and specials parsed.

        Many templates start with ``bos_token`` while the tokenizer adds BOS as well;
        as llama.cpp does, a leading BOS text is dropped where the tokenizer adds one,
        so the prompt starts with one BOS either way.
        """
        text = render_chat(
            self.template,
            messages,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            add_generation_prompt=add_generation_prompt,
        )
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            return text[len(self.bos_token) :]
        return text
