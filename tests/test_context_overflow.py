"""Dropping a conversation's oldest messages to fit the context (edgespec.context_overflow):
which messages go together, that the fewest are dropped, and what cannot fit."""

from __future__ import annotations

import pytest

from edgespec.chat_template import CHATML, ChatFormat
from edgespec.context_overflow import (
    check_mode,
    droppable_groups,
    fit_messages,
    reply_reserve,
)
from edgespec.errors import ContextFullError, InvalidParameterError


def test_groups_are_whole_turns_then_tool_rounds_after_the_last_user_message() -> None:
    roles = ["system", "user", "assistant", "user", "assistant", "tool", "tool", "assistant",
             "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]  # fmt: skip
    assert droppable_groups(roles) == [[1, 2], [3, 4, 5, 6, 7], [9, 10], [11, 12]]


def test_what_precedes_the_first_user_message_is_a_group_of_its_own() -> None:
    assert droppable_groups(["system", "assistant", "user", "assistant", "user"]) == [
        [1],
        [2, 3],
    ]
    assert droppable_groups(["user"]) == []
    assert droppable_groups(["system", "system", "user", "assistant", "user"]) == [[2, 3]]
    assert droppable_groups(["system", "assistant"]) == []  # no user message: nothing goes


CALLS = [0]  # how many conversations _measure was given


def _measure(msgs: list[dict[str, str]]) -> list[int]:
    """One "token" per character of the ChatML prompt."""
    CALLS[0] += 1
    return [0] * len(ChatFormat(CHATML).render(msgs))


def _chat(turns: int) -> list[dict[str, str]]:
    out = [{"role": "system", "content": "be brief"}]
    for i in range(turns):
        out += [{"role": "user", "content": f"question {i} " + "x" * 40},
                {"role": "assistant", "content": f"answer {i} " + "y" * 40}]  # fmt: skip
    return [*out, {"role": "user", "content": "last question"}]


def _fit(msgs, n_ctx: int, reserve: int = 10):
    CALLS[0] = 0
    return fit_messages(
        msgs, role=lambda m: m["role"], measure=_measure, n_ctx=n_ctx, reserve=reserve
    )


def test_a_conversation_that_fits_is_measured_once_and_kept() -> None:
    msgs = _chat(3)
    fit = _fit(msgs, 10_000)
    assert fit.messages == msgs and fit.dropped_messages == 0 and fit.dropped_tokens == 0
    assert CALLS[0] == 1


@pytest.mark.parametrize("n_ctx", [300, 500, 800, 1200])
def test_the_fewest_oldest_turns_are_dropped(n_ctx: int) -> None:
    msgs = _chat(20)
    fit = _fit(msgs, n_ctx)
    assert CALLS[0] <= 2 + 5  # the whole, the shortest, a binary search over 20 turns
    kept = fit.messages
    assert kept[0] == msgs[0] and kept[-1] == msgs[-1]
    assert kept[1]["role"] == "user"  # whole turns: what is left starts with a user message
    assert kept == [msgs[0], *msgs[1 + fit.dropped_messages :]]
    assert len(fit.tokens) + 10 <= n_ctx
    assert fit.dropped_tokens == len(_measure(msgs)) - len(fit.tokens)
    one_turn_fewer = [msgs[0], *msgs[1 + fit.dropped_messages - 2 :]]
    assert len(_measure(one_turn_fewer)) + 10 > n_ctx  # dropping less would not fit


def test_room_for_the_reply_counts() -> None:
    msgs = _chat(20)
    assert _fit(msgs, 1200, reserve=300).dropped_messages > _fit(msgs, 1200).dropped_messages
    assert reply_reserve(256, 4096) == 256
    assert reply_reserve(100_000, 4096) == 1024  # at most a quarter of the context
    assert reply_reserve(0, 4096) == 1


def test_a_tool_call_goes_with_its_results() -> None:
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u" * 50},
        {"role": "assistant", "content": "call 1"},
        {"role": "tool", "content": "r" * 200},
        {"role": "assistant", "content": "call 2"},
        {"role": "tool", "content": "r" * 200},
        {"role": "assistant", "content": "call 3"},
        {"role": "tool", "content": "result 3"},
    ]
    fit = _fit(msgs, 600)
    assert [m["content"] for m in fit.messages] == [
        "s", "u" * 50, "call 2", "r" * 200, "call 3", "result 3"]  # fmt: skip
    fit = _fit(msgs, 250)
    assert [m["content"] for m in fit.messages] == ["s", "u" * 50, "call 3", "result 3"]


def test_what_cannot_fit_is_a_context_error_in_one_line() -> None:
    msgs = [*_chat(2)[:-1], {"role": "user", "content": "z" * 500}]
    with pytest.raises(ContextFullError) as e:
        _fit(msgs, 300)
    assert "\n" not in str(e.value) and "4 earlier messages" in str(e.value)
    with pytest.raises(ContextFullError, match="no earlier messages"):
        _fit([{"role": "user", "content": "z" * 500}], 300)


def test_the_shortest_conversation_runs_with_less_room_than_asked() -> None:
    msgs = [*_chat(2)[:-1], {"role": "user", "content": "z" * 200}]
    fit = _fit(msgs, 300, reserve=100)  # the last message fits, not the room for the reply
    assert fit.dropped_messages == 4 and len(fit.tokens) < 300


def test_modes() -> None:
    assert check_mode("error") == "error"
    assert check_mode("truncate-middle") == "truncate-middle"
    with pytest.raises(InvalidParameterError, match="error or truncate-middle"):
        check_mode("shift")
