"""Response bodies in each protocol's format: OpenAI completions and chat, llama.cpp infill.

Every final body (and the last streamed chunk) carries ``timings`` as llama.cpp
server does (``cache_n``, ``prompt_n``, ``predicted_per_second``, ``draft_n``,
``draft_n_accepted``, ...) plus edgespec's speculation figures.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..completion.session import CompletionResult, CompletionSession
from ..events import Stats
from ..tools import ToolCall, ToolRequest
from ..tools.stream import CallStream, read_reply
from ..version import __version__
from .logprobs import Pieces, content, legacy

#: What OpenAI's ``system_fingerprint`` says (llama-server sends its build): this build.
SYSTEM_FINGERPRINT = f"edgespec-{__version__}"

#: What --context-overflow truncate-middle dropped from a chat (messages, prompt tokens):
#: in usage and timings, the messages also in the X-Edgespec-Truncated-Messages header
TRUNCATION = ("truncated_messages", "truncated_tokens")

#: Stops that cut the completion short: OpenAI's finish_reason "length".
_LENGTH_STOPS = ("max_tokens", "context_full", "time_limit")


@dataclass(frozen=True)
class Outcome:
    """A finished completion, with what the server adds to the session's result.

    Attributes:
        result: the session's result ("time_limit" as its stop when
            ``t_max_predict_ms`` ended it).
        tokens_cached: tokens in the target's KV cache after the request
            (llama-server's ``tokens_cached``).
        slot: the slot that ran it (llama-server's ``id_slot``).
    """

    result: CompletionResult
    tokens_cached: int
    slot: int = 0

    @property
    def finish_reason(self) -> str:
        """OpenAI's finish_reason: "length" when a limit cut it short, else "stop"."""
        return "length" if self.result.stop in _LENGTH_STOPS else "stop"


def timings(stats: Stats, session: CompletionSession, result: CompletionResult) -> dict[str, Any]:
    """llama.cpp's ``timings`` object, with speculation statistics added."""
    prompt_n = stats.prompt_tokens - stats.prompt_cached
    prompt_ms = stats.prompt_s * 1000
    predicted_ms = stats.decode_s * 1000
    n = stats.generated
    return {
        "cache_n": stats.prompt_cached,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / stats.prompt_s if stats.prompt_s > 0 else 0.0,
        "predicted_n": n,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / n if n else 0.0,
        "predicted_per_second": stats.tokens_per_second,
        "draft_n": stats.drafted,
        "draft_n_accepted": stats.accepted,
        # edgespec's names for the same and more
        "drafter": session.drafter_name,
        "gamma": session.gamma,
        "prompt_tokens": stats.prompt_tokens,
        "prompt_cached": stats.prompt_cached,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "acceptance_rate": stats.acceptance_rate,
        "target_calls": stats.target_calls,
        "tokens_per_target_call": stats.mean_accepted_per_call,
        "stop": result.stop,
    }


def usage(prompt_tokens: int, result: CompletionResult) -> dict[str, Any]:
    """OpenAI's usage block; ``cached_tokens``: prompt tokens the KV cache already held."""
    n = len(result.tokens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n,
        "total_tokens": prompt_tokens + n,
        "prompt_tokens_details": {"cached_tokens": result.stats.prompt_cached},
    }


class ResponseFormat(Protocol):
    """How one route answers: a body, or a stream of events, all in its protocol's format.

    ``start`` is called once the prompt is built, before anything else; a stream
    sends ``first_chunk`` (when not None), a ``chunk`` per text piece, then
    ``last_chunks`` (dicts as JSON, strings such as "[DONE]" as they are).
    """

    def start(self, prompt_tokens: int, info: Mapping[str, Any]) -> None:
        """The prompt's size, and how it was built (``fim``, ``truncated`` when known)."""
        ...

    def body(self, outcome: Outcome) -> dict[str, Any]:
        """The non-streaming response."""
        ...

    def first_chunk(self) -> dict[str, Any] | None:
        """What a stream opens with, if anything."""
        ...

    def chunk(self, text: str) -> dict[str, Any] | None:
        """A streamed piece of text (None: nothing to send for it yet)."""
        ...

    def last_chunks(self, outcome: Outcome) -> list[dict[str, Any] | str]:
        """What a stream ends with."""
        ...


class OpenAIFormat:
    """Bodies and stream chunks of one /v1/completions or /v1/chat/completions response."""

    def __init__(
        self,
        session: CompletionSession,
        *,
        chat: bool,
        include_usage: bool = False,
        logprobs: bool = False,
        text_offset: int = 0,
        tools: tuple[ToolRequest, str] | None = None,
        legacy: bool = False,
    ) -> None:
        self.session = session
        self.tools = tools  # the request's tools and the model's call format: replies parsed
        # a tool request's stream: content and calls as the reply is read
        self._stream = None if tools is None else CallStream(tools[1], tools[0].offered(), legacy)
        self.legacy = legacy  # the request used functions: the reply's call is function_call
        self.logprobs = logprobs  # the choice carries logprobs (a stream's: its last chunk)
        self.text_offset = text_offset  # a text completion's first text_offset
        self.prompt_tokens = 0
        self.extra: dict[str, Any] = {}  # added to timings (e.g. fim, truncated)
        self.truncation: dict[str, int] = {}  # added to usage (TRUNCATION)
        self.chat = chat
        self.include_usage = include_usage  # a stream ends with a usage chunk
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.session.name,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
        }

    def start(self, prompt_tokens: int, info: Mapping[str, Any]) -> None:
        """The prompt's size (for usage) and how it was built (added to timings)."""
        self.prompt_tokens = prompt_tokens
        self.extra = dict(info)
        self.truncation = {k: info[k] for k in TRUNCATION if k in info}

    def _usage(self, result: CompletionResult) -> dict[str, Any]:
        return {**usage(self.prompt_tokens, result), **self.truncation}

    def _choice(self, text: str | None, finish: str | None, *, first: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {}
        if first:  # as OpenAI and llama-server: the role, and no content yet
            delta = {"role": "assistant", "content": None}
        elif text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def _logprobs(self, outcome: Outcome) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        pieces = Pieces(self.session)
        events = outcome.result.token_events
        if self.chat:
            return {"content": content(pieces, events)}
        return legacy(pieces, events, self.text_offset)

    def body(self, outcome: Outcome) -> dict[str, Any]:
        """The non-streaming response."""
        result = outcome.result
        if self.chat:
            content, calls = self._reply(result.text)
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls and self.legacy:
                fn = calls[0].openai()["function"]
                message["function_call"] = {"name": fn["name"], "arguments": fn["arguments"]}
            elif calls:
                message["tool_calls"] = [c.openai() for c in calls]
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": self._finish(outcome, called=bool(calls)),
            }
        else:
            choice = self._choice(result.text, outcome.finish_reason)
        choice["logprobs"] = self._logprobs(outcome)
        out = self._envelope(self.object, [choice])
        out["usage"] = self._usage(result)
        out["timings"] = {**timings(result.stats, self.session, result), **self.extra}
        return out

    def first_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the assistant role; text completions need nothing."""
        if not self.chat:
            return None
        return self._envelope("chat.completion.chunk", [self._choice(None, None, first=True)])

    def _reply(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """(content, tool calls) of a reply: calls only where the request had tools."""
        if self.tools is None:
            return text, []
        request, fmt = self.tools
        content, calls = read_reply(text, fmt, request.offered())
        return content, calls[:1] if self.legacy else calls  # functions: one call

    def _finish(self, outcome: Outcome, *, called: bool) -> str:
        """finish_reason: a call's ("tool_calls", "function_call" for functions) unless
        a limit cut the reply (its calls then are what was written of them)."""
        if not called or outcome.finish_reason == "length":
            return outcome.finish_reason
        return "function_call" if self.legacy else "tool_calls"

    def chunk(self, text: str) -> dict[str, Any] | None:
        """A streamed piece of text (None: nothing to send for it yet; with tools the
        reply is read as it comes, and content and a call's arguments sent in pieces)."""
        if self._stream is not None:
            return self._tool_chunk(self._stream.push(text))
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._envelope(obj, [self._choice(text, None)])

    def _tool_chunk(self, delta: dict[str, Any]) -> dict[str, Any] | None:
        """A chunk of the call stream's delta (None: an empty one)."""
        choice = {**self._choice(None, None), "delta": delta}
        return self._envelope("chat.completion.chunk", [choice]) if delta else None

    def last_chunks(self, outcome: Outcome) -> list[dict[str, Any] | str]:
        """The finish_reason chunk (with timings), the usage chunk if asked, and [DONE].

        As llama-server: a text completion's finish_reason chunk carries usage
        always, a chat's never; ``stream_options.include_usage`` adds OpenAI's
        usage chunk, whose ``choices`` is empty, before [DONE]. Logprobs, when
        asked, are the finish_reason chunk's, every token's at once.
        """
        result = outcome.result
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        rest = None if self._stream is None else self._tool_chunk(self._stream.finish())
        held, called = [rest] if rest else [], self._stream is not None and self._stream.called
        choice = self._choice(None, self._finish(outcome, called=called))
        choice["logprobs"] = self._logprobs(outcome)
        last = self._envelope(obj, [choice])
        if not self.chat:
            last["usage"] = self._usage(result)
        last["timings"] = {**timings(result.stats, self.session, result), **self.extra}
        out: list[dict[str, Any] | str] = [*held, last]
        if self.include_usage:
            u = self._envelope(obj, [])
            u["usage"] = self._usage(result)
            out.append(u)
        out.append("[DONE]")
        return out


_STOP_TYPE = {
    "eog": "eos",
    "fim_token": "eos",
    "stop": "word",
    "max_tokens": "limit",
    "context_full": "limit",
    "max_lines": "limit",
    "indent": "limit",
    "suffix": "word",
    "time_limit": "limit",
    "grammar": "eos",  # the grammar admits nothing more: the output is complete
    "cancelled": "none",
}


class InfillFormat:
    """The body and stream events of one /infill or /completion response, as
    llama-server sends them (its own format, not OpenAI's).

    Args:
        stop_words: the request's stop strings (the body names the one that matched).
        response_fields: llama-server's ``response_fields`` (see pick_fields).
        probs: add llama-server's ``completion_probabilities`` (n_probs).
    """

    def __init__(
        self,
        session: CompletionSession,
        *,
        stop_words: tuple[str, ...],
        response_fields: tuple[str, ...] = (),
        probs: bool = False,
    ) -> None:
        self.session = session
        self.probs = probs  # n_probs asked: completion_probabilities in the (final) body
        self.stop_words = stop_words
        self.response_fields = response_fields
        self.prompt_tokens = 0
        self.fim = False
        self.truncated = False
        self.slot = 0  # the slot running it (set when it starts)
        self._predicted = 0  # pieces streamed so far

    def start(self, prompt_tokens: int, info: Mapping[str, Any]) -> None:
        """The prompt's size, and whether it used FIM tokens and was truncated."""
        self.prompt_tokens = prompt_tokens
        self.fim = info.get("fim", False)
        self.truncated = info.get("truncated", False)

    def body(self, outcome: Outcome, *, streamed: bool = False) -> dict[str, Any]:
        """The /infill response (or, streamed, its final event, whose content is empty)."""
        result = outcome.result
        words = self.stop_words
        out = {
            "index": 0,
            "content": "" if streamed else result.text,
            "tokens": [] if streamed else list(result.tokens),
            "id_slot": outcome.slot,
            "stop": True,
            "model": self.session.name,
            "tokens_predicted": len(result.tokens),
            "tokens_evaluated": self.prompt_tokens,
            "tokens_cached": outcome.tokens_cached,
            "has_new_line": "\n" in result.text,
            "truncated": self.truncated,
            "stop_type": _STOP_TYPE.get(result.stop, "none"),
            # which stop string matched is known only when there is one
            "stopping_word": words[0] if result.stop == "stop" and len(words) == 1 else "",
            "fim": self.fim,
            "timings": timings(result.stats, self.session, result),
        }
        if self.probs:
            out["completion_probabilities"] = content(Pieces(self.session), result.token_events)
        return pick_fields(out, self.response_fields)

    def first_chunk(self) -> None:
        """An /infill stream opens with text at once."""
        return None

    def chunk(self, text: str) -> dict[str, Any]:
        """A streamed piece, as llama.cpp's /completion stream sends it."""
        self._predicted += 1
        return {
            "index": 0,
            "content": text,
            "tokens": [],
            "stop": False,
            "id_slot": self.slot,
            "tokens_predicted": self._predicted,
            "tokens_evaluated": self.prompt_tokens,
        }

    def last_chunks(self, outcome: Outcome) -> list[dict[str, Any] | str]:
        """The final event: the body without the text the stream carried."""
        return [self.body(outcome, streamed=True)]


def pick_fields(body: dict[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """llama-server's ``response_fields``: only these fields, each under its path.

    A path like "timings/prompt_n" reaches into nested objects and its value is
    keyed by the whole path; a path the body lacks is left out. No paths: all.
    """
    if not paths:
        return body
    out: dict[str, Any] = {}
    for path in paths:
        cur: Any = body
        for key in path.split("/"):
            if not isinstance(cur, dict) or key not in cur:
                break
            cur = cur[key]
        else:
            out[path] = cur
    return out
