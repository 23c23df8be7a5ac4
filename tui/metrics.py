"""Figures for the stats panel, computed from engine events only (no model access).

The speed-up against the target alone is an *estimate*: the target-alone time is
taken as (tokens generated) x (cost of one target call). The cost of a plain
single-token call is measured whenever a round without a draft runs (plain
decoding, earlier in the session); until then the measured cost of this reply's
verify calls stands in for it, which slightly overstates the target-alone time
because a verify call scores gamma + 1 tokens.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from edgespec import DoneEvent, RoundEvent, Stats


@dataclass
class PlainCallMeter:
    """Running mean of the target's single-token call cost, from rounds without a draft."""

    calls: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        """Record one plain target call."""
        if seconds > 0:
            self.calls += 1
            self.seconds += seconds

    @property
    def mean_s(self) -> float | None:
        """Mean seconds per plain call, or None before any was measured."""
        return self.seconds / self.calls if self.calls else None


@dataclass(frozen=True)
class SpeedupEstimate:
    """Estimated speed-up and how the target-alone time was obtained."""

    factor: float
    basis: str  # "plain" (measured single-token calls) or "verify" (verify-call cost)


@dataclass
class ReplyMetrics:
    """Live figures of one reply, updated from its RoundEvents and DoneEvent."""

    gamma: int = 0
    stats: Stats = field(default_factory=Stats)
    accepted_hist: Counter[int] = field(default_factory=Counter)
    done: bool = False
    stop_reason: str | None = None

    def on_round(self, ev: RoundEvent, meter: PlainCallMeter | None = None) -> None:
        """Fold in one round: histogram of accepted lengths, plain call cost, stats."""
        if ev.drafted > 0:
            self.accepted_hist[ev.accepted] += 1
        elif meter is not None:
            meter.add(ev.stats.verify_s - self.stats.verify_s)
        self.stats = ev.stats

    def on_done(self, ev: DoneEvent) -> None:
        """Final statistics of the reply."""
        self.stats = ev.stats
        self.done = True
        self.stop_reason = ev.stop_reason.value

    @property
    def speculative(self) -> bool:
        """True once any draft token was proposed."""
        return self.stats.drafted > 0

    def speedup(self, meter: PlainCallMeter | None = None) -> SpeedupEstimate | None:
        """Estimated speed-up against the target alone (None without drafts or timings)."""
        s = self.stats
        if not self.speculative or s.decode_s <= 0 or s.target_calls == 0:
            return None
        plain = meter.mean_s if meter is not None else None
        if plain is not None:
            return SpeedupEstimate(s.generated * plain / s.decode_s, "plain")
        if s.verify_s <= 0:
            return None
        per_call = s.verify_s / s.target_calls
        return SpeedupEstimate(s.generated * per_call / s.decode_s, "verify")

    def histogram_rows(self) -> list[tuple[int, int]]:
        """(accepted length, rounds) for every length 0..max(gamma, longest seen)."""
        top = max([self.gamma, *self.accepted_hist.keys()]) if self.accepted_hist else self.gamma
        return [(n, self.accepted_hist.get(n, 0)) for n in range(top + 1)]
