"""The speculative loop: rounds of draft, verify, accept, roll back, as events.

Layered like mlx-lm: ``speculative_step`` (``step.py``) is one round, ``stream_generate``
yields an event per token and per round, ``generate`` blocks and returns the
final ``DoneEvent``. gamma = 0 (or no drafter) is plain target-only decoding
through the same code, the baseline for every comparison.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np

from ..backend import LlamaModel
from ..detok import Detokenizer
from ..drafting import Drafter
from ..errors import ContextFullError, InvalidParameterError
from ..events import DoneEvent, Event, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
from ..grammar import Grammar
from ..params import check_max_tokens
from ..policy.adaptive import AdaptiveGamma
from ..sampling import SamplingParams
from ..sampling.context_processing import for_generation
from ..sampling.stops import StopSequenceMatcher
from .planning import RoundPlanner, RoundResult, resolve_gamma
from .step import speculative_step
from .verify import NO_TOKEN

DEFAULT_MAX_TOKENS = 256
DEFAULT_GAMMA = "auto"


def stream_generate(
    target: LlamaModel,
    prompt: str | Sequence[int],
    *,
    drafter: Drafter | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    sampling: SamplingParams | None = None,
    gamma: int | str | AdaptiveGamma = DEFAULT_GAMMA,
    seed: int | None = None,
    stop: Sequence[str] = (),
    grammar: Grammar | None = None,
    grammar_drafts: bool | None = None,
    logprobs: int | None = None,
) -> Iterator[Event]:
    """Generate from prompt, yielding TokenEvents, a RoundEvent per round, then a DoneEvent.

    grammar constrains the output (p and q masked at every draft position);
    grammar_drafts: draft the text the grammar forces and skip the logits of rows where
    it admits one token (default: when there is a drafter, i.e. not plain decoding);
    logprobs
    (n >= 0) puts each kept token's logprob and its n likeliest alternatives on its
    TokenEvent, from the verify call's rows.

    The target's KV cache keeps the longest common prefix with earlier calls, so
    a follow-up turn only processes its new tokens. The TokenEvents' texts never
    hold any part of a stop string; with stop strings, text that could begin one
    is held back, so DoneEvent.text can end in text no TokenEvent carried (as it
    can end in bytes the detokenizer flushed): consumers add what is missing.
    """
    sampling = sampling or SamplingParams()
    check_max_tokens(max_tokens)
    policy = resolve_gamma(gamma, target, drafter, max_tokens)
    fixed_gamma = 0 if policy is not None or drafter is None else int(gamma)  # type: ignore[arg-type]
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)):
        raise InvalidParameterError(f"logprobs must be a whole number, got {logprobs!r}")
    if logprobs is not None and logprobs < 0:
        raise InvalidParameterError(f"logprobs must be >= 0, got {logprobs}")
    prompt_tokens = _prompt_tokens(target, prompt)
    shaper = for_generation(target, sampling, grammar, prompt_tokens)
    if grammar_drafts is None:
        grammar_drafts = drafter is not None
    rng = np.random.default_rng(seed)
    t_start = time.perf_counter()
    cached = target.reuse_prefix(prompt_tokens)
    if len(prompt_tokens) - 1 > cached:
        target.decode(prompt_tokens[cached:-1], logits="none")
    planner = RoundPlanner(drafter, policy, fixed_gamma)
    if drafter is not None and planner.drafts:
        if (bind := getattr(drafter, "bind", None)) is not None:
            bind(target)
        drafter.prefill(prompt_tokens)
    stats = Stats(
        prompt_tokens=len(prompt_tokens),
        prompt_cached=cached,
        prompt_s=time.perf_counter() - t_start,
    )
    out = _Output(target, prompt_tokens, stop)
    rnd = 0
    while out.reason is None and len(out.tokens) < max_tokens:
        room = target.n_ctx - len(out.context)
        if room <= 0:
            out.reason = StopReason.CONTEXT_FULL
            break
        if shaper is not None and shaper.complete():
            out.reason = StopReason.EOG  # the grammar admits only an end: no decode needed
            break
        rnd += 1
        # never draft past max_tokens or the context (the round adds g + 1 tokens), and
        # verify in one llama_decode: at most n_batch rows
        limit = max(0, min(max_tokens - len(out.tokens) - 1, room - 1, target.n_batch - 1))
        head = shaper.grammar_draft(limit) if shaper is not None and grammar_drafts else []
        plan = planner.plan([*out.context, *head], limit - len(head), sampling, rng)
        res = speculative_step(
            target, plan.source, out.context, plan.gamma, sampling, rng, plan.keep,
            proposal=plan.proposal, shaper=shaper, logprobs=logprobs, grammar_draft=head,
            certain_rows=grammar_drafts,
        )  # fmt: skip
        planner.observe(plan, res)
        stats = _add_round(stats, res, rnd, plan.lookup_s)
        yield from out.round_events(res, rnd)
        if shaper is not None:
            for tok in [*res.draft[: res.n_accepted], res.next_token]:
                if tok != NO_TOKEN:
                    shaper.push(tok)
        stats = replace(stats, generated=len(out.tokens), wall_s=time.perf_counter() - t_start)
        yield RoundEvent(rnd, len(res.draft), res.n_accepted, stats)
        if policy is not None and out.reason is None and len(out.tokens) < max_tokens:
            # the cost curve, if not measured yet: one batch, rolled back (the cache
            # holds out.context[:-1] again), after this round's tokens went out
            policy.measure_gap(target, stats.wall_s)
    # the cache as plain decoding leaves it: drafts accepted past the end (an end-of-
    # generation token or a stop string) go, so a next turn decodes the same positions
    # on the same kernels, speculative or plain (docs/architecture.md, "Prompt kernels")
    ended = out.reason in (StopReason.EOG, StopReason.GRAMMAR)  # (the last token decoded)
    target.truncate(min(len(target.tokens), len(out.context) - (not ended)))
    stats = replace(stats, generated=len(out.tokens), wall_s=time.perf_counter() - t_start)
    yield out.done(stats)


def _prompt_tokens(target: LlamaModel, prompt: str | Sequence[int]) -> list[int]:
    """The prompt as tokens (text is tokenized with BOS and special tokens), checked."""
    if isinstance(prompt, str):
        tokens = target.tokenize(prompt, add_special=True, parse_special=True)
    else:
        tokens = list(prompt)
    if not tokens:
        raise InvalidParameterError("the prompt is empty")
    if len(tokens) >= target.n_ctx:
        raise ContextFullError(
            f"the prompt has {len(tokens)} tokens; the context holds {target.n_ctx}"
        )
    return tokens


class _Output:
    """The generated tokens and text, and how much of the text the TokenEvents carried."""

    def __init__(self, target: LlamaModel, prompt_tokens: list[int], stop: Sequence[str]) -> None:
        self.context = list(prompt_tokens)  # the prompt and the output: what rounds continue
        self.tokens: list[int] = []
        self.reason: StopReason | None = None  # set when generation ends before max_tokens
        self._is_eog = target.is_eog
        self._detok = Detokenizer(target.token_bytes)
        self._stops = StopSequenceMatcher(stop)
        self._streamed = 0  # characters of the text the TokenEvents have carried so far

    def round_events(self, res: RoundResult, rnd: int) -> Iterator[TokenEvent]:
        """A TokenEvent per token the round commits, the rejected draft token's before its
        correction; ends early (setting reason) at end-of-generation or a stop string."""
        kept = [*res.draft[: res.n_accepted], res.next_token]
        kinds = [_draft_kind(res, i) for i in range(res.n_accepted)]
        if res.is_certain(res.n_accepted):
            kinds.append(TokenKind.FORCED)
        elif res.n_accepted < len(res.draft):
            kinds.append(TokenKind.CORRECTION)
        else:
            kinds.append(TokenKind.BONUS if res.draft else TokenKind.PLAIN)
        for i, (tok, kind) in enumerate(zip(kept, kinds, strict=True)):
            if i == res.n_accepted and res.n_accepted < len(res.draft):
                rejected = res.draft[res.n_accepted]
                yield TokenEvent(TokenKind.REJECTED, rejected, self._detok.peek([rejected])[0], rnd)
            if tok == NO_TOKEN:
                self.reason = StopReason.GRAMMAR
                return
            if self._is_eog(tok):
                self.reason = StopReason.EOG
                return
            self.context.append(tok)
            self.tokens.append(tok)
            lp, top = res.logprobs[i] if res.logprobs is not None else (None, ())
            yield TokenEvent(kind, tok, self._push(tok), rnd, lp, top)
            if self.reason is not None:
                return

    def _push(self, tok: int) -> str:
        """Commit tok; return the text that became safe to stream (maybe "")."""
        piece = self._detok.push(tok)
        cut = self._stops.find(self._detok.text, len(piece))
        if cut is not None:
            self._detok.text = self._detok.text[:cut]
            self.reason = StopReason.STOP_STRING
            end = cut
        else:
            # text that may be the start of a stop string is held back until it is not,
            # or a stream would carry part of a stop string that the final text drops
            end = len(self._detok.text) - self._stops.held_back(self._detok.text)
        text = self._detok.text[self._streamed : end]
        self._streamed = max(self._streamed, end)
        return text

    def done(self, stats: Stats) -> DoneEvent:
        """The final event: the whole text (with what was held back or is flushed now)."""
        reason = self.reason or StopReason.MAX_TOKENS
        if reason is not StopReason.STOP_STRING:
            self._detok.flush()
        return DoneEvent(self._detok.text, tuple(self.tokens), reason, stats)


def _draft_kind(res: RoundResult, i: int) -> TokenKind:
    """The kind of the round's accepted draft token i."""
    if res.is_certain(i):
        return TokenKind.FORCED
    return TokenKind.GRAMMAR if i < res.n_grammar else TokenKind.ACCEPTED


