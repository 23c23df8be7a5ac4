"""Request bodies, checked field by field into plain dataclasses (or a 400 ApiError).

Fields that change nothing about a completion (``user``, ...) are ignored, as
OpenAI-compatible servers do; a field edgespec does not implement is a 400
naming it unless its value asks for nothing (see ``unsupported``). Every field
this server uses is type- and range-checked, and strings must be valid Unicode.
Defaults: temperature 0 (greedy, the engine's default; code completion wants the
most likely text), max_tokens 256, n_predict -1 (up to the context).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..completion.fim import ExtraChunk
from ..engine import DEFAULT_MAX_TOKENS
from ..errors import InvalidParameterError
from ..grammar import Grammar, GrammarError
from ..params import check_max_tokens, check_whole
from ..sampling import (
    DEFAULT_MIN_P,
    DEFAULT_PENALTY_LAST_N,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    SamplingParams,
)
from .errors import ApiError, bad_request
from .unsupported import refuse_unsupported, unsupported

MAX_STOP_STRINGS = 16
MAX_TOP_LOGPROBS = 20  # OpenAI's limit for chat's top_logprobs
UNLIMITED = 1 << 30  # max_tokens meaning "up to the context"; the session caps it

T = TypeVar("T")


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 error."""

    def no_constants(name: str) -> None:
        raise ValueError(f"{name} is not valid JSON")

    try:
        data = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object", code="invalid_json")
    return data


