"""Constrained decoding: a GBNF grammar (or a JSON schema turned into one) for the output.

``Grammar`` is the checked grammar text, independent of any model; the engine
binds it to the target's vocabulary (``LlamaModel.grammar``) for each generation
and masks p and q at every draft position (``edgespec/shaping.py``), so the
speculative output is exactly the constrained target's. llama.cpp's grammar
engine does the matching: see ``docs/constrained-decoding.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .backend import check_gbnf, json_schema_to_gbnf
from .errors import InvalidParameterError
from .schema_keywords import unsupported

#: llama.cpp's parse error for a token named by its text, without a vocabulary at hand
_NEEDS_VOCAB = "no vocab to parse token"


class GrammarError(InvalidParameterError):
    """A GBNF grammar or a JSON schema that cannot constrain the output."""


@dataclass(frozen=True)
class Grammar:
    """A GBNF grammar that parsed, with its start symbol."""

    gbnf: str
    root: str = "root"

    @classmethod
    def from_gbnf(cls, text: str, root: str = "root") -> Grammar:
        """Check GBNF text with llama.cpp's parser; GrammarError (one line) if refused."""
        if not isinstance(text, str):
            raise GrammarError(f"a grammar must be text, got {type(text).__name__}")
        try:
            check_gbnf(text, root)
        except ValueError as exc:
            if not str(exc).startswith(_NEEDS_VOCAB):
                raise GrammarError(f"invalid grammar: {_one_line(str(exc))}") from None
            # a token named by its text (<|end|>) needs the model's vocabulary: the
            # grammar is checked in full when a generation binds it to the target
        return cls(text, root)

    @classmethod
    def from_json_schema(cls, schema: dict | None, *, strict: bool = True) -> Grammar:
        """The grammar of JSON text matching schema (None: any JSON object, as
        response_format json_object), by llama.cpp's JSON-schema converter.

        strict: a keyword the grammar cannot enforce (``minimum``, ``not``...) is a
        GrammarError naming it; otherwise it is left unenforced (a tool's arguments).
        """
        if schema is None:
            schema = {"type": "object"}
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
        if strict and (missing := unsupported(schema)):
            more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
            raise GrammarError(f"JSON schema keyword not supported: {'; '.join(missing[:3])}{more}")
        try:
            gbnf = json_schema_to_gbnf(json.dumps(schema))
        except RecursionError:
            raise GrammarError("invalid JSON schema: nested too deeply") from None
        except Exception as exc:  # the converter raises what it meets: KeyError, ValueError...
            raise GrammarError(f"invalid JSON schema: {_one_line(_describe(exc))}") from None
        # the converter's string character admits raw control characters, which JSON
        # forbids in a string (json.loads refuses them): as llama.cpp's newer converter
        gbnf = gbnf.replace('char ::= [^"\\\\] |', 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |')
        return cls.from_gbnf(gbnf)


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if isinstance(exc, KeyError | TypeError) else text


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300] or "rejected"