def _add_round(stats: Stats, res: RoundResult, rnd: int, lookup_s: float) -> Stats:
    """stats with round rnd added (a lookup's time counts as drafting; the grammar's
    draft is counted apart from the drafter's)."""
    drafted, accepted = res.drafter_part or (0, 0)
    tried, hit = _position_counts(stats, drafted, accepted)
    head = range(min(res.n_grammar, res.n_accepted + 1))  # the grammar's tokens verified
    kept = res.n_accepted + (res.next_token != NO_TOKEN)
    return replace(
        stats,
        position_tried=tried,
        position_accepted=hit,
        drafted=stats.drafted + drafted,
        accepted=stats.accepted + accepted,
        grammar_drafted=stats.grammar_drafted + sum(not res.is_certain(i) for i in head),
        grammar_accepted=stats.grammar_accepted
        + sum(not res.is_certain(i) for i in head if i < res.n_accepted),
        forced=stats.forced + sum(res.is_certain(i) for i in range(kept)),
        rounds=rnd,
        target_calls=stats.target_calls + 1,
        draft_calls=stats.draft_calls + res.draft_calls,
        draft_s=stats.draft_s + res.draft_s + lookup_s,
        verify_s=stats.verify_s + res.verify_s,
    )


def _position_counts(
    stats: Stats, drafted: int, accepted: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per draft position: how often it was verified, how often accepted."""
    n = max(len(stats.position_tried), drafted)
    tried = list(stats.position_tried) + [0] * (n - len(stats.position_tried))
    hit = list(stats.position_accepted) + [0] * (n - len(stats.position_accepted))
    for i in range(min(drafted, accepted + 1)):
        tried[i] += 1
        hit[i] += 1 if i < accepted else 0
    return tuple(tried), tuple(hit)


def generate(target: LlamaModel, prompt: str | Sequence[int], **kwargs: object) -> DoneEvent:
    """Blocking form of stream_generate: returns the final DoneEvent."""
    done = None
    for event in stream_generate(target, prompt, **kwargs):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done
