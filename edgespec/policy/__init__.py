"""The ``--gamma auto`` policy: how many tokens to draft each round, so that speculation
never makes a reply slower than plain decoding (docs/adaptive-policy.md has the detail).

**What it maximises.** Each round it picks the draft length g in 0..max_gamma with the
best expected tokens per second, E(g) / T(g), where

    E(g) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_g      (tokens the round yields)
    T(g) = verify(g + 1) + g * draft_step             (seconds the round costs)

and a_i is the chance that draft token i is kept given that 1..i-1 were. g = 0 is a
plain round (E = 1, T = verify(1)), so drafting is chosen only where it is predicted
to beat plain decoding, by MIN_GAIN (2%).

**What it measures.**
- ``verify(k)``, the target's cost curve: seconds for a k-row decode on this machine,
  model, thread count and offload (``costs``), cached per model; timed at once by
  ``edgespec calibrate`` or a batch at a time between a reply's rounds
  (``gap_calibration``), and corrected online by every verify's measured time.
- a_i, per draft position and per context (a lookup's match-length band, apart for a
  match by text, or whether the last round missed), as discounted counts that follow
  the text (``acceptance``);
  a lookup's proposals are also scored in plain rounds, so estimates recover.
- the time drafting has saved or lost against plain rounds (``AdaptiveGamma.saved_s``).

**When it bets nothing** (g = 0):
- no cost curve yet: the first rounds are plain while it is measured;
- no g beats the plain rate by MIN_GAIN, or needs a batch size the curve never timed;
- the round could lose more than the loss budget, saved_s + LOSS_SHARE (3%) x plain time
  of max_tokens and of the tokens made so far, so a reply with wrong estimates loses at
  most about 2 x LOSS_SHARE;
- a draft model as slow as its target (no g could pay even fully accepted): then it is
  not even probed; otherwise a one-token probe now and then, with doubling backoff;
- every PLAIN_REFRESH drafting rounds, one plain round re-measures the yardstick.

Beside other sequences in a parallel server's shared decode, a round is priced at the
whole decode's cost, so that a long draft that slows the others is chosen only if the
decode as a whole gains.
"""

from .acceptance import AcceptanceEstimate, context_key, position_prior
from .adaptive import DEFAULT_MAX_GAMMA, AdaptiveGamma, BatchShare
from .costs import CostCurve, load_or_measure, measure_curve
from .gap_calibration import GapCalibration, calibration_note, policy_curve

__all__ = [
    "DEFAULT_MAX_GAMMA",
    "AcceptanceEstimate",
    "AdaptiveGamma",
    "BatchShare",
    "CostCurve",
    "GapCalibration",
    "calibration_note",
    "context_key",
    "load_or_measure",
    "measure_curve",
    "policy_curve",
    "position_prior",
]
