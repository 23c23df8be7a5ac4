"""Pure statistics of a benchmark: medians, paired ratios, projections, histograms, goals.

Everything here works on plain numbers and dicts, so it is unit-tested without a model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import DraftRatios

# the goals
NEVER_LOSES = 0.97  # adaptive >= 0.97x plain on every workload
EDIT_SPEEDUP = 2.0  # adaptive n-gram on code editing >= 2x plain
EDIT_VS_LOOKUP = 1.15  # ... and >= 1.15x llama-lookup at its best draft length
NEAR_BEST_FIXED = 0.95  # adaptive within 5% of the best fixed gamma

# how far a run's figures can be trusted
MIN_REPS = 2  # no goal is judged from fewer repetitions: one run has no spread to see
PLAIN_SPREAD = 0.10  # plain tok/s varying more than this across repetitions: a busy machine


@dataclass
class RunRecord(DraftRatios):
    """One timed generation (one configuration, one workload, one repetition)."""

    tokens_per_second: float
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    target_calls: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    other_s: float = 0.0
    decode_s: float = 0.0
    prompt_s: float = 0.0  # the prompt's time (0: not reported, as by llama-lookup)
    peak_rss_mib: float = 0.0
    accepted_lengths: list[int] = field(default_factory=list)  # per drafting round
    drafted_lengths: list[int] = field(default_factory=list)  # per drafting round, likewise

    @property
    def alpha(self) -> float | None:
        """The per-token acceptance probability, None without per-round counts.

        A round accepts draft tokens until the first rejection, so each drafted
        position is a trial up to the first failure: the maximum-likelihood
        estimate is accepted / (accepted + rounds that ended in a rejection).
        Rounds that accepted their whole draft end with no failure (censored).
        """
        if not self.drafted_lengths or len(self.drafted_lengths) != len(self.accepted_lengths):
            return None
        pairs = zip(self.accepted_lengths, self.drafted_lengths, strict=True)
        rejections = sum(1 for a, d in pairs if a < d)
        accepted = sum(self.accepted_lengths)
        return accepted / (accepted + rejections) if accepted + rejections else None


def median(values: Iterable[float]) -> float:
    """Median of values, 0.0 for none."""
    vals = list(values)
    return float(statistics.median(vals)) if vals else 0.0


def paired_ratios(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """a[i] / b[i] for the repetitions where both ran (not None) and b[i] > 0."""
    return [x / y for x, y in zip(a, b, strict=False) if x is not None and y]


def median_ratio(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Median of the per-repetition ratios a/b (None if no repetition has both)."""
    ratios = paired_ratios(a, b)
    return median(ratios) if ratios else None


def median_interval(values: Iterable[float], level: float = 0.90) -> tuple[float, float] | None:
    """A distribution-free interval that holds the median of what values were drawn from
    with at least `level` confidence: the j-th smallest and j-th largest value, for the
    largest j with P(Binomial(n, 1/2) < j) <= (1 - level) / 2 (the sign test's
    interval). None when n is too small for the level (fewer than 5 values at 90%)."""
    vals = sorted(values)
    n = len(vals)
    tail, j = 0.0, 0
    while j < n // 2:
        tail += math.comb(n, j) / 2**n  # P(B = j): at most j values below the median
        if tail > (1 - level) / 2:
            break
        j += 1
    return (vals[j - 1], vals[n - j]) if j > 0 else None


