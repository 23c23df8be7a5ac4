"""One loaded model pair serving completions: text, fill-in-the-middle and chat.

``CompletionSession`` turns a request into prompt tokens (with the model's FIM
tokens or chat template) and ``CompletionSession.run`` streams the completion:
text deltas, then one ``CompletionResult``. It adds, on top of the engine's
end-of-generation and stop strings, the stops code needs: FIM control tokens and
the line rules of ``edgespec.completion.codestop``. Cancelling (the ``cancelled`` callback
turning true) closes the engine's generator, which leaves the KV caches holding
committed tokens only, so the next request reuses its common prefix as usual.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backend import LlamaModel
from ..chat_template import CHATML, ChatFormat
from ..drafting import Drafter
from ..drafting.build import attach_history
from ..drafting.history import LookupHistory
from ..errors import ContextFullError, InvalidParameterError
from ..events import DoneEvent, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
from ..grammar import Grammar
from ..loading import LoadOptions, load_pair
from ..params import check_gamma
from ..policy.adaptive import AdaptiveGamma
from ..sampling import SamplingParams
from ..speculation.loop import DEFAULT_GAMMA, stream_generate
from ..speculation.planning import make_policy
from .codestop import CodeStop
from .fim import ExtraChunk, FimPrompt, build_fim_prompt, fim_stop_tokens

AUTO = "auto"
#: A FIM completion keeps at most this many lines unless the request says otherwise.
DEFAULT_MAX_LINES = 24


@dataclass(frozen=True)
class CodeRules:
    """Line stop rules for a code completion (see edgespec.completion.codestop.CodeStop)."""

    suffix: str = ""
    at_line_start: bool = False
    max_lines: int | None = DEFAULT_MAX_LINES
    min_indent: int | None = None


@dataclass(frozen=True)
class CompletionRequest:
    """What to generate from a tokenized prompt."""

    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    code: CodeRules | None = None
    grammar: Grammar | None = None
    logprobs: int | None = None  # top alternatives per token (0: the token's own only)


@dataclass(frozen=True)
class CompletionResult:
    """The end of a completion.

    Attributes:
        text: the whole completion (what the deltas added up to).
        tokens: the completion's tokens, up to where it stopped.
        stop: "eog", "stop" (stop string), "fim_token", "max_lines", "indent",
            "suffix", "max_tokens", "context_full" or "cancelled".
        stats: the engine's statistics (work done, including tokens past a stop).
        token_events: with logprobs asked, each of ``tokens``' TokenEvent (its
            logprob and top_logprobs).
    """

    text: str
    tokens: tuple[int, ...]
    stop: str
    stats: Stats
    token_events: tuple[TokenEvent, ...] = ()

    @property
    def finish_reason(self) -> str:
        """OpenAI's finish_reason: "length" when a limit cut it short, else "stop"."""
        return "length" if self.stop in ("max_tokens", "context_full") else "stop"