class Fields:
    """Typed, range-checked access to a JSON object's fields (null counts as absent)."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def _bad(self, name: str, what: str) -> ApiError:
        return bad_request(
            f"'{self.prefix}{name}' {what}", param=self.prefix + name, code="invalid_value"
        )

    def raw(self, name: str) -> Any:
        """The value as sent (None when absent or null)."""
        return self.data.get(name)

    def checked(self, name: str, default: T, check: Callable[..., T], **limits: Any) -> T:
        """A field checked by a validator of edgespec.params (its refusal is the 400)."""
        v = self.data.get(name)
        if v is None:
            return default
        try:
            return check(v, name=f"'{self.prefix}{name}'", **limits)
        except InvalidParameterError as e:
            raise bad_request(str(e), param=self.prefix + name, code="invalid_value") from None

    def integer(self, name: str, default: int | None, *, minimum: int | None = None) -> int | None:
        """An integer field (booleans and floats refused), at least minimum when given."""
        if minimum is not None:
            return self.checked(name, default, check_whole, minimum=minimum)
        v = self.data.get(name)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(name, "must be an integer")
        return v

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        open_min: bool = False,
        open_max: bool = False,
    ) -> float:
        """A finite number in the given range."""
        v = self.data.get(name)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self._bad(name, "must be a number")
        try:
            v = float(v)
        except OverflowError:
            raise self._bad(name, "is out of range") from None
        if not math.isfinite(v):
            raise self._bad(name, "must be finite")
        low = minimum is not None and (v <= minimum if open_min else v < minimum)
        high = maximum is not None and (v >= maximum if open_max else v > maximum)
        if low or high:
            lo = "(" if open_min else "["
            hi = ")" if open_max else "]"
            raise self._bad(name, f"must be in {lo}{minimum}, {maximum}{hi}, got {v}")
        return v

    def boolean(self, name: str, default: bool) -> bool:
        """A true/false field."""
        v = self.data.get(name)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self._bad(name, "must be a boolean")
        return v

    def string(self, name: str, default: str | None) -> str | None:
        """A string field."""
        v = self.data.get(name)
        if v is None:
            return default
        return self.text(v, name)

    def text(self, v: Any, name: str) -> str:
        """``v`` checked to be a string of valid Unicode (no lone surrogates)."""
        if not isinstance(v, str):
            raise self._bad(name, "must be a string")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise self._bad(name, "is not valid Unicode") from None
        return v

    def stop(self) -> tuple[str, ...]:
        """``stop``: a string or a list of strings."""
        v = self.data.get("stop")
        if v is None:
            return ()
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or len(items) > MAX_STOP_STRINGS:
            raise self._bad("stop", f"must be a string or a list of at most {MAX_STOP_STRINGS}")
        return tuple(s for s in (self.text(s, "stop") for s in items) if s)


@dataclass(frozen=True)
class Options:
    """What every generation endpoint takes."""

    model: str | None
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    t_max_predict_ms: int = 0  # llama-server's: stop at a newline once generating took longer
    cache_prompt: bool = True  # False: the prompt is evaluated afresh (the KV cache emptied)
    grammar: Grammar | None = None  # grammar, json_schema or response_format
    logprobs: int | None = None  # top alternatives per token; None: no logprobs


@dataclass(frozen=True)
class CompletionsCall:
    """POST /v1/completions."""

    opts: Options
    prompt: str | list[int]
    suffix: str | None
    max_lines: int | None


@dataclass(frozen=True)
class ChatCall:
    """POST /v1/chat/completions."""

    opts: Options
    messages: list[dict[str, str]]


@dataclass(frozen=True)
class InfillCall:
    """POST /infill (llama.cpp server's fields)."""

    opts: Options
    prefix: str
    suffix: str
    extra: tuple[ExtraChunk, ...]
    prompt: str
    max_lines: int | None
    min_indent: int | None
    response_fields: tuple[str, ...] = ()


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


def _samplers(f: Fields) -> set[str] | None:
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


def _penalties(f: Fields) -> dict[str, Any]:
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


def _options(f: Fields, max_tokens: int, kind: str) -> Options:
    """The fields every endpoint shares; kind: "chat", "completions" or "llama" (/infill)."""
    refuse_unsupported(f.data)
    # llama.vim sends t_max_prompt_ms; llama-server does not implement it either
    # (server-schema.cpp: "TODO: implement t_max_prompt_ms"). Checked, then unused.
    f.integer("t_max_prompt_ms", 0, minimum=-1)
    seed = f.integer("seed", None)
    stream_options = f.raw("stream_options")
    include_usage = False
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise bad_request("'stream_options' must be an object", param="stream_options")
        include_usage = Fields(stream_options, "stream_options.").boolean("include_usage", False)
    n = f.integer("n", 1, minimum=1)
    if n != 1:
        raise bad_request("only n = 1 is supported", param="n", code="unsupported_value")
    model = f.string("model", None)
    chain = _samplers(f)
    picked: dict[str, Any] = {
        "temperature": f.number("temperature", 0.0, minimum=0.0),
        "top_k": f.integer("top_k", DEFAULT_TOP_K, minimum=0) or 0,
        "top_p": f.number("top_p", DEFAULT_TOP_P, minimum=0.0, maximum=1.0, open_min=True),
        "min_p": f.number("min_p", DEFAULT_MIN_P, minimum=0.0, maximum=1.0, open_max=True),
        **_penalties(f),
    }
    if chain is not None:  # what it leaves out is off
        off = {"top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0},
               "penalties": {"repeat_penalty": 1.0, "presence_penalty": 0.0,
                             "frequency_penalty": 0.0}}  # fmt: skip
        for name, neutral in off.items():
            if name not in chain:
                picked.update(neutral)
    try:
        sampling = SamplingParams(**picked)
    except InvalidParameterError as e:  # a value only the whole set refuses (1/repeat_penalty)
        raise bad_request(str(e), code="invalid_value") from None
    return Options(
        model=model,
        max_tokens=max_tokens,
        sampling=sampling,
        seed=seed if seed is not None and seed >= 0 else None,  # llama.cpp: -1 = random
        stop=f.stop(),
        stream=f.boolean("stream", False),
        include_usage=include_usage,
        t_max_predict_ms=max(f.integer("t_max_predict_ms", 0, minimum=-1) or 0, 0),
        cache_prompt=f.boolean("cache_prompt", True),
        grammar=_grammar(f),
        logprobs=_logprobs(f, kind),
    )


def _logprobs(f: Fields, kind: str) -> int | None:
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


def _grammar(f: Fields) -> Grammar | None:
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
            found.append(("response_format", lambda: Grammar.from_json_schema(inner.get("schema"))))
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
        raise bad_request(str(e), param=name, code="invalid_grammar") from None


def _max_lines(f: Fields, default: int | None) -> int | None:
    v = f.integer("max_lines", default, minimum=0)
    return v or None  # 0: no limit


def parse_completions(data: dict[str, Any], default_max_lines: int | None) -> CompletionsCall:
    """Check a /v1/completions body."""
    f = Fields(data)
    max_tokens = f.checked("max_tokens", DEFAULT_MAX_TOKENS, check_max_tokens)
    if f.boolean("echo", False):
        raise bad_request("echo is not supported", param="echo", code="unsupported_value")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise bad_request(
                "'prompt' must be a string or a list of token ids (one prompt per request)",
                param="prompt",
            )
    elif prompt is None:
        raise bad_request("'prompt' is required", param="prompt", code="missing_required")
    else:
        prompt = f.text(prompt, "prompt")
    suffix = f.string("suffix", None)
    return CompletionsCall(
        _options(f, max_tokens, "completions"), prompt, suffix, _max_lines(f, default_max_lines)
    )


def parse_chat(data: dict[str, Any]) -> ChatCall:
    """Check a /v1/chat/completions body."""
    f = Fields(data)
    max_tokens = f.checked("max_completion_tokens", None, check_max_tokens)
    if max_tokens is None:
        max_tokens = f.checked("max_tokens", DEFAULT_MAX_TOKENS, check_max_tokens)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"'messages[{i}]' must be an object", param=f"messages[{i}]")
        mf = Fields(m, f"messages[{i}].")
        role = mf.string("role", None)
        if not role:
            raise mf._bad("role", "is required")
        if m.get("tool_calls"):
            raise unsupported(f"messages[{i}].tool_calls")
        out.append({"role": role, "content": _content(mf, m.get("content"))})
    return ChatCall(_options(f, max_tokens, "chat"), out)