def expected_speedup(alpha: float, gamma: float, cost_ratio: float) -> float:
    """Leviathan et al. (2023), eq. 1 and thm 3.8: expected speed-up of speculative decoding.

    alpha: the chance a draft token is accepted; gamma: draft tokens per round;
    cost_ratio c: one draft step over one target step. Assumes a target call on
    gamma + 1 tokens costs one target step (memory-bandwidth-bound hardware):
    (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if gamma < 0 or cost_ratio < 0:
        raise ValueError("gamma and cost_ratio must be >= 0")
    tokens = gamma + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (gamma + 1.0)) / (1.0 - alpha)
    return tokens / (gamma * cost_ratio + 1.0)


def rounds_projection(tokens_per_call: float, gamma_mean: float, cost_ratio: float) -> float:
    """The same cost model applied to the rounds actually run: tokens per target call over
    the cost of a round (one target step plus gamma_mean draft steps of cost c)."""
    if tokens_per_call <= 0:
        return 0.0
    return tokens_per_call / (1.0 + cost_ratio * gamma_mean)


def verify_ceiling(seconds: Sequence[float]) -> tuple[int, float]:
    """The best speed-up any drafter could reach on this cost curve, and at which batch size.

    seconds[k-1] is one target call on k tokens. With every draft token accepted a
    call on k tokens yields k tokens, so the speed-up over plain decoding is at most
    max_k k * seconds[0] / seconds[k-1].
    """
    return ceiling_at(dict(enumerate(seconds, start=1)))


def ceiling_at(seconds: Mapping[int, float]) -> tuple[int, float]:
    """The same bound over the batch sizes timed: seconds[k] is one call on k tokens."""
    one = seconds.get(1, 0.0)
    if one <= 0:
        return 1, 1.0
    timed = [k for k in seconds if seconds[k] > 0]  # a 0 s timing is no timing
    best = max(timed, key=lambda k: k * one / seconds[k])
    return best, best * one / seconds[best]


def histogram(lengths: Iterable[int], max_len: int | None = None) -> list[int]:
    """counts[k] = rounds that accepted exactly k draft tokens, k = 0..max."""
    vals = list(lengths)
    top = max(vals, default=0) if max_len is None else max_len
    counts = [0] * (top + 1)
    for v in vals:
        counts[min(v, top)] += 1
    return counts


def summarise(
    records: Sequence[RunRecord | None],
    plain: Sequence[RunRecord | None] | None,
    cost_ratio: float | None,
) -> dict[str, Any]:
    """Medians over repetitions of one configuration; speed-up as the median paired ratio.

    records[i] and plain[i] are repetition i (None where a run failed); cost_ratio
    None leaves out the projection (plain decoding).
    """
    ok = [r for r in records if r is not None]
    tps = [r.tokens_per_second if r is not None else None for r in records]
    base = [p.tokens_per_second if p is not None else None for p in plain] if plain else None
    out: dict[str, Any] = {
        "reps": len(ok),
        "tokens_per_second": median(t for t in tps if t is not None),
        "tokens_per_second_all": tps,
        "speedup": median_ratio(tps, base) if base else None,
        "generated": median(r.generated for r in ok),
        "acceptance_rate": median(r.acceptance_rate for r in ok),
        "mean_accepted_per_call": median(r.mean_accepted_per_call for r in ok),
        "gamma_mean": median(r.gamma_mean for r in ok),
        "draft_s": median(r.draft_s for r in ok),
        "verify_s": median(r.verify_s for r in ok),
        "other_s": median(r.other_s for r in ok),
        "decode_s": median(r.decode_s for r in ok),
        # time to the whole reply, prompt and decode, per repetition (None: not reported)
        "reply_s_all": [
            r.prompt_s + r.decode_s if r is not None and r.prompt_s > 0 else None for r in records
        ],
        "peak_rss_mib": max((r.peak_rss_mib for r in ok), default=0.0),
        "accepted_hist": histogram(n for r in ok for n in r.accepted_lengths),
    }
    if cost_ratio is not None:
        per_call = out["mean_accepted_per_call"]
        out["projection"] = _projection(ok, out["gamma_mean"], per_call, cost_ratio)
    return out


def _projection(
    ok: Sequence[RunRecord], gamma: float, per_call: float, cost_ratio: float
) -> dict[str, Any]:
    """Leviathan's formula at the per-token acceptance alpha (median over repetitions),
    None where no repetition recorded per-round counts; and the rounds actually run."""
    alphas = [r.alpha for r in ok if r.alpha is not None]
    alpha = median(alphas) if alphas else None
    if gamma <= 0:
        formula: float | None = 1.0
    else:
        formula = expected_speedup(alpha, gamma, cost_ratio) if alpha is not None else None
    return {
        "label": "projection (not measured): memory-bandwidth-bound hardware",
        "cost_ratio": cost_ratio,
        "alpha": alpha,
        "formula": formula,
        "rounds": rounds_projection(per_call, gamma, cost_ratio),
    }


def spread(values: Iterable[float | None]) -> float | None:
    """(max - min) / median of the values that ran; None for fewer than two."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or median(vals) <= 0:
        return None
    return (max(vals) - min(vals)) / median(vals)


