"""The grammars that make a reply a valid tool call, in the model's own call format.

Each grammar is Lark (llguidance's dialect): the format's own text (``<tool_call>``,
``[TOOL_CALLS]``, the ``{"name": ..., "arguments": ...}`` wrapper) as literals, and
each tool's ``parameters`` embedded as is with ``%json``, so that its ``$defs`` and
``$ref`` resolve inside it (what pydantic writes for any nested model or enum).

- ``required`` or a named function: the reply is the call(s), nothing else.
- ``auto`` with a native format (Hermes, Mistral, Llama 3): a lazy grammar, as
  llama.cpp's: free text until the model writes the format's trigger (``<tool_call>``,
  ``[TOOL_CALLS]``, a reply opening with ``{`` or ``<|python_tag|>``), then the call
  is constrained. The free text is any text: the mask before the trigger admits every
  token except control tokens and bytes that cannot continue UTF-8 text.
- ``auto`` in the generic form: a call or ``{"response": "..."}``.

A trigger that is a control token of the model's vocabulary (Qwen's ``<tool_call>``,
Mistral's ``[TOOL_CALLS]``, Llama 3's ``<|python_tag|>``) is named by its id, which
``special_tokens`` finds; otherwise it is text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from ..tools import Tool, ToolError, ToolRequest
from ..tools.formats import GENERIC, HERMES, LLAMA3, MISTRAL
from . import Grammar, GrammarError
from .schema import SchemaRefused, prepare

__all__ = ["MARKERS", "check_parameters", "special_tokens", "tool_grammar"]

#: each native format's markers, which a vocabulary may hold as control tokens
MARKERS: dict[str, tuple[str, ...]] = {
    HERMES: ("<tool_call>", "</tool_call>"),
    MISTRAL: ("[TOOL_CALLS]",),
    LLAMA3: ("<|python_tag|>",),
    GENERIC: (),
}

# whitespace between the wrapper's parts (bounded: a small model cannot loop in it)
_COMMON = r"""
WS: /[ \t\r\n]{1,16}/
TEXT: /(.|\n)*/
STRING: /"(\\([\"\\\/bfnrt]|u[a-fA-F0-9]{4})|[^\"\\\x00-\x1F\x7F])*"/
"""


_COMMA = 'WS? "," WS?'
_specials: dict[tuple[str, str], dict[str, int]] = {}  # special_tokens' answers


class _Vocabulary(Protocol):
    """What ``special_tokens`` needs of a model (edgespec.backend.LlamaModel)."""

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]: ...

    def grammar(self, spec: str) -> Any: ...


def special_tokens(model: _Vocabulary, fmt: str) -> dict[str, int]:
    """The format's markers that model's vocabulary holds as a control token: text ->
    id. Such a token is not its text to the grammar engine, so the grammar names it
    by id; a marker missing here is matched as text. Kept per model file and format."""
    key = (str(getattr(model, "path", "")), fmt)
    if key[0] and key in _specials:
        return dict(_specials[key])
    out: dict[str, int] = {}
    for text in MARKERS.get(fmt, ()):
        ids = model.tokenize(text, add_special=False, parse_special=True)
        if len(ids) != 1:
            continue
        matcher = model.grammar(Grammar.from_lark(f"start: {_lit(text)}").spec)
        try:
            if not bool(np.asarray(matcher.allowed())[ids[0]]):
                out[text] = ids[0]  # the text's grammar does not admit the token
        finally:
            matcher.close()
    if key[0]:
        _specials[key] = dict(out)
    return out


def check_parameters(tool: Tool, where: str) -> None:
    """ToolError naming ``where.function.parameters`` when a tool's parameters cannot
    constrain a call (strict tools: also a keyword the grammar cannot enforce)."""
    try:
        Grammar.from_json_schema(tool.parameters, strict=tool.strict)
    except GrammarError as exc:
        raise ToolError(f"'{where}.function.parameters': {exc}") from None


def tool_grammar(
    request: ToolRequest, fmt: str, specials: Mapping[str, int] | None = None
) -> Grammar:
    """The grammar of a reply to request in fmt (see the module's docstring).

    specials: the format's markers the model holds as control tokens
    (``special_tokens``). ToolError names a tool whose parameters do not compile.
    """
    g = _Builder(request, fmt, dict(specials or {}))
    try:
        return Grammar.from_lark(g.lark())
    except GrammarError:
        for i, tool in enumerate(request.tools):  # name the tool, where one is at fault
            check_parameters(tool, f"tools[{i}]")
        raise


class _Builder:
    """The Lark text of one request's tool grammar."""

    def __init__(self, request: ToolRequest, fmt: str, specials: dict[str, int]) -> None:
        self.request, self.fmt, self.specials = request, fmt, specials
        self.rules: list[str] = []

    def lark(self) -> str:
        start = {GENERIC: self._generic, HERMES: self._hermes, MISTRAL: self._mistral,
                 LLAMA3: self._llama3}.get(self.fmt, self._generic)()  # fmt: skip
        return "\n".join([f"start: {start}", *self.rules, _COMMON])

    # the parts -------------------------------------------------------------

    def _marker(self, text: str) -> str:
        """A format's marker: its control token where the vocabulary has one, else text."""
        token = self.specials.get(text)
        return _lit(text) if token is None else f"<[{token}]>"

    def _call(self, key: str) -> str:
        """The rule of one call: ``{"name": <a tool's name>, key: <its arguments>}``."""
        names = []
        for i, tool in enumerate(self.request.offered()):
            schema, options = _prepared(tool)
            self.rules.append(f"args_{i}: %json {json.dumps({**schema, 'x-guidance': options})}")
            self.rules.append(
                f'call_{i}: "{{" WS? {_lit(json.dumps("name"))} WS? ":" WS? '
                f'{_lit(json.dumps(tool.name))} WS? "," WS? {_lit(json.dumps(key))} WS? ":" '
                f'WS? args_{i} WS? "}}"'
            )
            names.append(f"call_{i}")
        self.rules.append(f"call: {' | '.join(names)}")
        return "call"

    def _calls(self, call: str, sep: str) -> str:
        """One call, or with parallel_tool_calls one or more separated by sep."""
        if not self.request.parallel:
            return call
        return f"{call} ({sep} {call})*"

    def _lazy(self, trigger: str, rest: str) -> str:
        """Free text, or free text up to trigger and then rest (llama.cpp's lazy grammar).

        A trigger held as a control token ends the text by itself; a textual one ends
        it at its first occurrence (a lazy lexeme), whereupon rest is constrained."""
        token = self.specials.get(trigger)
        if token is not None:
            return f"TEXT | TEXT? <[{token}]> {rest}"
        self.rules.append(f"head[lazy]: TEXT {_lit(trigger)}")
        return f"TEXT | head {rest}"

    # the formats -----------------------------------------------------------

    def _generic(self) -> str:
        call = self._call("arguments")
        if self.request.parallel:
            key, value = "tool_calls", f'"[" WS? {self._calls(call, _COMMA)} WS? "]"'
        else:
            key, value = "tool_call", call
        self.rules.append(f'called: "{{" WS? {_lit(json.dumps(key))} WS? ":" WS? {value} WS? "}}"')
        if self.request.must_call:
            return "WS? called WS?"
        self.rules.append(
            f'answer: "{{" WS? {_lit(json.dumps("response"))} WS? ":" WS? STRING WS? "}}"'
        )
        return "WS? (called | answer) WS?"

    def _hermes(self) -> str:
        call = self._call("arguments")
        self.rules.append(f"block: WS? {call} WS? {self._marker('</tool_call>')}")
        opener = self._marker("<tool_call>")
        more = f"(WS? {opener} block)*" if self.request.parallel else ""
        self.rules.append(f"rest: block {more} WS?")
        if self.request.must_call:
            return f"WS? {opener} rest"
        return self._lazy("<tool_call>", "rest")

    def _mistral(self) -> str:
        call = self._call("arguments")
        self.rules.append(f'array: WS? "[" WS? {self._calls(call, _COMMA)} WS? "]" WS?')
        if self.request.must_call:
            return f"{self._marker('[TOOL_CALLS]')} array"
        return self._lazy("[TOOL_CALLS]", "array")

    def _llama3(self) -> str:
        call = self._call("parameters")  # one call per reply in this format
        tag = self.specials.get("<|python_tag|>")
        head = f"<[{tag}]>? " if tag is not None else ""
        self.rules.append(f"called: {head}WS? {call} WS?")
        if self.request.must_call:
            return "called"
        # a reply opening with "{" (or the tag) is a call, any other is free text
        self.rules.append(r"FREE: /[ \t\r\n]*[^{ \t\r\n](.|\n)*/")
        return "(FREE | called)?"


def _prepared(tool: Tool) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        return prepare(tool.parameters, strict=tool.strict)
    except (SchemaRefused, TypeError, ValueError, RecursionError) as exc:
        raise GrammarError(f"JSON schema not supported: {exc}") from None


def _lit(text: str) -> str:
    """text as a Lark string literal."""
    return json.dumps(text)
