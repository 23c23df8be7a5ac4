"""Token log probabilities in each protocol's shape, from the completion's TokenEvents.

Chat (OpenAI): ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}``;
text completions (OpenAI's legacy shape): ``{"tokens", "token_logprobs",
"top_logprobs": [{text: logprob}], "text_offset"}``; llama-server's
``completion_probabilities``: the chat entries as a list. Each entry also carries
the token's ``id``, as llama-server's do. The values are the engine's: see
``edgespec.speculation.loop.stream_generate`` (logprobs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..completion.session import CompletionSession
from ..events import TokenEvent

#: What stands for log(0): JSON has no -inf, and OpenAI reports -9999.0 the same way.
FLOOR = -9999.0


def _lp(x: float) -> float:
    return max(x, FLOOR) if math.isfinite(x) else FLOOR


class Pieces:
    """Each token's text and bytes, by id (read from the vocabulary, cached)."""

    def __init__(self, session: CompletionSession) -> None:
        self.session = session
        self._cache: dict[int, bytes] = {}

    def bytes(self, token: int) -> bytes:
        """The token's bytes (a special token's text included, as llama-server's)."""
        b = self._cache.get(token)
        if b is None:
            b = self._cache[token] = self.session.target.token_bytes(token, special=True)
        return b

    def text(self, token: int) -> str:
        """The token's text (a piece of a UTF-8 character reads as the part that decodes)."""
        return self.bytes(token).decode("utf-8", "ignore")

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        """One ``{"id", "token", "logprob", "bytes"}`` object."""
        return {
            "id": token,
            "token": self.text(token),
            "logprob": _lp(logprob),
            "bytes": list(self.bytes(token)),
        }


def content(pieces: Pieces, events: Sequence[TokenEvent]) -> list[dict[str, Any]]:
    """Chat's ``logprobs.content`` (and llama-server's ``completion_probabilities``)."""
    out = []
    for ev in events:
        e = pieces.entry(ev.token, ev.logprob if ev.logprob is not None else FLOOR)
        e["top_logprobs"] = [pieces.entry(t, lp) for t, lp in ev.top_logprobs]
        out.append(e)
    return out


def legacy(pieces: Pieces, events: Sequence[TokenEvent], offset: int) -> dict[str, Any]:
    """A text completion's ``logprobs``; ``text_offset`` counts characters from ``offset``
    (the prompt's length, as OpenAI's without echo)."""
    tokens, lps, tops, offsets = [], [], [], []
    for ev in events:
        text = pieces.text(ev.token)
        tokens.append(text)
        lps.append(_lp(ev.logprob if ev.logprob is not None else FLOOR))
        tops.append({pieces.text(t): _lp(lp) for t, lp in ev.top_logprobs})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
