"""Constrained decoding: the one place grammars are made (llguidance is the engine).

A ``Grammar`` is a checked llguidance grammar, independent of any model: from a JSON
Schema (OpenAI's structured outputs, llama-server's ``json_schema``), Lark, GBNF
(llama.cpp's grammar syntax, converted to Lark) or a regular expression. The engine
binds it to the target's vocabulary (``LlamaModel.grammar``) for each generation and
masks p and q at every draft position
(``edgespec/sampling/context_processing.py``), so the speculative output is exactly
the constrained target's. Tool-call grammars are built in ``edgespec.grammar.tools``.
See docs/constrained-decoding.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llguidance
from llguidance.gbnf_to_lark import any_to_lark

from ..errors import InvalidParameterError
from .schema import SchemaRefused, prepare

__all__ = ["JSON_LAYOUT", "Grammar", "GrammarError"]

#: JSON text as ``json.dumps`` writes it by default (and as models mostly write it):
#: ", " and ": " between items, no other whitespace. Free whitespace would let a small
#: model pad its output without end, and the fixed separators are text the grammar
#: forces (grammar drafts).
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(InvalidParameterError):
    """A grammar or a JSON schema that cannot constrain the output."""


@dataclass(frozen=True)
class Grammar:
    """A grammar llguidance accepted: ``spec`` is what its matcher is built from."""

    spec: str
    kind: str  # "json_schema", "lark", "gbnf" or "regex"

    @classmethod
    def from_json_schema(cls, schema: dict[str, Any] | None, *, strict: bool = True) -> Grammar:
        """The grammar of JSON text matching schema (None: any JSON object, as
        response_format json_object).

        strict: an assertion the grammar cannot enforce (``not``, ``if``...) is a
        GrammarError naming it and its JSON pointer; otherwise it is left unenforced.
        Annotations and unknown keywords are ignored either way, as JSON Schema says.
        """
        if schema is None:
            schema = {"type": "object"}
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
        try:
            prepared, options = prepare(schema, strict=strict)
            options.update(JSON_LAYOUT)
        except SchemaRefused as exc:
            raise GrammarError(f"JSON schema not supported: {exc}") from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise GrammarError(f"invalid JSON schema: {_one_line(str(exc))}") from None
        try:
            spec = llguidance.LLMatcher.grammar_from_json_schema(prepared, defaults=options)
        except ValueError as exc:
            raise GrammarError(f"invalid JSON schema: {_one_line(str(exc))}") from None
        return cls(_checked(spec, "invalid JSON schema"), "json_schema")

    @classmethod
    def from_lark(cls, text: str) -> Grammar:
        """A Lark grammar in llguidance's dialect (``start`` is the start rule)."""
        _check_text(text)
        spec = llguidance.LLMatcher.grammar_from_lark(text)
        return cls(_checked(spec, "invalid grammar"), "lark")

    @classmethod
    def from_gbnf(cls, text: str) -> Grammar:
        """A GBNF grammar (llama.cpp's syntax, ``root`` the start rule)."""
        _check_text(text)
        try:
            lark = any_to_lark(text)
        except Exception as exc:  # the converter's own error type, or what its parser met
            raise GrammarError(f"invalid grammar: {_one_line(str(exc))}") from None
        spec = llguidance.LLMatcher.grammar_from_lark(lark)
        return cls(_checked(spec, "invalid grammar"), "gbnf")

    @classmethod
    def from_regex(cls, pattern: str) -> Grammar:
        """Text matching a regular expression (Rust regex syntax, matched in full)."""
        _check_text(pattern)
        spec = llguidance.LLMatcher.grammar_from_regex(pattern)
        return cls(_checked(spec, "invalid regex"), "regex")


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise GrammarError(f"a grammar must be text, got {type(text).__name__}")
    if not text.strip():
        raise GrammarError("invalid grammar: the grammar is empty")


def _checked(spec: str, what: str) -> str:
    """spec, once llguidance's validator found no error in it."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(spec)
    if is_error:
        raise GrammarError(f"{what}: {_one_line(messages[0] if messages else 'rejected')}")
    return spec


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300] or "rejected"
