"""Tool calling: the tools a request offers, how the model is told of them, and its calls.

A chat request may offer ``tools`` (OpenAI's function definitions) and say with
``tool_choice`` whether the model must call one (``required``, or a named function),
may (``auto``) or must not (``none``). The format a model calls tools in comes from
its chat template (``formats.detect``: Hermes/Qwen ``<tool_call>``, Llama 3.x JSON,
Mistral ``[TOOL_CALLS]``, or edgespec's generic JSON for a template that knows no
tools); the template renders the tools and earlier calls itself where it can, and
the generic form puts them in a system message. A grammar built from the tools' JSON
schemas constrains the output (``edgespec.grammar.tools.tool_grammar``; with ``auto``
and a native format only from the format's trigger on), so that even a small model's
call parses and matches its schema; speculation stays exact under it like under any
grammar. The reply is read back into calls by ``formats.parse_reply`` (and, streamed,
by ``stream.CallStream``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParameterError

__all__ = ["Tool", "ToolCall", "ToolChoice", "ToolError", "ToolRequest", "parse_tools"]


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # OpenAI's rule for function names


class ToolError(InvalidParameterError):
    """A tool definition, tool_choice or tool message that cannot be used."""


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    strict: bool = False  # function.strict: a keyword the grammar cannot enforce is a 400

    def openai(self) -> dict[str, Any]:
        """The definition in OpenAI's shape, as chat templates expect it."""
        fn = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


@dataclass(frozen=True)
class ToolCall:
    """A call read from the model's reply: ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str

    def openai(self, index: int | None = None) -> dict[str, Any]:
        """The call as OpenAI's ``tool_calls`` entry (with ``index`` in a stream)."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }
        return out if index is None else {"index": index, **out}


@dataclass(frozen=True)
class ToolChoice:
    """``none``, ``auto``, ``required``, or a named function (mode "function")."""

    mode: str
    name: str | None = None


@dataclass(frozen=True)
class ToolRequest:
    """The tools of one request and what it asks of the model."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool = False  # parallel_tool_calls: several calls in one reply

    @property
    def must_call(self) -> bool:
        """Whether the reply has to be a call (required or a named function)."""
        return self.choice.mode in ("required", "function")

    def offered(self) -> tuple[Tool, ...]:
        """The tools the model may call now (only the named one for a named choice)."""
        if self.choice.mode == "function":
            return tuple(t for t in self.tools if t.name == self.choice.name)
        return self.tools


def parse_tools(tools: Any, tool_choice: Any, parallel: Any) -> ToolRequest | None:
    """Check ``tools``, ``tool_choice`` and ``parallel_tool_calls``; None when the model
    gets no tools (none given, or tool_choice "none"). ToolError names the field."""
    if tools is None or tools == []:
        if tool_choice not in (None, "none", "auto"):
            raise ToolError("'tool_choice' needs 'tools' to choose from")
        return None
    if not isinstance(tools, list):
        raise ToolError("'tools' must be a list of {'type': 'function', 'function': {...}}")
    parsed: list[Tool] = []
    for i, entry in enumerate(tools):
        tool = _tool(entry, f"tools[{i}]")
        if any(t.name == tool.name for t in parsed):
            raise ToolError(f"'tools[{i}].function.name': {tool.name!r} is defined twice")
        parsed.append(tool)
    choice = _choice(tool_choice, parsed)
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolError("'parallel_tool_calls' must be true or false")
    if choice.mode == "none":
        return None
    return ToolRequest(tuple(parsed), choice, bool(parallel))


def _tool(entry: Any, where: str) -> Tool:
    if not isinstance(entry, dict) or entry.get("type", "function") != "function":
        raise ToolError(f"'{where}' must be {{'type': 'function', 'function': {{...}}}}")
    fn = entry.get("function")
    if not isinstance(fn, dict):
        raise ToolError(f"'{where}.function' must be an object with a 'name'")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolError(f"'{where}.function.name' must be 1-64 of A-Z a-z 0-9 _ . - ({name!r})")
    description = fn.get("description", "")
    if not isinstance(description, str):
        raise ToolError(f"'{where}.function.description' must be a string")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        raise ToolError(f"'{where}.function.parameters' must be a JSON Schema of type object")
    try:
        json.dumps(params)
    except (TypeError, ValueError):
        raise ToolError(f"'{where}.function.parameters' is not JSON") from None
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ToolError(f"'{where}.function.strict' must be true or false")
    return Tool(name, description, params, bool(strict))


def _choice(value: Any, tools: list[Tool]) -> ToolChoice:
    if value is None:
        return ToolChoice("auto")
    if value in ("none", "auto", "required"):
        return ToolChoice(value)
    if isinstance(value, dict) and value.get("type") == "function":
        fn = value.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not any(t.name == name for t in tools):
            known = ", ".join(t.name for t in tools)
            raise ToolError(f"'tool_choice.function.name': {name!r} is not a tool ({known})")
        return ToolChoice("function", name)
    raise ToolError(
        "'tool_choice' must be none, auto, required or {'type': 'function', 'function': "
        "{'name': ...}}"
    )
