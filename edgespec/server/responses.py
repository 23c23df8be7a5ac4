"""Response bodies in each protocol's format: OpenAI completions and chat, llama.cpp infill.

Every final body (and the last streamed chunk) carries ``timings`` as llama.cpp
server does (``cache_n``, ``prompt_n``, ``predicted_per_second``, ``draft_n``,
``draft_n_accepted``, ...) plus edgespec's speculation figures.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

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


class OpenAIFormat:
    """Bodies and stream chunks of one /v1/completions or /v1/chat/completions response."""

    def __init__(self, session: CompletionSession, *, chat: bool) -> None:
        self.session = session
        self.extra: dict[str, Any] = {}  # added to timings (e.g. fim, truncated)
        self.chat = chat
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

    def _choice(self, text: str | None, finish: str | None, *, first: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def body(self, result: CompletionResult, prompt_tokens: int) -> dict[str, Any]:
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
        out["usage"] = usage(prompt_tokens, result)
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

    def last_chunks(
        self, result: CompletionResult, prompt_tokens: int, include_usage: bool
    ) -> list[dict[str, Any]]:
        """The finish_reason chunk (with timings) and, if asked, the usage chunk."""
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        last = self._envelope(obj, [self._choice(None, result.finish_reason)])
        last["timings"] = {**timings(result.stats, self.session, result), **self.extra}
        out = [last]
        if include_usage:
            u = self._envelope(obj, [])
            u["usage"] = usage(prompt_tokens, result)
            out.append(u)
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


def infill_chunk(text: str, n_predicted: int, prompt_tokens: int) -> dict[str, Any]:
    """A streamed /infill piece, as llama.cpp's /completion stream sends it."""
    return {
        "index": 0,
        "content": text,
        "tokens": [],
        "stop": False,
        "id_slot": 0,
        "tokens_predicted": n_predicted,
        "tokens_evaluated": prompt_tokens,
    }


def infill_body(
    session: CompletionSession,
    result: CompletionResult,
    *,
    prompt_tokens: int,
    truncated: bool,
    fim: bool,
    stop_words: tuple[str, ...],
    streamed: bool,
) -> dict[str, Any]:
    """The /infill response (or its final stream event, whose content is empty)."""
    return {
        "index": 0,
        "content": "" if streamed else result.text,
        "tokens": [] if streamed else list(result.tokens),
        "id_slot": 0,
        "stop": True,
        "model": session.name,
        "tokens_predicted": len(result.tokens),
        "tokens_evaluated": prompt_tokens,
        "tokens_cached": result.stats.prompt_cached,
        "has_new_line": "\n" in result.text,
        "truncated": truncated,
        "stop_type": _STOP_TYPE.get(result.stop, "none"),
        # which stop string matched is known only when there is one
        "stopping_word": stop_words[0] if result.stop == "stop" and len(stop_words) == 1 else "",
        "fim": fim,
        "timings": timings(result.stats, session, result),
    }
