"""JSON Schema keywords the grammar cannot enforce are refused by name; strings in
JSON output never hold a raw control character."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.grammar import Grammar, GrammarError
from edgespec.schema_keywords import unsupported

ENFORCEABLE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "A person",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40, "description": "x"},
        "born": {"type": "string", "format": "date"},
        "kind": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "pet": {"$ref": "#/$defs/pet"},
        "id": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    },
    "required": ["name"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "object", "properties": {"legs": {"type": "integer"}}}},
}


def test_an_enforceable_schema_has_nothing_unsupported() -> None:
    assert unsupported(ENFORCEABLE) == []
    Grammar.from_json_schema(ENFORCEABLE)  # compiles, strict


@pytest.mark.parametrize(
    ("schema", "found"),
    [
        ({"type": "integer", "minimum": 0}, ["/: minimum"]),
        ({"type": "object", "properties": {"age": {"type": "integer", "maximum": 9}}},
         ["/properties/age: maximum"]),
        ({"type": "array", "items": {"type": "string", "format": "email"}, "uniqueItems": True},
         ["/: uniqueItems", "/items: format 'email'"]),
        ({"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]}, ["/anyOf/1: not"]),
        ({"$defs": {"x": {"type": "number", "multipleOf": 2}}, "$ref": "#/$defs/x"},
         ["/$defs/x: multipleOf"]),
        ({"type": "object", "patternProperties": {"^a": {}}, "if": {}, "then": {}},
         ["/: patternProperties", "/: if", "/: then"]),
        ({"type": "string", "nullable": True}, ["/: nullable"]),  # OpenAPI's, not JSON Schema
    ],
)  # fmt: skip
def test_unsupported_keywords_are_found_with_where_they_are(schema, found) -> None:
    assert sorted(unsupported(schema)) == sorted(found)
    with pytest.raises(GrammarError, match="JSON schema keyword not supported") as e:
        Grammar.from_json_schema(schema)
    assert found[0] in str(e.value) and "\n" not in str(e.value)


def test_not_strict_leaves_them_unenforced() -> None:
    """A tool's arguments: the grammar enforces what it can, the rest is the tool's."""
    Grammar.from_json_schema({"type": "integer", "minimum": 0}, strict=False)


def test_many_unsupported_keywords_make_one_short_line() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"minimum": i} for i in range(9)}}
    with pytest.raises(GrammarError, match=r"\(and 6 more\)$"):
        Grammar.from_json_schema(schema)


def test_strings_never_hold_a_raw_control_character(real_model_paths) -> None:
    """JSON forbids raw control characters in a string (json.loads refuses them): the
    grammar admits a newline as the escape ``\\n`` only."""
    grammar = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}}})
    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256, n_threads=2) as m:
        matcher = m.grammar(grammar.gbnf)
        for t in m.tokenize('{"a": "x', parse_special=False):
            matcher.accept(t)
        newline, tab, escape = (m.tokenize(c, parse_special=False) for c in ("\n", "\t", "\\n"))
        ok = matcher.allowed(np.array([newline[0], tab[0], escape[0]]))
    assert len(newline) == len(tab) == 1
    assert not ok[0] and not ok[1] and ok[2]
    with pytest.raises(ValueError):
        json.loads('{"a": "x\ny"}')
