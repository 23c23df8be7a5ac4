"""JSON Schema as llguidance takes it: what is enforced, what is ignored, what is refused.

JSON Schema validates with its assertion keywords and ignores the rest (annotations
such as ``title`` or ``examples``, OpenAPI's ``nullable`` and ``x-*`` extensions,
draft-04's ``id``, any unknown keyword). llguidance enforces nearly every assertion
keyword; ``prepare`` rewrites the few gaps that can be closed and, for a strict
request, refuses each assertion it cannot enforce, naming the keyword and the JSON
pointer of the subschema that holds it. A lenient request (``strict: false``) leaves
those unenforced instead. See docs/constrained-decoding.md for the table.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

#: ``format`` values llguidance enforces
ENFORCED_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"}
)
#: formats JSON Schema defines that llguidance cannot enforce: refused when strict
UNENFORCED_FORMATS = frozenset(
    {
        "idn-email", "idn-hostname", "uri-reference", "iri", "iri-reference", "uri-template",
        "json-pointer", "relative-json-pointer", "regex",
    }
)  # fmt: skip
# (any other format, such as OpenAPI's int32, binary or password, is an annotation: the
# format-annotation vocabulary says so for values a validator does not know)

# RFC 3339's full-date as validators read it (a real calendar day, year 0001 to 9999):
# llguidance's own "date" admits year 0000 and February 30 (a Gemma output, 0000-01-01,
# failed jsonschema's check)
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
DATE_PATTERN = (
    f"^(?:{_YEAR}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)"
    f"|(?:0[13578]|1[02])-31)|{_LEAP_YEAR}-02-29)$"
)

#: assertion keywords llguidance does not implement: refused when strict, else ignored
UNENFORCED = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas",
              "dependencies", "contains", "minContains", "maxContains", "propertyNames",
              "unevaluatedProperties", "unevaluatedItems", "uniqueItems")  # fmt: skip

#: where subschemas sit: one subschema, a list of them, a name -> subschema map
_ONE = ("additionalProperties", "items", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems",
        "additionalItems")  # fmt: skip
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

#: the largest enum whose unique arrays are rewritten as a choice of subsets
MAX_UNIQUE_ENUM = 6


class SchemaRefused(ValueError):
    """A schema keyword that changes which values are valid and cannot be enforced."""


def prepare(schema: dict[str, Any], *, strict: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schema llguidance is given, its compile options).

    Raises SchemaRefused naming the first keyword (and its JSON pointer) that a strict
    schema asserts and llguidance cannot enforce.
    """
    out = json.loads(json.dumps(schema))  # a copy, and plain JSON types
    subs = list(_subschemas(out, ""))
    # parts of an allOf add up properties: neither they nor what they refer to are closed
    in_all_of = {w for w, _ in subs if "/allOf/" in f"{w}/"}
    in_all_of |= {sub["$ref"][1:] for w, sub in subs
                  if w in in_all_of and isinstance(sub.get("$ref"), str)}  # fmt: skip
    for where, sub in subs:
        if where not in in_all_of:
            _close_object(sub)
        _drop_annotation_formats(sub, where, strict=strict)
        _rewrite_unique_enum(sub)
        if sub.get("uniqueItems") is False:
            del sub["uniqueItems"]  # asserts nothing
        if strict:
            for key in UNENFORCED:
                if key in sub:
                    raise SchemaRefused(f"{_pointer(where)}: '{key}' cannot be enforced")
        one_of = sub.get("oneOf")
        if strict and isinstance(one_of, list) and not _disjoint(one_of, out):
            raise SchemaRefused(
                f"{_pointer(where)}: 'oneOf' whose choices may overlap cannot be enforced"
            )
    # oneOf read as anyOf: the same where no value matches two choices (checked above)
    options: dict[str, Any] = {"coerce_one_of": True}
    if not strict:
        options["lenient"] = True
    return out, options