def _content(mf: Fields, content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return mf.text(content, "content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise mf._bad("content", "parts must be {'type': 'text', 'text': ...}")
            texts.append(mf.text(part.get("text"), "content.text"))
        return "".join(texts)
    raise mf._bad("content", "must be a string or a list of text parts")


def parse_infill(data: dict[str, Any], default_max_lines: int | None) -> InfillCall:
    """Check a /infill body (llama.cpp server's fields)."""
    f = Fields(data)
    n_predict = _n_predict(f)
    extra = data.get("input_extra")
    chunks = []
    if extra is not None:
        if not isinstance(extra, list):
            raise bad_request("'input_extra' must be a list", param="input_extra")
        for i, c in enumerate(extra):
            if not isinstance(c, dict):
                raise bad_request(f"'input_extra[{i}]' must be an object", param="input_extra")
            cf = Fields(c, f"input_extra[{i}].")
            chunks.append(
                ExtraChunk(cf.string("text", "") or "", cf.string("filename", "tmp") or "tmp")
            )
    n_indent = f.integer("n_indent", 0, minimum=0)
    return InfillCall(
        opts=_options(f, n_predict, "llama"),
        prefix=f.string("input_prefix", "") or "",
        suffix=f.string("input_suffix", "") or "",
        extra=tuple(chunks),
        prompt=f.string("prompt", "") or "",
        max_lines=_max_lines(f, default_max_lines),
        min_indent=n_indent or None,
        response_fields=_response_fields(f),
    )


@dataclass(frozen=True)
class NativeCall:
    """POST /completion (llama-server's own completion endpoint)."""

    opts: Options
    prompt: str | list[int]
    response_fields: tuple[str, ...] = ()


def _n_predict(f: Fields) -> int:
    """llama-server's n_predict (alias max_tokens); -1, its default, is up to the context."""
    n = f.checked("n_predict", None, check_max_tokens, minimum=-1)
    if n is None:
        n = f.checked("max_tokens", -1, check_max_tokens, minimum=-1)
    return UNLIMITED if n == -1 else n or 0


def parse_native(data: dict[str, Any]) -> NativeCall:
    """Check a /completion body: a text or token-id ``prompt`` and llama-server's fields."""
    f = Fields(data)
    prompt = data.get("prompt")
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise bad_request(
                "'prompt' must be a string or a list of token ids (one prompt per request)",
                param="prompt",
            )
    elif prompt is None:
        raise bad_request("'prompt' is required", param="prompt", code="missing_required")
    else:
        prompt = f.text(prompt, "prompt")
    return NativeCall(_options(f, _n_predict(f), "llama"), prompt, _response_fields(f))


def _response_fields(f: Fields) -> tuple[str, ...]:
    """llama-server's ``response_fields``: a list of field paths ("timings/prompt_n")."""
    v = f.raw("response_fields")
    if v is None:
        return ()
    if not isinstance(v, list):
        raise f._bad("response_fields", "must be a list of strings")
    return tuple(f.text(x, "response_fields") for x in v)
