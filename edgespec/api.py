"""The library API behind ``import edgespec``: load a model pair, then generate or chat.

Layered as mlx-lm's (``load``, ``stream_generate``, ``generate``): ``load`` returns a
``ModelPair`` (the target model and its drafter), and ``stream_generate`` /
``generate`` / ``stream_chat`` / ``chat`` take it as their first argument, or are
called as its methods (``pair.generate(...)`` is ``generate(pair, ...)``). Every
front end of edgespec loads through the same ``LoadOptions``; the chat app and the
benchmarks use only this API.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from types import TracebackType
from typing import Any

from .backend import LlamaModel
from .chat_template import CHATML, ChatFormat
from .drafting import Drafter
from .drafting.build import AUTO, attach_history, build_drafter
from .drafting.history import LookupHistory
from .events import DoneEvent, Event
from .grammar import Grammar
from .loading import LoadOptions, load_pair, resolve_model
from .params import check_gamma
from .policy.adaptive import AdaptiveGamma
from .sampling import SamplingParams
from .speculation.loop import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS
from .speculation.loop import stream_generate as _engine_stream

#: The drafter ``load`` builds unless told otherwise: n-gram prompt lookup, which the
#: adaptive gamma turns off where it does not pay.
DEFAULT_DRAFT = AUTO

Messages = Sequence[Mapping[str, Any]]


def load(
    target: str,
    draft: str | None = DEFAULT_DRAFT,
    *,
    options: LoadOptions | None = None,
    history: bool = True,
    **changes: Any,
) -> ModelPair:
    """Load a target model and a drafter.

    Args:
        target: a ``.gguf`` path, a catalog model name (e.g. ``gemma-3-270m``) or a Hub
            name (``hf:OWNER/REPO[:QUANT]``); named models are fetched on first use.
        draft: ``auto`` (n-gram prompt lookup), ``ngram``, ``none`` (the target alone),
            a draft model (path or name; another vocabulary drafts through text) or
            ``ngram+MODEL``.
        options: how to load them (context, threads, GPU layers, RPC workers, ...).
        history: whether the prompt lookup also drafts from this pair's earlier
            generations (the output stays exactly the target's either way).
        **changes: LoadOptions fields over ``options``, e.g. ``n_ctx=2048``.

    Raises EdgespecError subclasses, each with a one-line message: ModelLoadError (no
    such file or name, unusable GGUF), ModelFetchError, InvalidParameterError (a bad
    option).
    """
    opts = (options or LoadOptions()).replace(**changes)
    model, drafter = load_pair(target, draft, opts)
    return ModelPair(
        model, drafter, name=target, draft=draft or "none", options=opts, history=history
    )


def stream_generate(
    pair: ModelPair,
    prompt: str | Sequence[int],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    sampling: SamplingParams | None = None,
    gamma: int | str | AdaptiveGamma = DEFAULT_GAMMA,
    seed: int | None = None,
    stop: Sequence[str] = (),
    grammar: Grammar | None = None,
    grammar_drafts: bool | None = None,
    logprobs: int | None = None,
) -> Iterator[Event]:
    """Generate from ``prompt`` (text, tokenized with BOS and special tokens, or token
    ids), yielding a ``TokenEvent`` per token (with rejected draft tokens as
    ``TokenKind.REJECTED``), a ``RoundEvent`` per target call and a final ``DoneEvent``.

    Args:
        max_tokens: most tokens to generate (it also stops at end of generation, a
            stop string, a full context or a grammar's end).
        sampling: temperature, top-k, top-p, min-p and penalties (default: greedy).
        gamma: draft tokens per round, or ``"auto"``: chosen each round from measured
            costs and acceptance (0 decodes with the target alone); or an
            ``AdaptiveGamma`` (``make_policy(pair.target, pair.drafter)``) carried
            across calls, which keeps what it learned of the acceptance.
        seed: makes a sampled generation repeatable.
        stop: strings that end the generation (not part of the text).
        grammar: constrains the output (``Grammar.from_gbnf`` / ``from_json_schema``).
        grammar_drafts: draft the text the grammar forces and skip the logits of rows
            where it admits one token (default: when the pair has a drafter).
        logprobs: n >= 0 puts each token's logprob and its n likeliest alternatives
            on its TokenEvent.

    The output is exactly the target's: greedy, token for token its plain decoding;
    sampled, the target's distribution. The target's KV cache keeps its longest
    common prefix with the previous call, so a follow-up only processes new tokens.
    Closing the iterator early leaves the caches holding committed tokens only.
    """
    drafter = pair.drafter
    if drafter is None:
        gamma = 0
    elif not isinstance(gamma, AdaptiveGamma):
        gamma = check_gamma(gamma)
    events = _engine_stream(
        pair.target,
        prompt,
        drafter=drafter,
        max_tokens=max_tokens,
        sampling=sampling,
        gamma=gamma,
        seed=seed,
        stop=stop,
        grammar=grammar,
        grammar_drafts=grammar_drafts,
        logprobs=logprobs,
    )
    try:
        for event in events:
            if isinstance(event, DoneEvent) and pair.history is not None:
                # what later generations may draft from: the prompt and its output
                prompt_tokens = pair.tokenize(prompt) if isinstance(prompt, str) else prompt
                pair.history.add([*prompt_tokens, *event.tokens])
            yield event
    finally:
        events.close()


def generate(
    pair: ModelPair,
    prompt: str | Sequence[int],
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    sampling: SamplingParams | None = None,
    gamma: int | str | AdaptiveGamma = DEFAULT_GAMMA,
    seed: int | None = None,
    stop: Sequence[str] = (),
    grammar: Grammar | None = None,
    grammar_drafts: bool | None = None,
    logprobs: int | None = None,
) -> DoneEvent:
    """``stream_generate`` to its end: the final ``DoneEvent`` (``text``, ``tokens``,
    ``stop_reason``, ``stats``). Same arguments."""
    done = None
    for event in stream_generate(
        pair, prompt, max_tokens=max_tokens, sampling=sampling, gamma=gamma, seed=seed,
        stop=stop, grammar=grammar, grammar_drafts=grammar_drafts, logprobs=logprobs,
    ):  # fmt: skip
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done


def stream_chat(
    pair: ModelPair,
    messages: Messages,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    sampling: SamplingParams | None = None,
    gamma: int | str | AdaptiveGamma = DEFAULT_GAMMA,
    seed: int | None = None,
    stop: Sequence[str] = (),
    grammar: Grammar | None = None,
    grammar_drafts: bool | None = None,
    logprobs: int | None = None,
) -> Iterator[Event]:
    """``stream_generate`` of the assistant's next reply to ``messages`` (dicts with
    ``role`` and ``content``), rendered with the target's chat template
    (``ModelPair.chat_prompt``). Same keyword arguments."""
    return stream_generate(
        pair, pair.chat_prompt(messages), max_tokens=max_tokens, sampling=sampling,
        gamma=gamma, seed=seed, stop=stop, grammar=grammar, grammar_drafts=grammar_drafts,
        logprobs=logprobs,
    )  # fmt: skip


def chat(
    pair: ModelPair,
    messages: Messages,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    sampling: SamplingParams | None = None,
    gamma: int | str | AdaptiveGamma = DEFAULT_GAMMA,
    seed: int | None = None,
    stop: Sequence[str] = (),
    grammar: Grammar | None = None,
    grammar_drafts: bool | None = None,
    logprobs: int | None = None,
) -> DoneEvent:
    """The assistant's next reply to ``messages``, generated to its end: the final
    ``DoneEvent`` (its ``text`` is the reply). Same keyword arguments as generate."""
    return generate(
        pair, pair.chat_prompt(messages), max_tokens=max_tokens, sampling=sampling,
        gamma=gamma, seed=seed, stop=stop, grammar=grammar, grammar_drafts=grammar_drafts,
        logprobs=logprobs,
    )  # fmt: skip


class ModelPair:
    """A loaded target model and its drafter (None: the target decodes alone).

    Made by ``load``, or from models loaded otherwise. A context manager: ``close``
    (or leaving the ``with`` block) frees both models.

    Attributes:
        target: the target model (edgespec's llama.cpp model and context).
        drafter: what proposes tokens for the target to verify, or None.
        name: the target as it was asked for (a path or a model name).
        draft: the drafter spec the pair was loaded with (``set_drafter`` changes it).
        options: how the models were loaded.
        history: the lookup history the prompt lookup drafts from (None: off).
    """

    stream_generate = stream_generate
    generate = generate
    stream_chat = stream_chat
    chat = chat

    def __init__(
        self,
        target: LlamaModel,
        drafter: Drafter | None = None,
        *,
        name: str | None = None,
        draft: str = "none",
        options: LoadOptions | None = None,
        history: bool = True,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.name = name or target.path.stem
        self.draft = draft if drafter is not None else "none"
        self.options = options or LoadOptions(n_ctx=target.n_ctx)
        self.history = LookupHistory(model=target.path.name) if history else None
        if drafter is not None and self.history is not None:
            attach_history(drafter, self.history)

    @cached_property
    def chat_format(self) -> ChatFormat | None:
        """The target's own chat template with its special tokens; None: it has none
        (read on first use: a pair made for plain generation never pays for it)."""
        template = self.target.chat_template()
        return ChatFormat.of(self.target, template) if template else None

    @property
    def n_ctx(self) -> int:
        """The context length in tokens."""
        return self.target.n_ctx

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """``text`` as target token ids, BOS added where the model wants it; ``special``
        parses special tokens written as text (as a chat template writes them)."""
        return self.target.tokenize(text, add_special=True, parse_special=special)

    def chat_prompt(
        self, messages: Messages, *, tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """``messages`` (and tool definitions, for a template that renders them) in the
        target's chat template, or ChatML where it has none (as llama-server does),
        tokenized and ending where the assistant's reply begins."""
        fmt = self.chat_format or ChatFormat.of(self.target, CHATML)
        return self.tokenize(fmt.render(messages, tools=tools))

    def set_drafter(self, draft: str | None) -> None:
        """Replace the drafter with the one ``draft`` names (as ``load``'s); the old
        one's draft model is freed once the new one has loaded."""
        new = build_drafter(
            self.target,
            draft,
            resolve=resolve_model,
            n_ctx=self.target.n_ctx,
            n_threads=self.options.n_threads,
            gpu_layers=self.options.draft_gpu_layers,
        )
        if new is not None and self.history is not None:
            attach_history(new, self.history)
        self._close_drafter()
        self.drafter = new
        self.draft = (draft or "none") if new is not None else "none"

    @property
    def calibration_note(self) -> str | None:
        """What ``gamma="auto"`` does about the target's cost curve on this machine
        (e.g. decodes plainly first while it measures it); None when it is measured or
        there is no drafter."""
        if self.drafter is None:
            return None
        from .policy import calibration_note

        return calibration_note(self.target)

    def _close_drafter(self) -> None:
        if self.drafter is not None and self.drafter.model is not None:
            self.drafter.model.close()

    def close(self) -> None:
        """Free both models (idempotent)."""
        self._close_drafter()
        self.drafter = None
        self.target.close()

    def __enter__(self) -> ModelPair:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        drafter = self.drafter.name if self.drafter is not None else "none"
        return f"ModelPair(target={self.name!r}, drafter={drafter!r}, n_ctx={self.n_ctx})"
