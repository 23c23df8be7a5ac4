"""A round's plan and outcome: which drafter proposes how many tokens (gamma).

The engine (``edgespec/speculation/loop.py``) asks a ``RoundPlanner`` before every round and
tells it what the round cost and yielded; with gamma "auto" the planner consults
the adaptive policy (``edgespec/policy``), asking a lookup drafter first so that
the policy knows the match it bets on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..backend import LlamaModel
from ..drafting import CompositeDrafter, Draft, Drafter, KeepDrafting
from ..params import check_gamma
from ..policy.adaptive import AdaptiveGamma
from ..sampling import SamplingParams, TopLogprobs


@dataclass(frozen=True)
class RoundResult:
    """Outcome of one speculative round."""

    draft: list[int]
    draft_calls: int
    n_accepted: int
    next_token: int  # NO_TOKEN where the grammar admits none
    draft_s: float
    verify_s: float
    logprobs: tuple[tuple[float, TopLogprobs], ...] | None = None  # per kept token, if asked
    n_grammar: int = 0  # the draft's first n_grammar tokens are the grammar's (forced text)
    certain: tuple[bool, ...] = ()  # per verify row: the grammar admitted one token there

    def is_certain(self, row: int) -> bool:
        """Whether verify row ``row`` was the grammar's only choice (no logits computed)."""
        return row < len(self.certain) and self.certain[row]

    @property
    def drafter_part(self) -> tuple[int, int] | None:
        """(drafted, accepted) of the drafter's own tokens, after the grammar's; None when
        the grammar's draft was rejected, so that the drafter's were never tested."""
        if self.n_accepted < self.n_grammar:
            return None
        return len(self.draft) - self.n_grammar, self.n_accepted - self.n_grammar


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


@dataclass(frozen=True)
class RoundPlan:
    """What one round drafts, chosen before it runs."""

    gamma: int
    source: Drafter | None  # the drafter speculative_step asks (None: plain decoding)
    proposal: Draft | None = None  # made before gamma was chosen (a lookup's): verified as is
    looked_up: Draft | None = None  # the lookup's proposal, also when source drafted instead
    lookup_s: float = 0.0  # time the lookup took (drafting time in the statistics)
    keep: KeepDrafting | None = None  # the adaptive policy's early stop for model drafters


class RoundPlanner:
    """Chooses each round's drafter and gamma, and lets the adaptive policy learn from it.

    With a fixed gamma (policy None) every round drafts min(gamma, limit) tokens. With
    the policy, a lookup drafter (or a composite's first drafter, a lookup) is asked
    first, and gamma is chosen knowing its proposal; a composite's draft model
    proposes only when the lookup has nothing.
    """

    def __init__(self, drafter: Drafter | None, policy: AdaptiveGamma | None, gamma: int) -> None:
        self.drafter = drafter
        self.policy = policy
        self.gamma = gamma
        self.lookup, self.fallback = _split_lookup(drafter)

    @property
    def drafts(self) -> bool:
        """Whether any round may draft (the drafter then needs the prompt first)."""
        return self.drafter is not None and (self.policy is not None or self.gamma > 0)

    def plan(
        self, context: list[int], limit: int, sampling: SamplingParams, rng: np.random.Generator
    ) -> RoundPlan:
        """The plan for a round that may draft up to limit tokens after context."""
        policy = self.policy
        if policy is None:
            return RoundPlan(min(self.gamma, limit), self.drafter)
        keep = policy.keep_drafting
        if self.lookup is None or limit <= 0:
            return RoundPlan(policy.choose(limit), self.drafter, keep=keep)
        # a lookup costs nothing: ask it first, so that the policy sees how long
        # its match is, and learns from the proposal even when it drafts nothing
        t0 = time.perf_counter()
        looked_up = self.lookup.propose(context, policy.max_gamma, sampling, rng)
        lookup_s = time.perf_counter() - t0
        if looked_up.tokens or self.fallback is None:
            # sized to the proposal: the policy picks among the batch sizes it timed
            g = policy.choose(
                min(limit, len(looked_up.tokens)),
                match_len=looked_up.match_len,
                by_text=looked_up.by_text,
            )
            return RoundPlan(g, self.drafter, looked_up, looked_up, lookup_s, keep)
        # no match: the composite's draft model proposes, once gamma is chosen
        return RoundPlan(policy.choose(limit), self.fallback, None, looked_up, lookup_s, keep)

    def observe(self, plan: RoundPlan, res: RoundResult) -> None:
        """Teach the adaptive policy (if any) what the planned round cost and yielded."""
        if self.policy is None or (part := res.drafter_part) is None:
            return
        drafted, accepted = part
        # only a draft model's time teaches the policy what a draft step costs (and only
        # in a round that ran it: a plain round's few microseconds are not a step)
        ran_model = plan.gamma > 0 and plan.proposal is None
        draft_s = res.draft_s if ran_model else 0.0
        self.policy.observe(drafted, accepted, res.verify_s, draft_s)
        if plan.gamma == 0 and plan.looked_up is not None:
            # (also when the composite's model stood in: an earlier proposal being
            # scored a token a round must move on with the text)
            self.policy.observe_free(plan.looked_up.tokens, res.next_token)


def resolve_gamma(
    gamma: int | str | AdaptiveGamma,
    target: LlamaModel,
    drafter: Drafter | None,
    max_tokens: int,
) -> AdaptiveGamma | None:
    """An adaptive policy for gamma="auto" (or a given one), None for a fixed gamma."""
    if isinstance(gamma, AdaptiveGamma):
        policy = gamma
    elif gamma == "auto":
        policy = make_policy(target, drafter) if drafter is not None else None
    else:
        check_gamma(gamma)
        return None
    if drafter is None or policy is None:
        return None
    policy.start_generation(max_tokens)
    return policy


def make_policy(target: LlamaModel, drafter: Drafter, *, calibrate: bool = False) -> AdaptiveGamma:
    """Adaptive gamma from the (cached) cost curves of the target and a draft model.

    Nothing is measured for the target now: without a final cached curve the policy
    starts from a provisional one (or plain rounds) and measures between rounds
    (gap_calibration.policy_curve). A draft model's one-token step is measured now if absent
    (two sizes, well under a second). calibrate: measure the target's curve in full
    now if it is not cached (a benchmark's warm-up: nothing measured while timed).
    """
    from ..policy.costs import load_or_measure
    from ..policy.gap_calibration import policy_curve

    if calibrate:
        load_or_measure(target)
    curve, gaps = policy_curve(target)
    draft_model = drafter.model
    step = load_or_measure(draft_model, max_k=2).cost(1) if draft_model is not None else 0.0
    policy = AdaptiveGamma(curve, draft_step_s=step)
    policy.gaps = gaps
    return policy
