"""The acceptance rules of speculative decoding, as pure functions.

Both take the draft's proposal x_1..x_g and the target's verdict at g + 1
positions and return (n_accepted, next_token): the first n_accepted draft
tokens are kept, then next_token (a correction, or the bonus token when all g
were accepted) comes from the target. One round thus always yields
n_accepted + 1 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..sampling import TokenDist, residual

#: next_token when the target has no token to give (a grammar admits none there)
NO_TOKEN = -1


def accept_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Temperature 0: keep draft tokens while they equal the target's argmax."""
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return n, int(target_argmax[n])


def accept_rejection(
    draft: Sequence[int],
    q: Sequence[TokenDist],
    p: Sequence[TokenDist],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """Modified rejection sampling (Leviathan et al. 2022; Chen et al. 2023).

    q[i] is the draft's processed distribution that x_{i+1} was sampled from;
    p[i] the target's at the same position; p has one more entry, for the bonus.
    The kept tokens are distributed exactly as samples from p.
    """
    for i, x in enumerate(draft):
        px, qx = p[i].prob(x), q[i].prob(x)
        # accept x with probability min(1, p(x) / q(x))
        if rng.random() * qx < px:
            continue
        # rejected: resample from norm(max(0, p - q)), which restores p exactly
        return i, residual(p[i], q[i]).sample(rng)
    # every draft token accepted: a free bonus token from p_{g+1} (if it has a support)
    bonus = p[len(draft)]
    return len(draft), bonus.sample(rng) if len(bonus.ids) else NO_TOKEN