def _subschemas(schema: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema (the root first) with its JSON pointer."""
    if not isinstance(schema, dict):
        return
    yield where, schema
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            yield from _subschemas(schema[key], f"{where}/{key}")
    for key in _LIST:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield from _subschemas(sub, f"{where}/{key}/{i}")
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from _subschemas(sub, f"{where}/{key}/{_escape(name)}")


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def _pointer(where: str) -> str:
    return f"#{where}" if where else "#"


def _close_object(sub: dict[str, Any]) -> None:
    """An object with named properties and nothing said of others gets no others: every
    output still validates (extra keys are merely allowed), and a small model's output
    ends instead of inventing keys. Not where ``required`` names a key ``properties``
    does not describe, nor with an allOf (whose parts add up properties)."""
    props = sub.get("properties")
    if "allOf" in sub or not isinstance(props, dict):
        return
    required = sub.get("required")
    if isinstance(required, list) and not set(map(str, required)) <= set(props):
        return  # a required key it does not describe: any value, so others stay open
    if not {"additionalProperties", "patternProperties", "unevaluatedProperties"} & sub.keys():
        sub["additionalProperties"] = False


def _drop_annotation_formats(sub: dict[str, Any], where: str, *, strict: bool) -> None:
    fmt = sub.get("format")
    if fmt == "date" and "pattern" not in sub:
        sub["pattern"] = DATE_PATTERN  # a calendar day (see DATE_PATTERN)
        del sub["format"]
        return
    if fmt is None or fmt in ENFORCED_FORMATS:
        return
    if strict and fmt in UNENFORCED_FORMATS:
        raise SchemaRefused(f"{_pointer(where)}: format '{fmt}' cannot be enforced")
    del sub["format"]


def _rewrite_unique_enum(sub: dict[str, Any]) -> None:
    """``uniqueItems`` over a small enum: the arrays of distinct values in the enum's own
    order (a subset of the valid arrays: every one of them is valid)."""
    items = sub.get("items")
    if sub.get("uniqueItems") is not True or not isinstance(items, dict):
        return
    values = items["enum"] if isinstance(items.get("enum"), list) else None
    if values is None and "const" in items:
        values = [items["const"]]
    if (
        values is None
        or len(values) > MAX_UNIQUE_ENUM
        or set(items) - {"enum", "const", "type", "title", "description"}
    ):
        return
    lo, hi = sub.get("minItems", 0), sub.get("maxItems", len(values))
    if not isinstance(lo, int) or not isinstance(hi, int):
        return
    choices = [
        {"const": list(combo)}
        for n in range(max(lo, 0), min(hi, len(values)) + 1)
        for combo in itertools.combinations(values, n)
    ]
    if not choices:
        return  # no valid array: left to the refusal (or to llguidance when lenient)
    for key in ("items", "uniqueItems", "minItems", "maxItems"):
        sub.pop(key, None)
    if "anyOf" in sub:  # an anyOf already there: both must hold
        sub["allOf"] = [*sub.get("allOf", []), {"anyOf": choices}]
    else:
        sub["anyOf"] = choices


def _disjoint(choices: list[Any], root: dict[str, Any]) -> bool:
    """Whether no JSON value can match two of oneOf's choices (so anyOf means the same):
    each pair differs in type, or in the constant of a property both require."""
    resolved = [_resolve(c, root) for c in choices]
    return all(_apart(a, b) for a, b in itertools.combinations(resolved, 2))


def _resolve(schema: Any, root: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/") and depth < 16:
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return {}
            node = node[part]
        return _resolve(node, root, depth + 1)
    return schema


_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


def _types(s: dict[str, Any]) -> set[str] | None:
    t = s.get("type")
    if isinstance(t, str):
        t = [t]
    if isinstance(t, list) and set(t) <= _JSON_TYPES:
        out = set(t)
        if "number" in out:
            out.add("integer")
        return out
    if "const" in s:
        return {_type_of(s["const"])}
    return None


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def _constants(s: dict[str, Any]) -> dict[str, set[str]]:
    """Required properties whose values are pinned (const or enum), as JSON texts."""
    props = s.get("properties") if isinstance(s.get("properties"), dict) else {}
    required = s.get("required") if isinstance(s.get("required"), list) else []
    out = {}
    for name in required:
        p = props.get(name)
        if isinstance(p, dict) and "const" in p:
            out[name] = {json.dumps(p["const"], sort_keys=True)}
        elif isinstance(p, dict) and isinstance(p.get("enum"), list):
            out[name] = {json.dumps(v, sort_keys=True) for v in p["enum"]}
    return out


def _apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ta, tb = _types(a), _types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    ca, cb = _constants(a), _constants(b)
    return any(not ca[k] & cb[k] for k in ca.keys() & cb.keys())