def over_ceiling(speedup: float | None, ceiling: float | None) -> bool:
    """True when a speed-up is above the verify-cost ceiling, which no drafter can pass
    (every draft accepted, free drafts): the timings were noise, not a speed-up."""
    return speedup is not None and ceiling is not None and speedup > ceiling


def best_key(rows: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The key of the row with the highest speed-up over plain (median of the paired
    per-repetition ratios, as the goals compare); None if no row has one."""
    scored = [k for k in rows if rows[k].get("speedup") is not None]
    if not scored:
        return None
    return max(scored, key=lambda k: rows[k]["speedup"])


def check_goals(workloads: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The issue's goals, each with the measured value and whether it is met.

    workloads[name] holds ``temperature``, ``auto`` ({drafter: {speedup,
    vs_best_fixed}}) and, where measured, ``vs_llama_lookup`` (adaptive n-gram
    tokens/s over llama-lookup's at its best draft length, median paired ratio). An
    auto entry's ``reps`` (repetitions it and plain both ran) and ``over_ceiling``
    (its speed-up is above the verify-cost ceiling) leave its goals unjudged (``met``
    None, ``not_judged`` the reason) below MIN_REPS repetitions or over the ceiling.
    """
    goals: list[dict[str, Any]] = []
    for wname, w in workloads.items():
        for drafter, a in w.get("auto", {}).items():
            if a.get("speedup") is not None:
                goals.append(
                    _goal(
                        f"never loses: {wname}, {drafter} auto vs plain",
                        a["speedup"],
                        NEVER_LOSES,
                        _why_not(a),
                    )  # fmt: skip
                )
            if a.get("vs_best_fixed") is not None:
                goals.append(
                    _goal(
                        f"near best fixed gamma: {wname}, {drafter} auto vs gamma "
                        f"{a.get('best_fixed_gamma')}",
                        a["vs_best_fixed"],
                        NEAR_BEST_FIXED,
                        _why_not(a),
                    )
                )
        if wname == "code_editing":
            ngram = w.get("auto", {}).get("ngram")
            if ngram and ngram.get("speedup") is not None:
                goals.append(_goal("code editing: ngram auto vs plain", ngram["speedup"],
                                   EDIT_SPEEDUP, _why_not(ngram)))  # fmt: skip
            if w.get("vs_llama_lookup") is not None:
                goals.append(
                    _goal(
                        f"code editing: ngram auto vs llama-lookup (draft "
                        f"{w.get('llama_lookup_best')})",
                        w["vs_llama_lookup"],
                        EDIT_VS_LOOKUP,
                        _why_not(ngram or {}),
                    )
                )
    return goals


def _goal(name: str, value: float, threshold: float, why_not: str | None = None) -> dict[str, Any]:
    """A goal with its verdict; ``met`` None (not judged) with the reason ``why_not``."""
    if why_not is not None:
        return {"goal": name, "value": value, "threshold": threshold, "met": None,
                "not_judged": why_not}  # fmt: skip
    return {"goal": name, "value": value, "threshold": threshold, "met": value >= threshold}


def _why_not(a: Mapping[str, Any]) -> str | None:
    """Why an adaptive row's figures judge no goal: too few repetitions (``reps``, the
    repetitions it and plain both ran) or a speed-up over the ceiling; None to judge."""
    reps = a.get("reps")
    if reps is not None and reps < MIN_REPS:
        return f"{reps} repetition{'s' if reps != 1 else ''}: at least {MIN_REPS} needed"
    if a.get("over_ceiling"):
        return "speed-up above the verify-cost ceiling: timing noise"
    return None
