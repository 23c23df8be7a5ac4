"""Each drafter's verdict and the recommendation, in words, with the numbers behind them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from .report import DrafterResult, Exactness, Recommendation

MIN_ADVANTAGE = 1.05  # a drafter must be predicted to beat plain by this much
DISAGREE = 0.15  # predicted and measured further apart than this: said so
CALIBRATION_OFF = 0.25  # a verify in the runs this far from the calibrated curve: said so


def verdict(d: DrafterResult) -> DrafterResult:
    """``d`` with its verdict: whether it pays here, and the arithmetic of why."""
    if d.alpha is None:
        why = "it drafted nothing on these prompts (no lookup match): it can only cost"
        return dataclasses.replace(d, verdict=why)
    row = (d.verify_ratio - 1.0) / d.gamma
    calibrated = ""
    if abs(d.verify_ratio / d.calibrated_ratio - 1.0) > CALIBRATION_OFF:
        calibrated = f"; the calibrated curve says {d.calibrated_ratio:.2f}x"
    parts = [
        f"a verify row costs {row:.2f} of a step here ({d.gamma + 1} rows "
        f"{d.verify_ratio:.2f}x one{calibrated})",
        f"the draft costs {d.draft_cost:.2f} of a step per token",
    ]
    if d.proposal_rate < 1.0:
        parts.append(f"it proposed in {d.proposal_rate:.0%} of rounds")
    parts.append(
        f"at acceptance {d.alpha:.2f} per token a round of {d.gamma} returns "
        f"{d.tokens_per_round:.2f} tokens for {d.round_cost:.2f} steps' cost"
    )
    if abs(d.tokens_per_round_constant / d.tokens_per_round - 1.0) > DISAGREE:
        parts.append(
            "acceptance is not the same at every draft position here (a lookup's draft "
            "is mostly right or wrong as a whole): the prediction takes each position's, "
            f"where a constant {d.alpha:.2f} would predict "
            f"{d.tokens_per_round_constant:.2f} tokens a round"
        )
    pays = "pays" if d.predicted >= MIN_ADVANTAGE else "does not pay"
    text = f"{pays} ({d.predicted:.2f}x predicted{_measured(d)}): " + "; ".join(parts)
    return dataclasses.replace(d, verdict=text)


def _measured(d: DrafterResult) -> str:
    if d.measured is None:
        return ""
    off = abs(d.predicted / d.measured - 1.0) if d.measured > 0 else float("inf")
    note = f", {off:.0%} from the prediction" if off > DISAGREE else ""
    return f", {d.measured:.2f}x measured{note}"


def recommend(
    results: Sequence[DrafterResult], exact: Exactness, ratio: Callable[[int], float]
) -> Recommendation:
    """The drafter and gamma with the best predicted speed-up, or plain decoding where
    none is predicted to beat it by MIN_ADVANTAGE (or exactness failed)."""
    if not exact.passed:
        return Recommendation(
            "none",
            None,
            "speculative output differed from plain here (see exactness): a "
            "broken build or backend; decode plainly until it is fixed",
        )
    best = max(results, key=lambda d: d.predicted)
    if best.predicted >= MIN_ADVANTAGE:
        return Recommendation(best.spec, best.gamma, f"{best.label} {best.verdict}")
    regime = f"8 verify rows cost {ratio(8):.2f}x one step"
    return Recommendation(
        "none",
        None,
        f"no drafter is predicted to beat plain decoding by {MIN_ADVANTAGE - 1:.0%} here "
        f"({regime}); the best, {best.label}, {best.verdict}",
    )
