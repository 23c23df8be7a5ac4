"""A conversation longer than the context: refuse it, or drop its oldest messages.

``--context-overflow`` (``edgespec serve`` and ``edgespec chat``) picks one:

- ``error``: the request is refused (the server's 400 ``context_length_exceeded``);
- ``truncate-middle``: the oldest messages after the leading system messages are
  dropped, whole, until the rendered prompt plus room for the reply fits the
  context (Ollama's behaviour for chats; llama-server shifts tokens instead).

What is dropped keeps the conversation valid for a chat template:

- the leading system messages stay (and a template's tools, which are not
  messages: the template renders them every time);
- before the last user message, a conversation is dropped a turn at a time: a
  turn is a user message and everything up to the next one (the assistant's
  replies, its tool calls with their results), so what is left starts with a
  user message, as templates that insist on alternating roles want;
- the last user message always stays; after it (an agent's loop of tool calls
  under one instruction), an assistant message goes with the tool results that
  follow it, and the last such group stays (it is what the reply answers).

Room for the reply: the request's ``max_tokens``, at most a quarter of the context
and at least one token (the rule the FIM prompt already keeps). When even
dropping every droppable message leaves less room than that, the shortest
conversation is generated from as long as the context holds a token to spare
(the reply is cut short, finish reason ``length``); when not even that fits, it
is a ContextFullError.

Measuring renders and tokenizes candidate conversations with the one chat
template renderer (``edgespec.chat_template``), through the caller's ``measure``:
the whole conversation once (all of it, when it fits), then a binary search over
how many groups to drop (about log2 of the groups, each one render).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from .errors import ContextFullError, InvalidParameterError

ERROR = "error"
TRUNCATE_MIDDLE = "truncate-middle"
MODES = (ERROR, TRUNCATE_MIDDLE)

#: --context-overflow's help, the same for every command that takes it
HELP = (
    "a conversation longer than --ctx: 'error' refuses it, 'truncate-middle' drops the "
    "oldest messages after the system prompt (whole turns; a tool call with its results) "
    "until it fits with room for the reply"
)

T = TypeVar("T")


def check_mode(value: str) -> str:
    """``value`` if it is a context-overflow mode, else InvalidParameterError naming them."""
    if value not in MODES:
        raise InvalidParameterError(f"context-overflow must be {' or '.join(MODES)}, got {value!r}")
    return value


def reply_reserve(max_tokens: int, n_ctx: int) -> int:
    """Tokens kept free for the reply: max_tokens, at most a quarter of the context, >= 1."""
    return max(1, min(max_tokens, n_ctx // 4))


def droppable_groups(roles: Sequence[str]) -> list[list[int]]:
    """The indices of the messages that may be dropped, in groups, oldest first.

    Dropping the first k groups (for any k) leaves a conversation a template accepts:
    see the module's docstring. Leading system messages, the last user message and
    the last group after it are in no group.
    """
    start = 0
    while start < len(roles) and roles[start] == "system":
        start += 1
    users = [i for i in range(start, len(roles)) if roles[i] == "user"]
    if not users:
        return []
    last_user = users[-1]
    groups: list[list[int]] = []
    # before the last user message: whole turns (whatever precedes the first user
    # message, after the system ones, is a group of its own)
    bounds = [i for i in [start, *users] if i <= last_user]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b > a:
            groups.append(list(range(a, b)))
    # after it: an assistant message and what follows it up to the next assistant
    # message; the last such group stays
    heads = [i for i in range(last_user + 1, len(roles)) if roles[i] == "assistant"]
    for a, b in zip(heads, heads[1:], strict=False):
        groups.append(list(range(a, b)))
    return groups


@dataclass(frozen=True)
class Fit(Generic[T]):
    """A conversation cut to fit the context.

    Attributes:
        messages: the messages kept, in order.
        tokens: their prompt (what ``measure`` gave for them).
        dropped_messages: how many messages were dropped.
        dropped_tokens: how much shorter the prompt is than the whole conversation's.
    """

    messages: list[T]
    tokens: list[int]
    dropped_messages: int = 0
    dropped_tokens: int = 0


def fit_messages(
    messages: Sequence[T],
    *,
    role: Callable[[T], str],
    measure: Callable[[list[T]], list[int]],
    n_ctx: int,
    reserve: int,
) -> Fit[T]:
    """The fewest oldest groups of messages dropped so that the prompt, plus ``reserve``
    tokens for the reply, fits ``n_ctx`` (see the module's docstring).

    ``measure(messages)`` gives a conversation's prompt tokens (rendered with the chat
    template, tokenized). Raises ContextFullError when the shortest conversation does
    not leave a token of the context free; the template's own errors pass through.
    """
    msgs = list(messages)
    full = measure(msgs)
    if len(full) + reserve <= n_ctx:
        return Fit(msgs, full)
    groups = droppable_groups([role(m) for m in msgs])

    def kept(k: int) -> list[T]:
        gone = {i for g in groups[:k] for i in g}
        return [m for i, m in enumerate(msgs) if i not in gone]

    def fit(k: int, tokens: list[int]) -> Fit[T]:
        n = sum(len(g) for g in groups[:k])
        return Fit(kept(k), tokens, n, len(full) - len(tokens))

    shortest = measure(kept(len(groups))) if groups else full
    if len(shortest) + reserve > n_ctx:  # nothing to search: drop all there is
        if len(shortest) >= n_ctx:
            kept_what = (
                f"even with its {sum(len(g) for g in groups)} earlier messages dropped"
                if groups
                else "and has no earlier messages to drop"
            )
            raise ContextFullError(
                f"the conversation does not fit the context {kept_what}: what must stay "
                f"(the system prompt, the last user message and what follows it) is "
                f"{len(shortest)} tokens; the context holds {n_ctx}"
            )
        return fit(len(groups), shortest)
    lo, hi, best = 0, len(groups), shortest  # lo does not fit, hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tokens = measure(kept(mid))
        if len(tokens) + reserve <= n_ctx:
            hi, best = mid, tokens
        else:
            lo = mid
    return fit(hi, best)