class CompletionSession:
    """A target model and its drafter, and the prompt formats they support.

    Args:
        target: the target model.
        drafter: None for plain decoding, or an NgramDrafter / ModelDrafter.
        gamma: draft tokens per round, or "auto" (adaptive; 0 with no drafter).
        name: the model name clients send (e.g. the catalog name).
        history: whether the prompt lookup also drafts from earlier requests' prompts
            and outputs (a LookupHistory of this target's, shared by every slot).
    """

    def __init__(
        self,
        target: LlamaModel,
        drafter: Drafter | None,
        *,
        gamma: int | str,
        name: str,
        history: bool = True,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.history = (
            attach_history(drafter, LookupHistory(model=getattr(target, "path", Path()).name))
            if history and drafter is not None
            else None
        )
        self.gamma: int | str = gamma if drafter is not None else 0
        # gamma "auto": the cost curve is measured (or read from its cache) once, here.
        # The engine would do it on every call, and on a busy machine, whose curve is
        # not cached, each measurement would also empty the KV cache a request reuses.
        auto = drafter is not None and gamma == AUTO
        self._policy = make_policy(target, drafter) if auto else None
        # (nothing measured here: without a cached curve the first requests decode
        # plainly and measure it between rounds; see calibration_note)
        self.name = name
        self.fim = target.fim_tokens()
        self.stop_tokens = fim_stop_tokens(self.fim)
        self.chat_template = target.chat_template()
        self.chat_format = ChatFormat.of(target, self.chat_template or CHATML)
        info = target.vocab_info()
        self._bos = info.bos if info.add_bos and info.bos >= 0 else None

    def slot_sessions(self) -> list[CompletionSession]:
        """One session per sequence of the target's context: this one when it holds
        one sequence; else a view of sequence i each, with a drafter and an adaptive
        policy of its own (what one policy learns is its own slot's text). The slots
        share one measurement of the cost curve between rounds, taken by whichever
        slot runs alone; a curve measured goes to every slot's policy."""
        n_seq = getattr(self.target, "n_seq", 1)
        if n_seq == 1:
            return [self]
        from ..drafting.build import fork_drafter

        out = []
        for i in range(n_seq):
            s = copy.copy(self)
            s.target = self.target.sequence(i)
            s.drafter = fork_drafter(self.drafter, s.target, i)
            if self._policy is not None:
                assert s.drafter is not None
                s._policy = make_policy(s.target, s.drafter)
                s._policy.share = s.target
            out.append(s)
        policies = [s._policy for s in out if s._policy is not None]

        def spread(curve) -> None:
            for p in policies:
                p.set_curve(curve)

        lock = threading.Lock()  # one slot at a time times a batch
        for p in policies:
            p.gaps, p.gaps_lock, p.on_curve = policies[0].gaps, lock, spread
        return out

    @property
    def calibration_note(self) -> str | None:
        """What gamma auto does about the target's cost curve (None: it is measured)."""
        if self._policy is None or self._policy.gaps is None:
            return None
        from ..policy.gap_calibration import calibration_note

        return calibration_note(self.target)

    @property
    def has_fim(self) -> bool:
        """True when the model has FIM tokens; False means prefix-only completion."""
        return self.fim.usable

    @property
    def drafter_name(self) -> str:
        """The drafter's name, or "none"."""
        return self.drafter.name if self.drafter is not None else "none"

    # ------------------------------------------------------------------ prompts

    def text_prompt(self, text: str) -> list[int]:
        """A plain text prompt (BOS added where the model wants it; specials parsed)."""
        return self.target.tokenize(text, add_special=True, parse_special=True)

    def check_tokens(self, tokens: Sequence[int]) -> list[int]:
        """A token-id prompt, after checking every id is in the vocabulary."""
        bad = [t for t in tokens if not 0 <= t < self.target.n_vocab]
        if bad:
            raise InvalidParameterError(
                f"token id {bad[0]} is outside the vocabulary (0..{self.target.n_vocab - 1})"
            )
        return list(tokens)

    def fim_prompt(
        self,
        prefix: str,
        suffix: str,
        *,
        extra: Sequence[ExtraChunk] = (),
        prompt: str = "",
        max_tokens: int = 0,
    ) -> FimPrompt:
        """A FIM prompt (prefix-only without FIM tokens), cut to fit the context.

        Room for ``max_tokens`` (at most a quarter of the context) is kept free.
        """
        budget = self.target.n_ctx - max(1, min(max_tokens, self.target.n_ctx // 4))
        return build_fim_prompt(
            lambda s: self.target.tokenize(s, add_special=False, parse_special=False),
            self.fim,
            prefix,
            suffix,
            extra=extra,
            prompt=prompt,
            bos=self._bos,
            budget=budget,
        )

    def chat_prompt(
        self, messages: Sequence[Mapping[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        """The model's chat template (ChatML without one) applied to messages (and the
        tool definitions, for a template that renders them), tokenized."""
        return self.text_prompt(self.chat_format.render(messages, tools=tools))

    def _gamma(self) -> int | str | AdaptiveGamma:
        """The gamma for one request: the session's adaptive policy, or the fixed gamma.

        One policy serves every request, so what it learned about acceptance and costs
        carries over: a 20-60-token completion is too short to learn in, and a fresh
        policy per request lost 2-4% on ten such completions with two threads
        (benchmarks/bench_short_completions.py).
        """
        return self._policy if self._policy is not None else self.gamma

    @staticmethod
    def _emit(text: str, code: CodeStop | None, parts: list[str]) -> Iterator[str]:
        """Pass the engine's text through the code rules (if any); yield what they release."""
        piece = code.push(text) if code is not None else text
        if piece:
            parts.append(piece)
            yield piece

    def check_prompt(self, tokens: Sequence[int]) -> None:
        """Refuse an empty prompt, or one the context cannot hold with a token to spare."""
        if not tokens:
            raise InvalidParameterError("the prompt is empty")
        if len(tokens) >= self.target.n_ctx:
            raise ContextFullError(
                f"the prompt has {len(tokens)} tokens; the context holds {self.target.n_ctx}"
            )

    # ------------------------------------------------------------------ generation

    def run(
        self, req: CompletionRequest, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[str | CompletionResult]:
        """Stream the completion: text deltas (str), then one CompletionResult.

        ``cancelled`` is polled after every engine event; once it returns True the
        generation stops with stop reason "cancelled".
        """
        self.check_prompt(req.prompt)
        max_tokens = min(req.max_tokens, self.target.n_ctx - len(req.prompt))
        rules = req.code
        code = None
        if rules is not None:
            code = CodeStop(
                rules.suffix,
                at_line_start=rules.at_line_start,
                max_lines=rules.max_lines,
                min_indent=rules.min_indent,
            )
        parts: list[str] = []
        tokens: list[int] = []
        streamed = ""  # the engine's text as its TokenEvents carried it
        stats = Stats(prompt_tokens=len(req.prompt))
        stop: str | None = None  # our own stop, pending the end of the round
        engine_stop = StopReason.MAX_TOKENS
        gen = stream_generate(
            self.target,
            req.prompt,
            drafter=self.drafter,
            max_tokens=max_tokens,
            sampling=req.sampling,
            gamma=self._gamma(),
            seed=req.seed,
            stop=req.stop,
            grammar=req.grammar,
            logprobs=req.logprobs,
        )
        events: list[TokenEvent] = []
        try:
            for ev in gen:
                if cancelled():
                    stop = StopReason.CANCELLED.value
                    break
                if isinstance(ev, TokenEvent):
                    if ev.kind is TokenKind.REJECTED or stop is not None:
                        continue
                    if ev.token in self.stop_tokens:
                        stop = "fim_token"
                        continue
                    tokens.append(ev.token)
                    if req.logprobs is not None:
                        events.append(ev)
                    streamed += ev.text
                    yield from self._emit(ev.text, code, parts)
                    if code is not None and code.stop_reason is not None:
                        stop = code.stop_reason
                elif isinstance(ev, RoundEvent):
                    stats = ev.stats
                    if stop is not None:  # the round's statistics are in: done
                        break
                elif isinstance(ev, DoneEvent):
                    stats, engine_stop = ev.stats, ev.stop_reason
                    # text the engine held back (a possible stop string) or flushed
                    if ev.text.startswith(streamed):
                        yield from self._emit(ev.text[len(streamed) :], code, parts)
        finally:
            gen.close()  # on cancel or error: the caches keep committed tokens only
        if code is not None:
            tail = code.finish()
            if tail:
                parts.append(tail)
                yield tail
            if stop is None and code.stop_reason is not None:
                stop = code.stop_reason
        if self.history is not None:  # what later requests may draft from
            self.history.add([*req.prompt, *tokens])
        yield CompletionResult(
            "".join(parts), tuple(tokens), stop or engine_stop.value, stats, tuple(events)
        )


def load_session(
    target: str,
    draft: str | None = AUTO,
    *,
    gamma: int | str = DEFAULT_GAMMA,
    name: str | None = None,
    options: LoadOptions | None = None,
    **changes: Any,
) -> CompletionSession:
    """Load a target and drafter into a session.

    How they load is ``options`` with ``changes`` (LoadOptions fields) applied: e.g.
    ``rpc`` places the target's layers on llama.cpp RPC workers, ``parallel`` gives the
    target (and a draft model) that many sequences, one per server slot
    (``CompletionSession.slot_sessions``).

    ``draft`` is what --draft takes (``edgespec.drafting.build.parse_draft_spec``):
    none, ngram, a model, or auto, the default drafter, n-gram prompt lookup (free,
    and at its best on code, which repeats itself); ``gamma`` is the engine's
    adaptive gamma unless given. With gamma "auto" the target's cost curve is
    measured now if it is not cached yet, rather than during a request.
    """
    gamma = check_gamma(gamma)
    model, drafter = load_pair(target, draft, options, **changes)
    is_path = target.endswith(".gguf") or "/" in target
    default_name = model.path.stem if is_path else target
    return CompletionSession(model, drafter, gamma=gamma, name=name or default_name)
