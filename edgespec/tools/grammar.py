"""The grammar that makes a reply a valid call: built from the tools' JSON schemas.

Each format's call is a JSON object naming one offered tool (``const``) with that
tool's arguments schema; llama.cpp's converter turns the schema into GBNF, and the
format's own text around it (``<tool_call>`` ...) is added as GBNF literals. With
``tool_choice`` auto only the generic form is constrained (a choice between a call
and ``{"response": ...}``): a native format's text answer is free text, so it is left
unconstrained and parsed afterwards (llama.cpp's lazy grammar, triggered by the
format's opening words, is not built here).
"""

from __future__ import annotations

import re
from typing import Any

from ..grammar import Grammar
from . import ToolRequest
from .formats import GENERIC, HERMES, LLAMA3, MISTRAL


def _call_schema(request: ToolRequest, key: str) -> dict[str, Any]:
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, key: t.parameters},
            "required": ["name", key],
            "additionalProperties": False,
        }
        for t in request.offered()
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_grammar(request: ToolRequest, fmt: str) -> Grammar | None:
    """The grammar for a reply to request in fmt (None: leave the reply free)."""
    if fmt == GENERIC:
        one = _call_schema(request, "arguments")
        key, value = "tool_call", one
        if request.parallel:
            key, value = "tool_calls", {"type": "array", "items": one, "minItems": 1}
        call = {
            "type": "object",
            "properties": {key: value},
            "required": [key],
            "additionalProperties": False,
        }
        if request.must_call:
            return Grammar.from_json_schema(call, strict=False)
        answer = {
            "type": "object",
            "properties": {"response": {"type": "string"}},
            "required": ["response"],
            "additionalProperties": False,
        }
        return Grammar.from_json_schema({"anyOf": [call, answer]}, strict=False)
    if not request.must_call:
        return None
    if fmt == HERMES:
        inner = _rooted(
            Grammar.from_json_schema(_call_schema(request, "arguments"), strict=False).gbnf
        )
        block = '"<tool_call>\\n" tool-call "\\n</tool_call>"'
        root = f'root ::= {block} ("\\n" {block})*' if request.parallel else f"root ::= {block}"
        return Grammar.from_gbnf(root + "\n" + inner)
    if fmt == LLAMA3:
        return Grammar.from_json_schema(_call_schema(request, "parameters"), strict=False)
    if fmt == MISTRAL:
        schema = {"type": "array", "items": _call_schema(request, "arguments"), "minItems": 1}
        if not request.parallel:
            schema["maxItems"] = 1
        return Grammar.from_json_schema(schema, strict=False)
    return None


def _rooted(gbnf: str) -> str:
    """The converter's grammar with its start rule renamed ``tool-call``."""
    renamed, n = re.subn(r"^root\s*::=", "tool-call ::=", gbnf, count=1, flags=re.MULTILINE)
    assert n == 1, "the JSON-schema converter wrote no root rule"
    return renamed
