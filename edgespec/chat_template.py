"""Render a conversation with a model's Jinja chat template, as HF transformers and llama.cpp do.

A sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``, the
environment transformers builds (``transformers.utils.chat_template_utils``):

- ``{% break %}`` and ``{% continue %}`` (jinja2's ``loopcontrols`` extension);
- HF's ``{% generation %}...{% endgeneration %}``, which marks the assistant's
  text for training masks: here it renders its body and nothing more;
- ``raise_exception(message)`` and ``strftime_now(format)``;
- ``tojson`` as transformers and llama.cpp define it, ``json.dumps`` taking
  ``ensure_ascii`` (default false), ``indent``, ``separators`` and ``sort_keys``,
  not jinja2's HTML-escaping one.

The template sees ``messages``, ``add_generation_prompt``, ``bos_token`` and
``eos_token``, and, as llama.cpp gives every template, ``datetime`` ("Dec 01
2026") and ``date_string`` ("01 Dec 2026"). ``tools`` and ``documents`` stay
undefined, as llama.cpp leaves them without tools. A template that needs a
variable edgespec does not give it (firefunction-v2's ``functions``, its tool
definitions) fails with a ChatTemplateError naming it.

System role: a template that refuses a system message (raises on it, as
gemma-2's does) or drops it gets it folded into the user's turn, as llama.cpp
does. Whether it does is probed once per template, by rendering a system and a
user message and looking for the system text in the output. Where it does not,
each system message's content goes in front of the next user message's, joined
by a newline, as llama.cpp joins them; one with no user message after it (next
to an assistant message, or last) becomes a user message of its own. llama.cpp
(common/chat.cpp) folds only a leading system message, into whatever message
follows, and drops one left alone; this keeps every system text, as minja's
polyfill did.

A model without a template gets ChatML, llama.cpp server's fallback.

``ChatFormat`` is one model's template with the texts of its BOS and EOS tokens;
the server and the terminal app both turn conversations into prompts with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.ext
from jinja2 import nodes
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

# what a template may need that edgespec does not give it, and what it is
_INPUT_NAMES = {
    "functions": "the tool definitions, as JSON",
    "tools": "the tool definitions",
    "custom_tools": "the tool definitions",
    "documents": "the documents to ground the answer in",
}
_UNDEFINED = re.compile(r"'(\w+)' is undefined")
_SYSTEM_PROBE = "edgespec-system-probe-5b1e"


class ChatTemplateError(InvalidParameterError):
    """The template does not parse, or refused (or failed on) this conversation."""


class _Refused(ChatTemplateError):
    """The template's own raise_exception: it refused the conversation."""


class _Generation(jinja2.ext.Extension):
    """HF's ``{% generation %}`` block: renders its body (transformers tracks it for masks)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        # a call block, as transformers parses it, so the body's scope is the same
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: str) -> None:
    raise _Refused(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _Generation],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"the chat template does not parse: {e}") from None


def _render(
    compiled: jinja2.Template,
    messages: list[dict[str, Any]],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    now = datetime.now()
    extra = {} if tools is None else {"tools": tools}  # without tools: undefined, as llama.cpp
    try:
        return compiled.render(
            **extra,
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            datetime=now.strftime("%b %d %Y"),
            date_string=now.strftime("%d %b %Y"),
        )
    except ChatTemplateError:
        raise
    except jinja2.UndefinedError as e:
        missing = _UNDEFINED.fullmatch(str(e))
        if missing is None:
            raise ChatTemplateError(f"the chat template failed on this conversation: {e}") from None
        name = missing[1]
        what = f" ({_INPUT_NAMES[name]})" if name in _INPUT_NAMES else ""
        raise ChatTemplateError(
            f"the chat template needs {name!r}{what}, which edgespec does not give it"
        ) from None
    except Exception as e:  # the template is code from a file: any failure is the input's
        raise ChatTemplateError(f"the chat template failed on this conversation: {e}") from None


@lru_cache(maxsize=8)
def supports_system_role(template: str) -> bool:
    """Whether ``template`` renders a system message's text (llama.cpp's probe).

    False where it refuses [system, user] (raise_exception) or its output lacks
    the system text; True where it fails on them otherwise (folding would not help,
    and the conversation's own render says why).
    """
    probe = [
        {"role": "system", "content": _SYSTEM_PROBE},
        {"role": "user", "content": "User message"},
    ]
    try:
        text = _render(
            _compile(template), probe, bos_token="", eos_token="", add_generation_prompt=True
        )
    except _Refused:
        return False
    except ChatTemplateError:
        return True
    return _SYSTEM_PROBE in text


def fold_system_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without system ones, for a template that refuses them.

    Each system message's content goes in front of the next user message's, a
    newline between them (llama.cpp's fold); where an assistant message or the
    end comes first, it becomes a user message of its own.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        m = dict(message)
        if m.get("role") == "system":
            pending.append(str(m.get("content") or ""))
            continue
        if pending:
            if m.get("role") == "user":
                content = m.get("content") or ""
                m["content"] = "\n".join([*pending, content] if content else pending)
            else:
                out.append({"role": "user", "content": "\n".join(pending)})
            pending = []
        out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """The prompt text for ``messages`` (dicts with "role" and "content", and an
    assistant's ``tool_calls`` or a tool's result where the template renders them);
    ``tools``: OpenAI tool definitions, given to the template as ``tools``.

    System messages are folded into user ones where the template refuses them
    (see the module's docstring). Raises ChatTemplateError when the template
    fails on them (e.g. roles that do not alternate, which many templates refuse
    with raise_exception), or needs a variable edgespec does not give it.
    """
    compiled = _compile(template)
    msgs = [dict(m) for m in messages]
    if any(m.get("role") == "system" for m in msgs) and not supports_system_role(template):
        msgs = fold_system_messages(msgs)
    return _render(
        compiled,
        msgs,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
    )


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
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
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
            tools=tools,
        )
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            return text[len(self.bos_token) :]
        return text
