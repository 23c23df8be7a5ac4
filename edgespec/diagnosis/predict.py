"""The speed-up a drafter should give here, from three measured numbers (pure functions).

Leviathan et al. (2022), with the verify's cost as measured rather than assumed to be
one target step: a round drafting g tokens, each accepted with probability alpha
until the first rejection, returns

    E(g) = (1 - alpha^(g + 1)) / (1 - alpha)          tokens (g + 1 when alpha = 1)

for g * c + r(g + 1) target steps, where c is one draft token's cost and r(k) a
verify of k rows', both relative to one plain step (r(1) = 1). The predicted
speed-up over plain decoding is E(g) / (g * c + r(g + 1)). A lookup drafter (n-gram)
proposes in only some rounds: the others are plain steps (E = 1 for a cost of 1).

Acceptance need not be the same at every draft position: a lookup's draft is mostly
right or wrong as a whole (a copy that holds, or a match that was a coincidence), so
its later positions are accepted far more often than its first. The same formula with
a_i, the acceptance at position i given the positions before it were accepted, is

    E(g) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_g

(Leviathan's when every a_i is alpha); ``acceptance_by_position`` measures the a_i.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

#: a constant per-token acceptance (Leviathan's alpha), or one per draft position
Acceptance = float | Sequence[float]

# a verify of 8 rows costing at most this many single steps: bound by reading the
# weights (memory), where a longer verify is nearly free; at least COMPUTE_BOUND: bound
# by arithmetic, where each row costs a good part of a step
MEMORY_BOUND = 1.5
COMPUTE_BOUND = 3.0


def expected_tokens(alpha: Acceptance, gamma: int) -> float:
    """E(gamma): tokens one round returns (the accepted draft and the target's own), at a
    constant alpha or per-position acceptances (past the last, the last holds)."""
    if not isinstance(alpha, float | int):
        tokens = survive = 1.0
        for i in range(gamma):
            survive *= alpha[min(i, len(alpha) - 1)] if len(alpha) else 0.0
            tokens += survive
        return tokens
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def round_cost(gamma: int, draft_cost: float, ratio: Callable[[int], float]) -> float:
    """A round drafting gamma tokens, in plain steps: gamma * c + r(gamma + 1)."""
    return gamma * draft_cost + ratio(gamma + 1)


def speedup(
    alpha: Acceptance, gamma: int, draft_cost: float, ratio: Callable[[int], float]
) -> float:
    """Leviathan's predicted speed-up at a fixed gamma, with the measured verify ratio."""
    return expected_tokens(alpha, gamma) / round_cost(gamma, draft_cost, ratio)


def speedup_of_rounds(
    alpha: Acceptance, drafted: Sequence[int], draft_cost: float, ratio: Callable[[int], float]
) -> tuple[float, float, float]:
    """The same formula over the rounds a run made (their draft lengths, 0 for a round
    that drafted nothing): (speed-up, tokens per round, cost per round in steps).

    At a fixed gamma every round drafts gamma (but the last few, cut at max_tokens),
    and this is ``speedup``; a lookup's rounds without a proposal count as plain steps.
    """
    if not drafted:
        return 1.0, 1.0, 1.0
    tokens = sum(expected_tokens(alpha, d) for d in drafted)
    cost = sum(round_cost(d, draft_cost, ratio) for d in drafted)
    return tokens / cost, tokens / len(drafted), cost / len(drafted)


def best_gamma(
    alpha: float,
    draft_cost: float,
    ratio: Callable[[int], float],
    timed: Collection[int],
    max_gamma: int,
    proposal_rate: float = 1.0,
) -> tuple[int, float]:
    """The gamma in 1..max_gamma with the best predicted speed-up, and that speed-up.

    Only gammas whose verify size (gamma + 1) was timed are considered: on CPUs the
    cost is a staircase, and an interpolated size can cost more than priced.
    proposal_rate: the share of rounds in which the drafter proposes anything (a
    lookup's; 1 for a model); the others are plain steps.
    """
    p = proposal_rate
    best = (1, 0.0)
    for g in range(1, max_gamma + 1):
        if g + 1 not in timed:
            continue
        tokens = p * expected_tokens(alpha, g) + (1.0 - p)
        cost = p * round_cost(g, draft_cost, ratio) + (1.0 - p)
        if tokens / cost > best[1]:
            best = (g, tokens / cost)
    return best


def alpha_of(rounds: Sequence[tuple[int, int]]) -> float | None:
    """Per-token acceptance from (drafted, accepted) rounds, None when nothing was drafted.

    Each drafted position is a trial until the first rejection, so the maximum-likelihood
    estimate is accepted / (accepted + rounds that ended in a rejection) (as
    ``RunRecord.alpha`` in the bench); a fully accepted round has no failure.
    """
    accepted = sum(a for d, a in rounds if d > 0)
    rejections = sum(1 for d, a in rounds if d > 0 and a < d)
    return accepted / (accepted + rejections) if accepted + rejections else None


def acceptance_by_position(rounds: Sequence[tuple[int, int]]) -> list[float]:
    """a_1..a_n from (drafted, accepted) rounds, n the longest draft: a_i is the share of
    the rounds that drafted an i-th token, and accepted the ones before it, that
    accepted it too (a survival curve's product-limit estimate); [] when nothing was
    drafted. A position no round reached repeats the one before it."""
    out: list[float] = []
    for i in range(1, max((d for d, _ in rounds), default=0) + 1):
        reached = sum(1 for d, a in rounds if d >= i and a >= i - 1)
        kept = sum(1 for d, a in rounds if d >= i and a >= i)
        out.append(kept / reached if reached else out[-1])
    return out


def regime(ratio_8: float) -> str:
    """The verify-cost curve in a word, from cost(8 rows) / cost(1 row)."""
    if ratio_8 <= MEMORY_BOUND:
        return "memory-bound"
    if ratio_8 >= COMPUTE_BOUND:
        return "compute-bound"
    return "between memory- and compute-bound"
