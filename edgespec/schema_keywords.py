"""The JSON Schema keywords the grammar can enforce, and a check for any other.

llama.cpp's converter (``llama_cpp.llama_grammar``) turns a schema into GBNF but
silently passes over what it does not implement (``minimum``, ``not``,
``uniqueItems``, a ``format`` such as ``email``...): output constrained by it could
then break the schema it was asked to match. ``unsupported`` finds each such keyword,
with where it is, so that a request gets a 400 naming it instead.
"""

from __future__ import annotations

from typing import Any

#: keywords the converter turns into grammar rules
ENFORCED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties",
        "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength",
        "pattern", "format", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions",
    }
)  # fmt: skip
#: keywords that say nothing about which values match
ANNOTATIONS = frozenset(
    {
        "title", "description", "$schema", "$id", "$comment", "default", "examples",
        "deprecated", "readOnly", "writeOnly", "strict",
    }
)  # fmt: skip
#: the ``format`` values with a grammar rule
FORMATS = frozenset(
    {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
)
#: keywords whose value is one subschema, a list of them, or a name -> subschema map
_ONE = ("additionalProperties", "items")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "$defs", "definitions")


def unsupported(schema: Any, where: str = "") -> list[str]:
    """Every keyword of schema the grammar cannot enforce, as ``path: keyword``."""
    if not isinstance(schema, dict):
        return []
    found = []
    for key, value in schema.items():
        if key not in ENFORCED and key not in ANNOTATIONS:
            found.append(f"{where or '/'}: {key}")
        elif key == "format" and value not in FORMATS:
            found.append(f"{where or '/'}: format {value!r}")
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            found += unsupported(schema[key], f"{where}/{key}")
    for key in _LIST:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                found += unsupported(sub, f"{where}/{key}/{i}")
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                found += unsupported(sub, f"{where}/{key}/{name}")
    return found
