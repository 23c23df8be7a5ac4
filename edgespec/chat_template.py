"""Render a conversation with a model's Jinja chat template, as HF transformers and llama.cpp do.

A sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``; the template
sees ``messages``, ``add_generation_prompt``, ``bos_token`` and ``eos_token`` and
may call ``raise_exception`` and ``strftime_now``. A model without a template
gets ChatML, llama.cpp server's fallback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import InvalidParameterError

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
