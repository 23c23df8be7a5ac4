"""CompletionSession.run: FIM end tokens, code stop rules, cancelling (scripted engine events)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import edgespec.completion.session as completion
from edgespec.completion.session import (
    CodeRules,
    CompletionRequest,
    CompletionResult,
    CompletionSession,
)
from edgespec.events import DoneEvent, RoundEvent, Stats, StopReason, TokenEvent, TokenKind


def scripted(rounds: list[list[tuple[int, str]]], log: list[str], final: str = ""):
    """A stream_generate stand-in yielding the given rounds of (token, text).

    ``final`` is the DoneEvent's text; "" stands for one the stream does not start.
    """

    def fake(target, prompt, **kwargs) -> Iterator:
        out = []
        try:
            for r, toks in enumerate(rounds, 1):
                for tok, text in toks:
                    out.append(tok)
                    yield TokenEvent(TokenKind.ACCEPTED, tok, text, r)
                yield RoundEvent(r, len(toks), len(toks), Stats(generated=len(out), rounds=r))
            yield DoneEvent(final, tuple(out), StopReason.MAX_TOKENS, Stats(generated=len(out)))
        finally:
            log.append("closed")

    return fake


def run(session: CompletionSession, rounds, code=None, cancel_after=None, final=""):
    log: list[str] = []
    pieces: list[str] = []
    result = None
    n = 0

    def cancelled() -> bool:
        return cancel_after is not None and n >= cancel_after

    req = CompletionRequest([1, 2, 3], 100, code=code)
    mp = pytest.MonkeyPatch()
    mp.setattr(completion, "stream_generate", scripted(rounds, log, final))
    try:
        for item in session.run(req, cancelled):
            n += 1
            if isinstance(item, CompletionResult):
                result = item
            else:
                pieces.append(item)
    finally:
        mp.undo()
    assert result is not None and log == ["closed"]
    assert "".join(pieces) == result.text
    return result


def test_a_fim_token_ends_the_completion_after_its_round(fim_session: CompletionSession) -> None:
    pad = fim_session.fim.pad
    r = run(fim_session, [[(10, "a"), (11, "b")], [(12, "c"), (pad, ""), (13, "d")], [(14, "e")]])
    assert (r.text, r.tokens, r.stop) == ("abc", (10, 11, 12), "fim_token")
    assert r.stats.rounds == 2  # the statistics of the round that held the stop


def test_code_rules_stop_and_hold_back(fim_session: CompletionSession) -> None:
    rules = CodeRules(suffix="\n\nreturn total\n", at_line_start=False, max_lines=None)
    rounds = [[(10, "x"), (11, " = 1\n")], [(12, "\nreturn"), (13, " total\n"), (14, "more")]]
    r = run(fim_session, rounds, code=rules)
    assert (r.text, r.stop, r.finish_reason) == ("x = 1", "suffix", "stop")


def test_max_lines(fim_session: CompletionSession) -> None:
    rules = CodeRules(max_lines=2)
    r = run(fim_session, [[(10, "a\n"), (11, "b\n"), (12, "c\n")]], code=rules)
    assert (r.text, r.stop) == ("a\nb", "max_lines")


def test_cancel_closes_the_engine(fim_session: CompletionSession) -> None:
    r = run(fim_session, [[(10, "a"), (11, "b")], [(12, "c")]], cancel_after=1)
    assert r.stop == "cancelled" and r.text == "a"


def test_engine_stop_reason_passes_through(fim_session: CompletionSession) -> None:
    r = run(fim_session, [[(10, "a")]])
    assert (r.stop, r.finish_reason) == ("max_tokens", "length")


def test_an_auto_session_carries_what_its_policy_learned(synthetic_models) -> None:
    # short completions are too short to learn in: every request shares one policy
    from edgespec.completion.session import load_session
    from edgespec.policy.adaptive import AdaptiveGamma

    session = load_session(str(synthetic_models["target"]), "ngram", gamma="auto", n_ctx=1024)
    policy = session._gamma()
    assert isinstance(policy, AdaptiveGamma) and policy.observed == 0
    text = "one two three four five six seven eight nine ten " * 3
    items = list(session.run(CompletionRequest(session.text_prompt(text), 24)))
    assert isinstance(items[-1], CompletionResult) and items[-1].text
    learned = policy.observed
    assert learned > 0
    assert session._gamma() is policy  # the next request starts from what it learned


def test_text_the_engine_held_back_comes_at_the_end(fim_session: CompletionSession) -> None:
    # the engine holds back a possible stop string's start ("x" of stop "xy") and
    # releases it only in its DoneEvent's text; the completion and its stream end with it
    r = run(fim_session, [[(10, "a = 1"), (11, "")]], final="a = 1x")
    assert (r.text, r.stop) == ("a = 1x", "max_tokens")
    rules = CodeRules(max_lines=1)  # ... through the code rules too
    r = run(fim_session, [[(10, "a = 1"), (11, "")]], code=rules, final="a = 1\nb")
    assert (r.text, r.stop) == ("a = 1", "max_lines")
