"""A scripted engine for the app's tests: a known event sequence, no model."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from edgespec_tui.overflow import ContextTrimmed
from edgespec_tui.prompt import ChatMessage, PromptFormat
from edgespec_tui.session import EngineInfo, GenerationSettings

from edgespec.chat_template import ChatFormat
from edgespec.errors import ContextFullError, EdgespecError
from edgespec.events import DoneEvent, Event, RoundEvent, Stats, StopReason, TokenEvent, TokenKind

A, R, C, B, P = (
    TokenKind.ACCEPTED,
    TokenKind.REJECTED,
    TokenKind.CORRECTION,
    TokenKind.BONUS,
    TokenKind.PLAIN,
)

#: Rounds of (kind, text); the reply is "The sea is calm today." (rejected pieces excluded)
SCRIPT: list[list[tuple[TokenKind, str]]] = [
    [(A, "The"), (A, " sea"), (R, " ocean"), (C, " is")],
    [(A, " calm"), (A, " today"), (B, ".")],
]


def script_events(
    rounds: list[list[tuple[TokenKind, str]]], prompt_tokens: int = 10, cached: int = 0
) -> list[Event]:
    """The events stream_generate would yield for these rounds, with fixed timings."""
    events: list[Event] = []
    stats = Stats(prompt_tokens=prompt_tokens, prompt_cached=cached, prompt_s=0.1)
    text, tokens = "", []
    for i, rnd in enumerate(rounds, start=1):
        drafted = sum(k in (A, R) for k, _ in rnd)
        accepted = sum(k is A for k, _ in rnd)
        for k, t in rnd:
            tok = 1000 + len(tokens) if k is not R else 999
            events.append(TokenEvent(k, tok, t, i))
            if k is not R:
                tokens.append(tok)
                text += t
        draft_s = stats.draft_s + 0.01 * drafted
        verify_s = stats.verify_s + 0.05
        stats = replace(
            stats,
            drafted=stats.drafted + drafted,
            accepted=stats.accepted + accepted,
            generated=len(tokens),
            rounds=i,
            target_calls=i,
            draft_calls=stats.draft_calls + drafted,
            draft_s=draft_s,
            verify_s=verify_s,
            wall_s=stats.prompt_s + draft_s + verify_s,
        )
        events.append(RoundEvent(i, drafted, accepted, stats))
    events.append(DoneEvent(text, tuple(tokens), StopReason.EOG, stats))
    return events


@dataclass
class FakeEngine:
    """Implements tui.session.ChatEngine with a script; records every call.

    gate: when set, the stream waits on it before each event (tests pause a reply
    mid-way to stop it); ``paused`` is set while it waits.
    """

    rounds: list[list[tuple[TokenKind, str]]] = field(default_factory=lambda: SCRIPT)
    chat_mode: bool = True
    target: str = "fake-target"
    draft: str | None = "fake-draft"
    gate: threading.Event | None = None
    pause_after: int = 0  # events to stream before waiting on gate
    fail_with: EdgespecError | None = None
    trimmed: ContextTrimmed | None = None  # each reply starts with it (tui.overflow)
    plain_call_s: float | None = 0.04
    calls: list[tuple[list[ChatMessage], GenerationSettings]] = field(default_factory=list)
    closed_streams: int = 0
    yielded: int = 0
    closed: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    format: PromptFormat = field(
        default_factory=lambda: PromptFormat(
            ChatFormat(
                "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}"
            )
        )
    )

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(
            target=self.target,
            draft=self.draft,
            chat_mode=self.chat_mode,
            n_ctx=2048,
            drafter_choices=("none", "fake-draft"),
        )

    def measure_plain_call(self) -> float | None:
        return self.plain_call_s

    def set_drafter(self, choice: str) -> None:
        self.draft = None if choice == "none" else choice

    def stream_reply(
        self, messages: Sequence[ChatMessage], settings: GenerationSettings
    ) -> Iterator[Event]:
        self.calls.append((list(messages), settings))
        if self.fail_with is not None:
            raise self.fail_with
        return self._stream(len(self.calls))

    def _stream(self, call: int) -> Iterator[Event]:
        rounds = self.rounds
        if not self.draft:  # no drafter: every kept token comes from the target alone
            rounds = [[(P, t)] for rnd in self.rounds for k, t in rnd if k is not R]
        try:
            if self.trimmed is not None:
                yield self.trimmed
            for i, ev in enumerate(script_events(rounds, cached=8 * (call - 1))):
                if self.gate is not None and i >= self.pause_after:
                    self.paused.set()
                    self.gate.wait(timeout=30)
                yield ev
                self.yielded += 1
        finally:
            self.closed_streams += 1
            self.closed.set()

    def close(self) -> None:
        pass


def context_full() -> ContextFullError:
    return ContextFullError("the prompt has 5000 tokens; the context holds 2048")
