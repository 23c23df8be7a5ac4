"""The app's only door to the engine: load a model pair, build prompts, stream a reply.

Everything model-specific the app needs goes through the small ``ChatEngine``
protocol, so tests can swap in a scripted fake that yields the same
``edgespec.events`` dataclasses. ``LlamaChatEngine`` is the real one, built on
edgespec's public API (``load_pair``, ``build_drafter``, ``stream_generate``,
``LlamaModel``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edgespec.backend import DEFAULT_RPC_TIMEOUT_S, LlamaModel
from edgespec.chat_template import ChatFormat
from edgespec.drafting import Drafter, build_drafter
from edgespec.drafting.build import NGRAM, attach_history, parse_draft_spec
from edgespec.drafting.history import LookupHistory
from edgespec.engine import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS, stream_generate
from edgespec.events import DoneEvent, Event, RoundEvent
from edgespec.loading import load_pair, resolve_model
from edgespec.sampling import (
    DEFAULT_MIN_P,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    SamplingParams,
)

from .prompt import ChatMessage, PromptFormat

SELF_DRAFT = "self"  # drafter choice: a second copy of the target drafts for itself
CALIBRATION_TOKENS = 6  # plain tokens generated once after loading, to time a target call


@dataclass(frozen=True)
class GenerationSettings:
    """Knobs a person can change between replies."""

    gamma: int | str = DEFAULT_GAMMA  # draft tokens per round, or "auto" (engine's policy)
    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None

    def sampling(self) -> SamplingParams:
        """The engine's SamplingParams (validates the values)."""
        return SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p
        )


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


@dataclass(frozen=True)
class ModelChoice:
    """Which models to load and how (the CLI's model options)."""

    target: str
    draft: str = "none"
    n_ctx: int | None = None
    n_threads: int | None = None
    gpu_layers: int = 0
    draft_gpu_layers: int = 0
    rpc: tuple[str, ...] = ()  # llama.cpp RPC workers for the target's layers (--rpc)
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S  # seconds a decode may wait on them


def display_name(spec: str) -> str:
    """A short name for a model spec: the model name, or the .gguf file's stem."""
    return Path(spec).stem if spec.endswith(".gguf") or "/" in spec else spec


class LlamaChatEngine:
    """The real engine: a target LlamaModel, an optional drafter, the target's template."""

    def __init__(self, choice: ModelChoice, target: LlamaModel, drafter: Drafter | None) -> None:
        self.choice = choice
        self.target = target
        self.drafter = drafter
        # the prompt lookup also drafts from earlier replies and prompts (a conversation
        # started over, a reply revised again), whichever drafter the person switches to
        self.history = LookupHistory(model=target.path.name)
        attach_history(drafter, self.history)
        self._draft_choice = "none" if drafter is None else self._choice_of(choice.draft)
        template = target.chat_template()
        self.format = PromptFormat(ChatFormat.of(target, template) if template else None)

    @classmethod
    def load(cls, choice: ModelChoice) -> LlamaChatEngine:
        """Load the pair (raises edgespec errors: missing model, incompatible pair, ...)."""
        target, drafter = load_pair(
            choice.target,
            choice.draft,
            n_ctx=choice.n_ctx,
            n_threads=choice.n_threads,
            gpu_layers=choice.gpu_layers,
            draft_gpu_layers=choice.draft_gpu_layers,
            rpc=choice.rpc,
            rpc_timeout=choice.rpc_timeout,
        )
        return cls(choice, target, drafter)

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
        if self.drafter is None:
            return None
        from edgespec.policy import calibration_note

        return calibration_note(self.target)

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
        new = build_drafter(
            self.target,
            spec,
            resolve=resolve_model,
            n_ctx=self.target.n_ctx,
            n_threads=self.choice.n_threads,
            gpu_layers=self.choice.draft_gpu_layers,
        )
        attach_history(new, self.history)
        self._close_drafter()
        self.drafter, self._draft_choice = new, choice

    def measure_plain_call(self) -> float | None:
        """Time plain decoding once: the median target call of a short gamma-0 generation.

        The estimated speed-up divides (tokens x this) by the measured decode time.
        The target's KV cache is left holding this probe; the next reply's prefix
        reuse drops it.
        """
        probe = self.target.tokenize("The sea", add_special=True, parse_special=False)
        last = 0.0
        per_call: list[float] = []
        for ev in stream_generate(self.target, probe, max_tokens=CALIBRATION_TOKENS, gamma=0):
            if isinstance(ev, RoundEvent):
                per_call.append(ev.stats.verify_s - last)
                last = ev.stats.verify_s
        per_call = sorted(per_call[1:] or per_call)  # the first call may include warm-up
        return per_call[len(per_call) // 2] if per_call else None

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The conversation as target token ids, ready for the assistant's reply."""
        text = self.format.render(messages)
        # a chat template writes special tokens as text; a base model's document has none
        return self.target.tokenize(text, add_special=True, parse_special=self.format.chat_mode)

    def stream_reply(
        self, messages: Sequence[ChatMessage], settings: GenerationSettings
    ) -> Iterator[Event]:
        """stream_generate over the whole conversation; the KV cache keeps the common prefix.

        A finished reply goes into the lookup history with its prompt."""
        prompt = self.prompt_tokens(messages)
        events = stream_generate(
            self.target,
            prompt,
            drafter=self.drafter,
            max_tokens=settings.max_tokens,
            sampling=settings.sampling(),
            gamma=settings.gamma if self.drafter is not None else 0,
            seed=settings.seed,
        )
        return self._remembered(prompt, events)

    def _remembered(self, prompt: list[int], events: Iterator[Event]) -> Iterator[Event]:
        try:
            for ev in events:
                if isinstance(ev, DoneEvent):
                    self.history.add([*prompt, *ev.tokens])
                yield ev
        finally:  # closed with this generator (a stopped reply): the caches as committed
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _close_drafter(self) -> None:
        if self.drafter is not None and self.drafter.model is not None:
            self.drafter.model.close()

    def close(self) -> None:
        """Free both models."""
        self._close_drafter()
        self.drafter = None
        self.target.close()
