"""Which JSON Schemas constrain the output: annotations and unknown keywords are ignored,
what llguidance enforces is enforced, the rest refused by name and JSON pointer (strict)
or left unenforced (lenient); outputs the grammar admits validate."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.grammar import Grammar, GrammarError
from edgespec.grammar.schema import prepare

ENFORCEABLE = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "A person",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40, "description": "x"},
        "born": {"type": "string", "format": "date"},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "kind": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "roles": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True},
        "pet": {"$ref": "#/$defs/pet"},
        "id": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "extra": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
    },
    "required": ["name"],
    "additionalProperties": False,
    "$defs": {"pet": {"type": "object", "properties": {"legs": {"type": "integer"}}}},
}


def test_an_enforceable_schema_compiles_strict() -> None:
    assert Grammar.from_json_schema(ENFORCEABLE).kind == "json_schema"


@pytest.mark.parametrize(
    "schema",
    [
        {"id": "http://example.com/a", "type": "object"},  # draft-04's id
        {"type": "object", "self": {"href": "x"}, "x-internal": True},  # metadata
        {"type": "string", "nullable": True, "readOnly": True, "example": "a"},  # OpenAPI
        {"type": "integer", "format": "int64"},  # OpenAPI's formats are annotations
        {"type": "string", "format": "binary"},
        {"type": "string", "contentEncoding": "base64", "deprecated": True},
        {"type": "array", "items": {"type": "string"}, "uniqueItems": False},
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},  # disjoint: by type
        {  # a discriminated union, as pydantic writes it
            "oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
            "discriminator": {"propertyName": "kind"},
            "$defs": {
                "cat": {"properties": {"kind": {"const": "cat"}}, "required": ["kind"]},
                "dog": {"properties": {"kind": {"const": "dog"}}, "required": ["kind"]},
            },
        },
    ],
)
def test_annotations_and_unknown_keywords_are_not_refused(schema) -> None:
    Grammar.from_json_schema(schema)


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]}, "#/anyOf/1: 'not'"),
        ({"type": "object", "properties": {"a": {"if": {}, "then": {}}}}, "#/properties/a: 'if'"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "#: 'uniqueItems'"),
        ({"$defs": {"x": {"dependentRequired": {"a": ["b"]}}}, "$ref": "#/$defs/x"},
         "#/$defs/x: 'dependentRequired'"),
        ({"properties": {"a/b": {"type": "string", "format": "uri-reference"}}},
         "#/properties/a~1b: format 'uri-reference'"),
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "#: 'oneOf'"),
    ],
)  # fmt: skip
def test_what_cannot_be_enforced_is_refused_with_where_it_is(schema, where) -> None:
    with pytest.raises(GrammarError, match="JSON schema not supported") as e:
        Grammar.from_json_schema(schema)
    assert where in str(e.value) and "\n" not in str(e.value)
    Grammar.from_json_schema(schema, strict=False)  # lenient: left unenforced


def test_unique_small_enums_become_a_choice_of_subsets() -> None:
    schema = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True,
              "minItems": 1}  # fmt: skip
    prepared, _ = prepare(schema, strict=True)
    values = [c["const"] for c in prepared["anyOf"]]
    assert len(values) == 7 and ["a", "b", "c"] in values and [] not in values
    for v in values:
        jsonschema.validate(v, schema)


def _sample_outputs(m: LlamaModel, grammar: Grammar, n: int, seed: int) -> list[str]:
    """n texts drawn token by token from the grammar's mask alone (uniform over the
    allowed tokens, a bias towards ending): what the grammar admits, model aside."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        matcher, text = m.grammar(grammar.spec), b""
        for _step in range(200):
            allowed = np.flatnonzero(matcher.allowed())
            ends = [t for t in allowed if m.is_eog(int(t))]
            if ends and (rng.random() < 0.3 or len(allowed) == len(ends)):
                break
            choices = [t for t in allowed if not m.is_eog(int(t))]
            short = [t for t in choices if len(m.token_bytes(int(t))) <= 2] or choices
            tok = int(rng.choice(short))
            matcher.accept(tok)
            text += m.token_bytes(tok)
        else:
            continue  # unfinished: not counted
        out.append(text.decode("utf-8"))
    return out


@pytest.mark.real_model
def test_what_the_grammar_admits_validates(real_model_paths) -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 7},
            "tag": {"enum": ["x", "y"]},
            "opt": {"type": ["string", "null"], "maxLength": 3},
            "meta": {"type": "object", "patternProperties": {"^k": {"type": "boolean"}},
                     "additionalProperties": False},
        },
        "required": ["n", "tag", "meta"],
        "additionalProperties": True,
    }  # fmt: skip
    grammar = Grammar.from_json_schema(schema)
    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256, n_threads=2) as m:
        texts = _sample_outputs(m, grammar, 30, seed=0)
    assert len(texts) >= 10
    for text in texts:
        jsonschema.validate(json.loads(text), schema)


def test_strings_never_hold_a_raw_control_character(real_model_paths) -> None:
    """JSON forbids raw control characters in a string (json.loads refuses them): the
    grammar admits a newline as the escape ``\\n`` only."""
    grammar = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "string"}}})
    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256, n_threads=2) as m:
        matcher = m.grammar(grammar.spec)
        for t in m.tokenize('{"a": "x', parse_special=False):
            matcher.accept(t)
        newline, tab, escape = (m.tokenize(c, parse_special=False) for c in ("\n", "\t", "\\n"))
        ok = matcher.allowed(np.array([newline[0], tab[0], escape[0]]))
    assert len(newline) == len(tab) == 1
    assert not ok[0] and not ok[1] and ok[2]
    with pytest.raises(ValueError):
        json.loads('{"a": "x\ny"}')


def test_all_of_parts_stay_open() -> None:
    """allOf adds up its parts' properties: a part (or what it refers to) is not closed."""
    schema = {
        "definitions": {"base": {"type": "object", "properties": {"a": {"type": "string"}},
                                 "required": ["a"]}},
        "allOf": [{"$ref": "#/definitions/base"},
                  {"properties": {"b": {"type": "integer"}}, "required": ["b"]}],
    }  # fmt: skip
    prepared, _ = prepare(schema, strict=True)
    assert "additionalProperties" not in prepared["definitions"]["base"]
    Grammar.from_json_schema(schema)
    closed, _ = prepare({"type": "object", "properties": {"a": {}}}, strict=True)
    assert closed["additionalProperties"] is False


def test_format_date_is_a_calendar_day() -> None:
    """``format: date`` becomes a pattern that admits exactly the days a validator
    accepts (llguidance's own admits 0000-01-01 and February 30): every string of the
    shape YYYY-MM-DD over a spread of years, leap and not, checked against Python's
    calendar."""
    import datetime
    import re

    from edgespec.grammar.schema import DATE_PATTERN

    out, _ = prepare({"type": "string", "format": "date"}, strict=True)
    assert out["pattern"] == DATE_PATTERN and "format" not in out
    pattern = re.compile(DATE_PATTERN)
    for year in (0, 1, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 9999):
        for month in range(0, 14):
            for day in range(0, 33):
                text = f"{year:04d}-{month:02d}-{day:02d}"
                try:
                    datetime.date(year, month, day)
                    valid = True
                except ValueError:
                    valid = False
                assert bool(pattern.fullmatch(text)) == valid, text
    # a schema's own pattern is kept (and the format with it, as llguidance reads it)
    own, _ = prepare({"type": "string", "format": "date", "pattern": "^20"}, strict=True)
    assert own["pattern"] == "^20" and own["format"] == "date"
