"""The speculative loop: draft, verify in one target call, accept, roll back.

Layered like mlx-lm: ``speculative_step`` is one round, ``stream_generate``
yields an event per token and per round, ``generate`` blocks and returns the
final ``DoneEvent``. gamma = 0 (or no drafter) is plain target-only decoding
through the same code, the baseline for every comparison.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .adaptive import AdaptiveGamma
from .backend import LlamaModel
from .detok import Detokenizer
from .drafting import CompositeDrafter, Draft, Drafter, KeepDrafting
from .errors import ContextFullError, InvalidParameterError
from .events import DoneEvent, Event, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
from .sampling import SamplingParams, TokenDist, greedy_tokens, process_logits
from .verify import accept_greedy, accept_rejection

DEFAULT_MAX_TOKENS = 256
DEFAULT_GAMMA = "auto"


@dataclass(frozen=True)
class RoundResult:
    """Outcome of one speculative round."""

    draft: list[int]
    draft_calls: int
    n_accepted: int
    next_token: int
    draft_s: float
    verify_s: float


def speculative_step(
    target: LlamaModel,
    drafter: Drafter | None,
    context: list[int],
    gamma: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    keep: KeepDrafting | None = None,
    *,
    proposal: Draft | None = None,
) -> RoundResult:
    """One round. Precondition: the target cache holds context[:-1].

    proposal: the drafter's proposal for this context when it was asked before gamma
    was chosen (a lookup); its first gamma tokens are verified.

    On return the target cache holds context + the accepted draft tokens, i.e.
    everything committed except next_token, restoring the precondition.
    """
    t0 = time.perf_counter()
    if drafter is None or gamma == 0:
        draft = Draft([], [])
    elif proposal is not None:
        draft = Draft(proposal.tokens[:gamma], proposal.q[:gamma])
    elif keep is not None:
        draft = drafter.propose(context, gamma, sampling, rng, keep=keep)
    else:
        draft = drafter.propose(context, gamma, sampling, rng)
    t1 = time.perf_counter()
    n_ctx_before = len(target.tokens)
    # one target call scores the pending token and every draft token: g + 1 rows of p
    logits = target.decode([context[-1], *draft.tokens], logits="all")
    if sampling.greedy:
        n, nxt = accept_greedy(draft.tokens, greedy_tokens(logits))
    else:
        q = draft.q or [_point_mass(x) for x in draft.tokens]
        n, nxt = accept_rejection(draft.tokens, q, process_logits(logits, sampling), rng)
    # keep the pending token and the accepted drafts; drop the rejected tail
    target.truncate(n_ctx_before + 1 + n)
    return RoundResult(draft.tokens, draft.model_calls, n, nxt, t1 - t0, time.perf_counter() - t1)


def _split_lookup(drafter: Drafter | None) -> tuple[Drafter | None, Drafter | None]:
    """(the lookup, asked before gamma is chosen; the drafter to use when it has nothing).

    A lookup drafter (``is_lookup``) is (itself, None); a composite whose first drafter
    is a lookup is (that lookup, its fallback); anything else (None, itself).
    """
    if drafter is not None and drafter.is_lookup:
        return drafter, None
    if isinstance(drafter, CompositeDrafter) and drafter.first.is_lookup:
        return drafter.first, drafter.fallback
    return None, drafter


def _point_mass(token: int) -> TokenDist:
    # a deterministic drafter proposes x with q(x) = 1
    return TokenDist(ids=np.array([token]), probs=np.array([1.0]))


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
) -> Iterator[Event]:
    """Generate from prompt, yielding TokenEvents, a RoundEvent per round, then a DoneEvent.

    The target's KV cache keeps the longest common prefix with earlier calls, so
    a follow-up turn only processes its new tokens. The TokenEvents' texts never
    hold any part of a stop string; with stop strings, text that could begin one
    is held back, so DoneEvent.text can end in text no TokenEvent carried (as it
    can end in bytes the detokenizer flushed): consumers add what is missing.
    """
    sampling = sampling or SamplingParams()
    policy = resolve_gamma(gamma, target, drafter)
    fixed_gamma = 0 if policy is not None or drafter is None else int(gamma)  # type: ignore[arg-type]
    if max_tokens < 0:
        raise InvalidParameterError(f"max-tokens must be >= 0, got {max_tokens}")
    if isinstance(prompt, str):
        prompt_tokens = target.tokenize(prompt, add_special=True, parse_special=True)
    else:
        prompt_tokens = list(prompt)
    if not prompt_tokens:
        raise InvalidParameterError("the prompt is empty")
    if len(prompt_tokens) >= target.n_ctx:
        raise ContextFullError(
            f"the prompt has {len(prompt_tokens)} tokens; the context holds {target.n_ctx}"
        )
    rng = np.random.default_rng(seed)
    t_start = time.perf_counter()
    cached = target.reuse_prefix(prompt_tokens)
    if len(prompt_tokens) - 1 > cached:
        target.decode(prompt_tokens[cached:-1], logits="none")
    if drafter is not None and (policy is not None or fixed_gamma > 0):
        drafter.prefill(prompt_tokens)
    lookup, fallback = _split_lookup(drafter)
    stats = Stats(
        prompt_tokens=len(prompt_tokens),
        prompt_cached=cached,
        prompt_s=time.perf_counter() - t_start,
    )
    context = list(prompt_tokens)
    detok = Detokenizer(target.token_bytes)
    streamed = 0  # characters of detok.text the TokenEvents have carried so far
    out_tokens: list[int] = []
    reason = StopReason.MAX_TOKENS
    rnd = 0
    while len(out_tokens) < max_tokens:
        room = target.n_ctx - len(context)
        if room <= 0:
            reason = StopReason.CONTEXT_FULL
            break
        rnd += 1
        # never draft past max_tokens or the context (the round adds g + 1 tokens), and
        # verify in one llama_decode: at most n_batch rows
        limit = max(0, min(max_tokens - len(out_tokens) - 1, room - 1, target.n_batch - 1))
        proposal, looked_up, lookup_s, source = None, None, 0.0, drafter
        if policy is not None and lookup is not None and limit > 0:
            # a lookup costs nothing: ask it first, so that the policy sees how long
            # its match is, and learns from the proposal even when it drafts nothing
            t0 = time.perf_counter()
            proposal = looked_up = lookup.propose(context, policy.max_gamma, sampling, rng)
            lookup_s = time.perf_counter() - t0
            if proposal.tokens or fallback is None:
                # sized to the proposal: the policy picks among the batch sizes it timed
                g = policy.choose(min(limit, len(proposal.tokens)), match_len=proposal.match_len)
            else:  # no match: the composite's draft model proposes, once gamma is chosen
                proposal, source = None, fallback
                g = policy.choose(limit)
        elif policy is not None:
            g = policy.choose(limit)
        else:
            g = min(fixed_gamma, limit)
        keep = policy.keep_drafting if policy is not None else None
        res = speculative_step(target, source, context, g, sampling, rng, keep, proposal=proposal)
        if policy is not None:
            # only a draft model's time teaches the policy what a draft step costs
            draft_s = 0.0 if proposal is not None else res.draft_s
            policy.observe(len(res.draft), res.n_accepted, res.verify_s, draft_s)
            if g == 0 and looked_up is not None:
                # (also when the composite's model stood in: an earlier proposal being
                # scored a token a round must move on with the text)
                policy.observe_free(looked_up.tokens, res.next_token)
        kept = [*res.draft[: res.n_accepted], res.next_token]
        kinds = [TokenKind.ACCEPTED] * res.n_accepted
        if res.n_accepted < len(res.draft):
            kinds.append(TokenKind.CORRECTION)
        else:
            kinds.append(TokenKind.BONUS if res.draft else TokenKind.PLAIN)
        tried, hit = _position_counts(stats, len(res.draft), res.n_accepted)
        stats = replace(
            stats,
            position_tried=tried,
            position_accepted=hit,
            drafted=stats.drafted + len(res.draft),
            accepted=stats.accepted + res.n_accepted,
            rounds=rnd,
            target_calls=stats.target_calls + 1,
            draft_calls=stats.draft_calls + res.draft_calls,
            draft_s=stats.draft_s + res.draft_s + lookup_s,
            verify_s=stats.verify_s + res.verify_s,
        )
        for i, (tok, kind) in enumerate(zip(kept, kinds, strict=True)):
            if i == res.n_accepted and res.n_accepted < len(res.draft):
                rejected = res.draft[res.n_accepted]
                yield TokenEvent(TokenKind.REJECTED, rejected, detok.peek([rejected])[0], rnd)
            if target.is_eog(tok):
                reason = StopReason.EOG
                break
            context.append(tok)
            out_tokens.append(tok)
            piece = detok.push(tok)
            hit = _find_stop(detok.text, stop, len(piece))
            if hit is not None:
                detok.text = detok.text[:hit]
                reason = StopReason.STOP_STRING
            # text that may be the start of a stop string is held back until it is not,
            # or a stream would carry part of a stop string that the final text drops
            end = len(detok.text) - (0 if hit is not None else _partial_stop(detok.text, stop))
            yield TokenEvent(kind, tok, detok.text[streamed:end], rnd)
            streamed = max(streamed, end)
            if reason is not StopReason.MAX_TOKENS:
                break
        stats = replace(stats, generated=len(out_tokens), wall_s=time.perf_counter() - t_start)
        yield RoundEvent(rnd, len(res.draft), res.n_accepted, stats)
        if reason is not StopReason.MAX_TOKENS:
            break
    if reason is not StopReason.STOP_STRING:
        detok.flush()
    stats = replace(stats, generated=len(out_tokens), wall_s=time.perf_counter() - t_start)
    yield DoneEvent(detok.text, tuple(out_tokens), reason, stats)


def resolve_gamma(
    gamma: int | str | AdaptiveGamma, target: LlamaModel, drafter: Drafter | None
) -> AdaptiveGamma | None:
    """An adaptive policy for gamma="auto" (or a given one), None for a fixed gamma."""
    if isinstance(gamma, AdaptiveGamma):
        if drafter is None:
            return None
        gamma.start_generation()
        return gamma
    if gamma == "auto":
        return make_policy(target, drafter) if drafter is not None else None
    if isinstance(gamma, str) or gamma < 0:
        raise InvalidParameterError(f"gamma must be a whole number >= 0 or 'auto', got {gamma!r}")
    return None


def make_policy(target: LlamaModel, drafter: Drafter) -> AdaptiveGamma:
    """Adaptive gamma from the (cached) cost curves of the target and a draft model."""
    from .costs import load_or_measure

    curve = load_or_measure(target)
    draft_model = drafter.model
    step = load_or_measure(draft_model, max_k=2).cost(1) if draft_model is not None else 0.0
    return AdaptiveGamma(curve, draft_step_s=step)


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


def _partial_stop(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of text that begins some stop string (0 if none)."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


def _find_stop(text: str, stops: Sequence[str], n_new: int) -> int | None:
    """Index in text where a stop string starts, looking only at matches the new piece made."""
    best = None
    for s in stops:
        if not s:
            continue
        i = text.find(s, max(0, len(text) - n_new - len(s) + 1))
        if i >= 0 and (best is None or i < best):
            best = i
    return best


def generate(target: LlamaModel, prompt: str | Sequence[int], **kwargs) -> DoneEvent:
    """Blocking form of stream_generate: returns the final DoneEvent."""
    done = None
    for event in stream_generate(target, prompt, **kwargs):
        if isinstance(event, DoneEvent):
            done = event
    assert done is not None
    return done
