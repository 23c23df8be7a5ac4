"""One speculative round: draft, verify in one target call, accept, roll back.

``speculative_step`` is the whole of speculative decoding's mathematics (the draft's
q, the target's p, the acceptance rules of ``verify``); the loop
(``edgespec/speculation/loop.py``) plans the rounds and turns them into events.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..backend import LlamaModel
from ..drafting import Draft, Drafter, KeepDrafting
from ..sampling import SamplingParams, TokenDist, kept_logprobs
from ..sampling.context_processing import Shaper, argmaxes, dists, with_certain_rows
from .planning import RoundResult
from .verify import NO_TOKEN, accept_greedy, accept_rejection


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
    shaper: Shaper | None = None,
    logprobs: int | None = None,
    grammar_draft: Sequence[int] = (),
    certain_rows: bool = False,
) -> RoundResult:
    """One round. Precondition: the target cache holds context[:-1].

    grammar_draft: tokens the grammar forces next (``Shaper.grammar_draft``), drafted
    first (q = 1); the drafter's gamma tokens follow them (proposal: the drafter's
    proposal for context + grammar_draft when it was asked before gamma was chosen, a
    lookup's). shaper: penalties and grammar at the context's end (None: neither);
    logprobs: how many top logprobs to report per kept token (None: none);
    certain_rows: leave out the logits of rows where the grammar admits a single token.

    On return the target cache holds context + the accepted draft tokens, i.e.
    everything committed except next_token, restoring the precondition.
    """
    t0 = time.perf_counter()
    head = list(grammar_draft)
    if drafter is None or gamma == 0 or (head and target.is_eog(head[-1])):
        draft = Draft([], [])
    elif proposal is not None:
        draft = Draft(proposal.tokens[:gamma], proposal.q[:gamma])
    else:
        extras = {"keep": keep} if keep is not None else {}
        if shaper is not None:  # the draft walks its own copy: q shaped as p
            extras["shape"] = walk = shaper.fork()
            for x in head:
                walk.push(x)
        draft = drafter.propose([*context, *head], gamma, sampling, rng, **extras)
    tokens = [*head, *draft.tokens]
    if shaper is not None and (cut := shaper.admissible(tokens)) < len(tokens):
        tokens = tokens[:cut]
    t1 = time.perf_counter()
    n_ctx_before = len(target.tokens)
    # rows where the grammar admits a single token need no logits: p is a point mass there
    skip = certain_rows and shaper is not None and logprobs is None
    certain = shaper.certain(tokens) if skip else []  # type: ignore[union-attr]
    need = [i for i, c in enumerate(certain) if c is None]
    # one target call scores the pending token and every draft token: g + 1 rows of p
    rows = target.decode([context[-1], *tokens], logits="all" if not certain else need)
    raw = with_certain_rows(rows, certain, target.n_vocab) if certain else rows
    # row i penalised and masked after draft tokens 0..i-1 (each shaped when first read)
    logits = shaper.rows(raw, tokens) if shaper is not None else raw
    if sampling.greedy:  # (NO_TOKEN where the grammar admits nothing)
        n, nxt = accept_greedy(tokens, argmaxes(raw, shaper, tokens, certain))
        p = None
    else:
        q = [*map(_point_mass, head), *(draft.q or map(_point_mass, draft.tokens))]
        p = dists(logits, sampling, shaper)
        n, nxt = accept_rejection(tokens, q[: len(tokens)], p, rng)
    kept = [*tokens[:n], nxt][: n + (nxt != NO_TOKEN)]
    lp = None if logprobs is None else kept_logprobs(logits, p, kept, logprobs)
    # keep the pending token and the accepted drafts; drop the rejected tail
    target.truncate(n_ctx_before + 1 + n)
    verify_s = time.perf_counter() - t1
    return RoundResult(
        tokens, draft.model_calls, n, nxt, t1 - t0, verify_s, lp,
        n_grammar=min(len(head), len(tokens)), certain=tuple(c is not None for c in certain),
    )  # fmt: skip


def _point_mass(token: int) -> TokenDist:
    # a deterministic drafter proposes x with q(x) = 1
    return TokenDist(ids=np.array([token]), probs=np.array([1.0]))
