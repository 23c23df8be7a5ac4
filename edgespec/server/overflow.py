"""A chat request's prompt, cut to the context where ``--context-overflow truncate-middle``
says so (edgespec.context_overflow has the rule; this renders as the server does)."""

from __future__ import annotations

from typing import Any

from ..completion.session import CompletionSession
from ..context_overflow import TRUNCATE_MIDDLE, fit_messages, reply_reserve
from ..tools import ToolRequest
from ..tools.formats import template_messages
from .generate import Build


def chat_build(
    session: CompletionSession,
    messages: list[dict[str, Any]],
    fmt: str,
    request: ToolRequest | None,
    tools: list[dict[str, Any]] | None,
    *,
    max_tokens: int,
    mode: str,
) -> Build:
    """The prompt builder of a chat request: ``messages`` (as parse_chat checked them) in
    the template's tool format ``fmt``, with ``tools`` for a template that renders them.

    With mode truncate-middle, whole messages as the client sent them are dropped (a
    tool call with its results) until the prompt and room for max_tokens fit, then the
    kept ones are rendered; what was dropped goes in the prepared info (TRUNCATION).
    """

    def prompt(kept: list[dict[str, Any]]) -> list[int]:
        return session.chat_prompt(template_messages(kept, fmt, request), tools)

    def build() -> tuple[list[int], None, dict[str, Any]]:
        if mode != TRUNCATE_MIDDLE:
            return prompt(messages), None, {}
        n_ctx = session.target.n_ctx
        fit = fit_messages(
            messages,
            role=lambda m: m["role"],
            measure=prompt,
            n_ctx=n_ctx,
            reserve=reply_reserve(max_tokens, n_ctx),
        )
        info = {"truncated_messages": fit.dropped_messages, "truncated_tokens": fit.dropped_tokens}
        return fit.tokens, None, info

    return build
