"""The request fields that shape the next-token choice: llama.cpp's sampler list,
repetition penalties, log probabilities, and grammars (GBNF, JSON schema,
OpenAI's response_format)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..grammar import Grammar, GrammarError
from ..sampling import DEFAULT_PENALTY_LAST_N
from .errors import bad_request
from .fields import Fields
from .unsupported import unsupported

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat's top_logprobs

_CANONICAL = ("top_k", "top_p", "min_p", "temperature", "infill", "penalties", "dry", "typ_p",
              "xtc", "top_n_sigma")  # fmt: skip
#: llama.cpp's sampler names and aliases (common/sampling.cpp) -> the canonical name.
_SAMPLERS = {
    **{n: n for n in _CANONICAL},
    **{n.replace("_", ""): n for n in _CANONICAL},  # "topk", "minp", ...
    "nucleus": "top_p",
    "temp": "temperature",
    "typ": "typ_p",
}
#: The letters of llama.cpp's sampler strings ("kpmt").
_SAMPLER_CHARS = dict(zip("kpmtiedyxs", _CANONICAL, strict=True))


def parse_samplers(f: Fields) -> set[str] | None:
    """llama-server's ``samplers`` (names, or a string of their letters), or None when absent.

    What edgespec makes of the list: penalties, top_k, top_p and min_p apply when
    listed and are off when not, in edgespec's fixed order; the temperature is
    always the ``temperature`` field (edgespec's default, 0, is greedy), listed or
    not. "infill" is what edgespec's FIM end tokens and code stop rules already
    do; dry, typ_p, xtc and top_n_sigma do nothing at the only values of their
    fields edgespec accepts. Any other name is a 400.
    """
    v = f.raw("samplers")
    if v is None:
        return None
    if isinstance(v, str):
        names = [_SAMPLER_CHARS.get(c, c) for c in v]
    elif isinstance(v, list) and all(isinstance(n, str) for n in v):
        names = [n.lower().replace("-", "_") for n in v]  # "top-k" too
    else:
        raise f._bad("samplers", "must be a list of sampler names or a string of their letters")
    out = set()
    for n in names:
        canonical = _SAMPLERS.get(n)
        if canonical is None:
            raise unsupported("samplers", f": no sampler '{n}'")
        out.add(canonical)
    return out


def parse_penalties(f: Fields) -> dict[str, Any]:
    """Repetition penalties under llama-server's names (and OpenAI's two), as llama.cpp's.

    ``repeat_last_n`` (alias ``penalty_last_n``): tokens looked back at, 0 off, -1 all.
    """
    last_n = f.integer("repeat_last_n", None, minimum=-1)
    if last_n is None:
        last_n = f.integer("penalty_last_n", DEFAULT_PENALTY_LAST_N, minimum=-1)
    return {
        "repeat_penalty": f.number("repeat_penalty", 1.0, minimum=0.0, open_min=True),
        "presence_penalty": f.number("presence_penalty", 0.0),
        "frequency_penalty": f.number("frequency_penalty", 0.0),
        "penalty_last_n": last_n,
    }


def parse_logprobs(f: Fields, kind: str) -> int | None:
    """How many alternatives each token's logprobs list, or None for no logprobs.

    Chat asks with ``logprobs: true`` and ``top_logprobs`` (0 unless given, as
    OpenAI's); text completions with an integer ``logprobs`` (0: the token's own
    only); llama-server's ``n_probs`` (0: none; its own endpoints also read an
    integer ``logprobs`` for it) works on every endpoint.
    """
    n = f.integer("n_probs", 0, minimum=0) or None
    if kind == "chat":
        top = f.integer("top_logprobs", None, minimum=0)
        if f.boolean("logprobs", False):
            n = top or 0
        elif top is not None:
            raise f._bad("top_logprobs", "needs 'logprobs': true")
        name = "top_logprobs"
    elif kind == "completions":
        given = f.integer("logprobs", None, minimum=0)
        n = given if given is not None else n
        name = "logprobs"
    else:
        name = "n_probs"
        if n is None and f.raw("n_probs") is None:
            n = f.integer("logprobs", 0, minimum=0) or None
    if n is not None and n > MAX_TOP_LOGPROBS:
        raise f._bad(name, f"must be at most {MAX_TOP_LOGPROBS}, got {n}")
    return n


def parse_grammar(f: Fields) -> Grammar | None:
    """The output's constraint: llama-server's ``grammar`` (GBNF) or ``json_schema``, or
    OpenAI's ``response_format`` (json_object: any JSON object, or the ``schema`` given
    as llama-server takes it; json_schema: ``json_schema.schema``; text: none)."""
    found: list[tuple[str, Callable[[], Grammar]]] = []
    text = f.string("grammar", None)
    if text:
        found.append(("grammar", lambda: Grammar.from_gbnf(text)))
    schema = f.raw("json_schema")
    if schema is not None:
        found.append(("json_schema", lambda: Grammar.from_json_schema(schema)))
    fmt = f.raw("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise f._bad("response_format", "must be an object")
        kind = fmt.get("type")
        if kind == "json_object":
            found.append(("response_format", lambda: Grammar.from_json_schema(fmt.get("schema"))))
        elif kind == "json_schema":
            inner = fmt.get("json_schema")
            if not isinstance(inner, dict):
                raise f._bad("response_format", "of type json_schema needs a 'json_schema' object")
            strict = inner.get("strict")
            if strict is not None and not isinstance(strict, bool):
                raise f._bad("response_format", "'json_schema.strict' must be true or false")
            # strict false: what cannot be enforced is left unenforced (as OpenAI's
            # non-strict mode); true or absent: refused, naming the keyword
            found.append(("response_format", lambda: Grammar.from_json_schema(
                inner.get("schema"), strict=strict is not False)))  # fmt: skip
        elif kind != "text":
            raise f._bad("response_format", "'type' must be text, json_object or json_schema")
    if len(found) > 1:
        a, b = found[0][0], found[1][0]
        raise bad_request(f"'{a}' and '{b}' cannot both constrain the output", param=b)
    if not found:
        return None
    name, make = found[0]
    try:
        return make()
    except GrammarError as e:
        hint = " (response_format's json_schema.strict false leaves it unenforced)"
        refused = name == "response_format" and "cannot be enforced" in str(e)
        raise bad_request(str(e) + (hint if refused else ""), param=name,
                          code="invalid_grammar") from None  # fmt: skip
