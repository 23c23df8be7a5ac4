"""Response bodies in each protocol's format: OpenAI completions and chat, llama.cpp infill.

Every final body (and the last streamed chunk) carries ``timings`` as llama.cpp
server does (``cache_n``, ``prompt_n``, ``predicted_per_second``, ``draft_n``,
``draft_n_accepted``, ...) plus edgespec's speculation figures.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from ..completion.session import CompletionResult, CompletionSession
from ..events import Stats


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


def usage(prompt_tokens: int, result: CompletionResult) -> dict[str, int]:
    """OpenAI's usage block."""
    n = len(result.tokens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n,
        "total_tokens": prompt_tokens + n,
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

    def body(self, result: CompletionResult) -> dict[str, Any]:
        """The non-streaming response."""
        ...

    def first_chunk(self) -> dict[str, Any] | None:
        """What a stream opens with, if anything."""
        ...

    def chunk(self, text: str) -> dict[str, Any]:
        """A streamed piece of text."""
        ...

    def last_chunks(self, result: CompletionResult) -> list[dict[str, Any] | str]:
        """What a stream ends with."""
        ...


class OpenAIFormat:
    """Bodies and stream chunks of one /v1/completions or /v1/chat/completions response."""

    def __init__(
        self, session: CompletionSession, *, chat: bool, include_usage: bool = False
    ) -> None:
        self.session = session
        self.prompt_tokens = 0
        self.extra: dict[str, Any] = {}  # added to timings (e.g. fim, truncated)
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
            "system_fingerprint": None,
            "choices": choices,
        }

    def start(self, prompt_tokens: int, info: Mapping[str, Any]) -> None:
        """The prompt's size (for usage) and how it was built (added to timings)."""
        self.prompt_tokens = prompt_tokens
        self.extra = dict(info)

    def _choice(self, text: str | None, finish: str | None, *, first: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def body(self, result: CompletionResult) -> dict[str, Any]:
        """The non-streaming response."""
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": result.text},
                "logprobs": None,
                "finish_reason": result.finish_reason,
            }
        else:
            choice = self._choice(result.text, result.finish_reason)
        out = self._envelope(self.object, [choice])
        out["usage"] = usage(self.prompt_tokens, result)
        out["timings"] = {**timings(result.stats, self.session, result), **self.extra}
        return out

    def first_chunk(self) -> dict[str, Any] | None:
        """Chat streams open with the assistant role; text completions need nothing."""
        if not self.chat:
            return None
        return self._envelope("chat.completion.chunk", [self._choice("", None, first=True)])

    def chunk(self, text: str) -> dict[str, Any]:
        """A streamed piece of text."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._envelope(obj, [self._choice(text, None)])

    def last_chunks(self, result: CompletionResult) -> list[dict[str, Any] | str]:
        """The finish_reason chunk (with timings), the usage chunk if asked, and [DONE]."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        last = self._envelope(obj, [self._choice(None, result.finish_reason)])
        last["timings"] = {**timings(result.stats, self.session, result), **self.extra}
        out: list[dict[str, Any] | str] = [last]
        if self.include_usage:
            u = self._envelope(obj, [])
            u["usage"] = usage(self.prompt_tokens, result)
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
    "cancelled": "none",
}


class InfillFormat:
    """The body and stream events of one /infill response, as llama.cpp server sends them.

    Args:
        stop_words: the request's stop strings (the body names the one that matched).
    """

    def __init__(self, session: CompletionSession, *, stop_words: tuple[str, ...]) -> None:
        self.session = session
        self.stop_words = stop_words
        self.prompt_tokens = 0
        self.fim = False
        self.truncated = False
        self._predicted = 0  # pieces streamed so far

    def start(self, prompt_tokens: int, info: Mapping[str, Any]) -> None:
        """The prompt's size, and whether it used FIM tokens and was truncated."""
        self.prompt_tokens = prompt_tokens
        self.fim = info.get("fim", False)
        self.truncated = info.get("truncated", False)

    def body(self, result: CompletionResult, *, streamed: bool = False) -> dict[str, Any]:
        """The /infill response (or, streamed, its final event, whose content is empty)."""
        words = self.stop_words
        return {
            "index": 0,
            "content": "" if streamed else result.text,
            "tokens": [] if streamed else list(result.tokens),
            "id_slot": 0,
            "stop": True,
            "model": self.session.name,
            "tokens_predicted": len(result.tokens),
            "tokens_evaluated": self.prompt_tokens,
            "tokens_cached": result.stats.prompt_cached,
            "has_new_line": "\n" in result.text,
            "truncated": self.truncated,
            "stop_type": _STOP_TYPE.get(result.stop, "none"),
            # which stop string matched is known only when there is one
            "stopping_word": words[0] if result.stop == "stop" and len(words) == 1 else "",
            "fim": self.fim,
            "timings": timings(result.stats, self.session, result),
        }

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
            "id_slot": 0,
            "tokens_predicted": self._predicted,
            "tokens_evaluated": self.prompt_tokens,
        }

    def last_chunks(self, result: CompletionResult) -> list[dict[str, Any] | str]:
        """The final event: the body without the text the stream carried."""
        return [self.body(result, streamed=True)]
