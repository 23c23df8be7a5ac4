"""The app's only door to the engine: load a model pair, build prompts, stream a reply.

Everything model-specific the app needs goes through the small ``ChatEngine``
protocol, so tests can swap in a scripted fake that yields the same
``edgespec.events`` dataclasses. ``LlamaChatEngine`` is the real one, built on
edgespec's public library API (``edgespec.load``, ``ModelPair.set_drafter``,
``ModelPair.stream_generate``): the app imports nothing else of edgespec's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from edgespec import (
    DEFAULT_GAMMA,
    DEFAULT_MAX_TOKENS,
    Drafter,
    Event,
    LlamaModel,
    LoadOptions,
    ModelPair,
    RoundEvent,
    SamplingParams,
    load,
    parse_draft_spec,
)

from .overflow import TRUNCATE_MIDDLE, fit_conversation, noted
from .prompt import ChatMessage, PromptFormat

SELF_DRAFT = "self"  # drafter choice: a second copy of the target drafts for itself
NGRAM = "ngram"  # drafter choice (and --draft spec): the n-gram prompt lookup
CALIBRATION_TOKENS = 6  # plain tokens generated once after loading, to time a target call


@dataclass(frozen=True, kw_only=True)
class GenerationSettings(SamplingParams):
    """Knobs a person can change between replies: edgespec's SamplingParams (checked
    when made), and the draft length, token budget and seed of a reply."""

    gamma: int | str = DEFAULT_GAMMA  # draft tokens per round, or "auto" (engine's policy)
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None
    context_overflow: str = TRUNCATE_MIDDLE  # or "error" (tui.overflow)

    def sampling(self) -> SamplingParams:
        """The sampling part alone."""
        return SamplingParams(**_fields_of(SamplingParams, self))


def _fields_of(cls: type, obj: object) -> dict[str, Any]:
    """obj's values of the dataclass cls's fields (cls a base class of obj's)."""
    return {f.name: getattr(obj, f.name) for f in fields(cls)}


@dataclass(frozen=True)
class EngineInfo:
    """What the UI shows about the loaded models."""

    target: str
    draft: str | None  # None: the target decodes alone
    chat_mode: bool  # False: base model, completion mode
    n_ctx: int
    drafter_choices: tuple[str, ...] = ("none",)
    calibration: str | None = None  # gamma auto without a measured cost curve: what it does


class ChatEngine(Protocol):
    """What the app needs from a loaded model pair (the fake in tests implements it too)."""

    @property
    def info(self) -> EngineInfo:
        """Names, mode and drafter choices of the loaded pair."""
        ...

    def set_drafter(self, choice: str) -> None:
        """Switch the drafter to one of info.drafter_choices (may load a model: slow)."""
        ...

    def measure_plain_call(self) -> float | None:
        """Seconds one plain (single-token) target call takes, measured; None if unknown."""
        ...

    def stream_reply(
        self, messages: Sequence[ChatMessage], settings: GenerationSettings
    ) -> Iterator[Event]:
        """Generate the assistant's next reply to messages, as engine events."""
        ...

    def close(self) -> None:
        """Free the models."""
        ...


EngineFactory = Callable[[], ChatEngine]


@dataclass(frozen=True, kw_only=True)
class ModelChoice(LoadOptions):
    """Which models to load (the target and --draft), and how: edgespec's LoadOptions,
    which the CLI's model options set as for every other command."""

    target: str
    draft: str = "none"

    @property
    def options(self) -> LoadOptions:
        """The loading options alone."""
        return LoadOptions(**_fields_of(LoadOptions, self))


def display_name(spec: str) -> str:
    """A short name for a model spec: the model name, or the .gguf file's stem."""
    return Path(spec).stem if spec.endswith(".gguf") or "/" in spec else spec


class LlamaChatEngine:
    """The real engine: a loaded ModelPair (target, optional drafter) and the target's
    template."""

    def __init__(self, choice: ModelChoice, target: LlamaModel, drafter: Drafter | None) -> None:
        self.choice = choice
        # the prompt lookup also drafts from earlier replies and prompts (a conversation
        # started over, a reply revised again), whichever drafter the person switches to
        self.pair = ModelPair(
            target, drafter, name=choice.target, draft=choice.draft, options=choice.options
        )
        self._draft_choice = "none" if drafter is None else self._choice_of(choice.draft)
        self.format = PromptFormat(self.pair.chat_format)

    @classmethod
    def load(cls, choice: ModelChoice) -> LlamaChatEngine:
        """Load the pair (raises edgespec errors: missing model, incompatible pair, ...)."""
        pair = load(choice.target, choice.draft, options=choice.options, history=False)
        return cls(choice, pair.target, pair.drafter)

    @property
    def target(self) -> LlamaModel:
        """The target model."""
        return self.pair.target

    @property
    def drafter(self) -> Drafter | None:
        """The drafter in use (None: the target decodes alone)."""
        return self.pair.drafter

    @property
    def history(self) -> Any:
        """The lookup history every drafter of this engine drafts from (a LookupHistory:
        ``load``, ``save``, ``documents``)."""
        return self.pair.history

    @staticmethod
    def _choice_of(draft: str | None) -> str:
        """The drafter choice a --draft spec is: ngram for ngram and auto (the same
        drafter), else the model's name."""
        spec = parse_draft_spec(draft)
        return NGRAM if spec.ngram and spec.model is None else display_name(draft or SELF_DRAFT)

    def _choices(self) -> tuple[str, ...]:
        out = ["none", NGRAM]
        if parse_draft_spec(self.choice.draft).model is not None:
            out.append(display_name(self.choice.draft))
        if display_name(self.choice.draft) != display_name(self.choice.target):
            out.append(SELF_DRAFT)
        return tuple(dict.fromkeys(out))

    @property
    def info(self) -> EngineInfo:
        """Names, mode and drafter choices of the loaded pair."""
        return EngineInfo(
            target=display_name(self.choice.target),
            draft=None if self.drafter is None else self._draft_choice,
            chat_mode=self.format.chat_mode,
            n_ctx=self.target.n_ctx,
            drafter_choices=self._choices(),
            calibration=self._calibration_note(),
        )

    def _calibration_note(self) -> str | None:
        """What gamma auto does about the target's cost curve (None: it is measured).

        Replies never wait for it: the first ones decode plainly and measure it between
        rounds (the rolled-back batches leave the conversation's cache as it was)."""
        return self.pair.calibration_note

    def set_drafter(self, choice: str) -> None:
        """Switch drafter: "none", "ngram" (prompt lookup), the --draft model, or "self"
        (a second copy of the target drafting for itself)."""
        if choice == self._draft_choice:
            return
        if choice not in self._choices():
            raise ValueError(f"unknown drafter {choice!r}")
        if choice in ("none", NGRAM):
            spec = choice
        else:  # "self": a second copy of the target, loaded as a draft model
            spec = self.choice.target if choice == SELF_DRAFT else self.choice.draft
        self.pair.set_drafter(spec)
        self._draft_choice = choice

    def measure_plain_call(self) -> float | None:
        """Time plain decoding once: the median target call of a short gamma-0 generation.

        The estimated speed-up divides (tokens x this) by the measured decode time.
        The target's KV cache is left holding this probe; the next reply's prefix
        reuse drops it.
        """
        plain = ModelPair(self.target, None, history=False)  # the probe is no lookup text
        probe = plain.tokenize("The sea", special=False)
        last = 0.0
        per_call: list[float] = []
        for ev in plain.stream_generate(probe, max_tokens=CALIBRATION_TOKENS, gamma=0):
            if isinstance(ev, RoundEvent):
                per_call.append(ev.stats.verify_s - last)
                last = ev.stats.verify_s
        per_call = sorted(per_call[1:] or per_call)  # the first call may include warm-up
        return per_call[len(per_call) // 2] if per_call else None

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The conversation as target token ids, ready for the assistant's reply."""
        text = self.format.render(messages)
        # a chat template writes special tokens as text; a base model's document has none
        return self.pair.tokenize(text, special=self.format.chat_mode)

    def stream_reply(
        self, messages: Sequence[ChatMessage], settings: GenerationSettings
    ) -> Iterator[Event]:
        """stream_generate over the whole conversation; the KV cache keeps the common prefix.

        A finished reply goes into the lookup history with its prompt (the pair's
        stream_generate does that). A conversation past the context loses its oldest
        turns first (settings.context_overflow): the events then start with a
        ContextTrimmed (tui.overflow)."""
        prompt, trimmed = fit_conversation(
            messages,
            self.prompt_tokens,
            mode=settings.context_overflow,
            max_tokens=settings.max_tokens,
            n_ctx=self.target.n_ctx,
        )
        events = self.pair.stream_generate(
            prompt,
            max_tokens=settings.max_tokens,
            sampling=settings.sampling(),
            gamma=settings.gamma,
            seed=settings.seed,
        )
        return events if trimmed is None else noted(trimmed, events)

    def close(self) -> None:
        """Free both models."""
        self.pair.close()
