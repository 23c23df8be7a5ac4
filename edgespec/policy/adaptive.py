"""Choose the draft length each round to maximise expected tokens per second.

With a_i the chance that draft token i is accepted given that 1..i-1 were, a
round that drafts g tokens yields E(g) = 1 + a_1 + a_1 a_2 + ... + a_1...a_g
tokens and costs T(g) = verify(g + 1) + draft(g) seconds. The policy picks the
g in 0..max_gamma with the best E(g) / T(g); g = 0 is plain decoding, so the
policy never chooses to lose (up to estimation error and the probes below). Where
the estimates are wrong, a loss budget (LOSS_SHARE) bounds what drafting can lose.

a_i are running estimates per position, discounted so that they follow the text
(code copying vs free writing). verify(k) is the calibrated cost curve, corrected
online by the measured verify times, per batch size once it has been seen, which
tracks context depth, machine load, and a calibration taken on a busy machine;
sizes not yet seen are interpolated between the ones that have been. Only batch
sizes the calibration timed are chosen: on CPUs the cost is a staircase (see
costs.CALIBRATION_SIZES), and an interpolated size can cost 25% more than priced.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from .acceptance import AcceptanceEstimate, context_key, position_prior
from .costs import MAX_VERIFY, CostCurve, could_pay, interpolate_ratios
from .gap_calibration import GapCalibration

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..backend import LlamaModel

# long drafts pay on CPUs too: a 48-row verify costs ~19x one token here, 17 rows 8.5x
DEFAULT_MAX_GAMMA = MAX_VERIFY - 1
SCALE_DISCOUNT = 0.9
FIRST_PROBE_AFTER = 8  # rounds without drafting before a one-token probe; doubles each time
PLAIN_REFRESH = 32  # drafting rounds in a row before a plain one re-measures the baseline
# measuring the cost curve between rounds takes at most this share of a generation's
# time so far, each batch priced before it runs: a first reply is at most 1.25x slower
GAP_SHARE = 0.2
MIN_GAIN = 1.02  # drafting must beat plain decoding's predicted rate by 2%: ties go to plain
# a loss budget: a round may lose against a plain round, if none of its draft is kept,
# at most what drafting has saved so far plus LOSS_SHARE of the plain time of the
# generation's max_tokens and of every token made so far (this session's, in a
# server), so that a short reply whose estimates are wrong loses a bounded share to
# plain decoding: at most 2 x LOSS_SHARE by max_tokens (a conservative bandit, Wu et
# al. 2016). The time saved or lost is measured, noise and depth included.
LOSS_SHARE = 0.03
UNKNOWN_HORIZON = 256  # max_tokens for the loss budget until a generation says its own


class BatchShare(Protocol):
    """What a policy asks of a sequence whose decodes are shared with others'."""

    def rows_elsewhere(self) -> int:
        """Rows the other working sequences put in the last shared decode."""
        ...

    def sequences_elsewhere(self) -> int:
        """How many other working sequences had rows in the last shared decode."""
        ...

    def alone(self) -> bool:
        """True when no other sequence is generating now."""
        ...

    def last_was_shared(self) -> bool:
        """True when this sequence's last decode carried other sequences' rows too."""
        ...


class AdaptiveGamma:
    """Per-round draft length from acceptance estimates and the measured cost curve.

    Args:
        verify: the target's cost curve (seconds for k-token batches).
        draft_step_s: seconds per draft token (0 for a lookup drafter).
        max_gamma: the longest draft considered.
    """

    def __init__(
        self, verify: CostCurve, *, draft_step_s: float, max_gamma: int = DEFAULT_MAX_GAMMA
    ) -> None:
        self.verify = verify
        self.draft_step_s = draft_step_s
        self.max_gamma = max_gamma
        self._timed = frozenset(verify.timed_sizes())  # batch sizes a round may verify
        # acceptance depends on where the text is: estimates are kept apart by context
        # (see _context_key), and each round uses the one for its own context
        self._estimates: dict[tuple[str, int], AcceptanceEstimate] = {}
        self._after_miss = False
        self._key = context_key(None, False)
        self._shadow: list[int] = []  # a lookup proposal being scored in plain rounds
        self._shadow_pos = 0  # its next position to score (0-based)
        self._shadow_key = self._key
        self._scale_num, self._scale_den = 0.0, 0.0  # discounted sums behind `scale`
        self._draft_num, self._draft_den = 0.0, 0.0  # ... and behind `draft_scale`
        self.k_scale: dict[int, float] = {}  # the same ratio per batch size, once observed
        # ... for batch sizes 1..max_gamma + 1 (index k - 1), interpolated between the
        # observed ones, so that an unseen size is priced like its observed neighbours
        self._size_ratio: list[float] = []
        self._idle_rounds = 0
        self._probe_after = FIRST_PROBE_AFTER
        self._since_plain = 0
        self.chosen: list[int] = []
        self.saved_s = 0.0  # drafting rounds' time saved against plain ones (< 0: lost)
        self._tokens = 0  # tokens made while this policy chose (the loss budget's base)
        self._horizon = UNKNOWN_HORIZON  # the generation's max_tokens (also in the base)
        # the curve being measured between rounds (gap_calibration.GapCalibration), if any
        self.gaps: GapCalibration | None = None
        self.gap_s = 0.0  # seconds measuring it in this generation
        # sequences sharing the target's decodes (a parallel server's slot; None alone)
        self.share: BatchShare | None = None
        self.on_curve: Callable[[CostCurve], None] | None = None  # told of a new curve
        self.gaps_lock: threading.Lock | None = None  # held while timing (gaps shared)

    def set_curve(self, verify: CostCurve) -> None:
        """Use a new cost curve (a better measured one); the online corrections,
        ratios to the old curve, start again. Acceptance estimates are kept."""
        if verify is self.verify:
            return
        self.verify = verify
        self._timed = frozenset(verify.timed_sizes())
        self._scale_num, self._scale_den = 0.0, 0.0
        self.k_scale = {}
        self._size_ratio = []

    def measure_gap(self, model: LlamaModel, elapsed_s: float) -> None:
        """Between rounds: time one more batch of the curve being measured (if any).

        elapsed_s: the generation's time so far; measuring takes at most GAP_SHARE of it.
        The model's KV cache is left as it was (the batch is rolled back), so this
        changes gamma choices only, never the output.
        """
        if self.gaps is None:
            return
        # priced before it runs, so that one 48-row batch cannot take a short reply's
        # time: it waits for a reply long enough to afford it
        if self.gap_s + self.gaps.price(self.gaps.next_size()) >= GAP_SHARE * elapsed_s:
            return
        t0 = time.perf_counter()
        if self.share is not None and not self.share.alone():
            return  # a decode shared with other sequences times them too
        lock = self.gaps_lock
        if lock is not None and not lock.acquire(blocking=False):
            return  # another slot is timing a batch of the same curve
        try:
            if self.gaps.done or self.gaps.stopped:  # (finished by another slot)
                self.gaps = None
                return
            curve = self.gaps.measure(model)
            self.gap_s += time.perf_counter() - t0
            if curve is not None:
                self.set_curve(curve)
                if self.on_curve is not None:
                    self.on_curve(curve)
            if self.gaps.done or self.gaps.stopped:
                self.gaps = None
        finally:
            if lock is not None:
                lock.release()

    def start_generation(self, max_tokens: int = UNKNOWN_HORIZON) -> None:
        """Forget what belongs to the last generation's text, keep what was learned.

        The acceptance estimates and cost scales carry over, so that a server's short
        completions (often too short to learn in) start from its earlier requests; so
        does the loss budget's account of time saved and tokens made.
        """
        self._horizon = max_tokens
        self._shadow, self._shadow_pos = [], 0
        self._after_miss = False
        self._key = context_key(None, False)
        self.chosen = []
        self.gap_s = 0.0

    @property
    def observed(self) -> float:
        """How much the policy has seen: discounted draft positions scored, all contexts."""
        return sum(sum(e.tries) for e in self._estimates.values())

    @property
    def scale(self) -> float:
        """Measured / calibrated verify time over all batch sizes (1.0 until measured).

        A discounted mean of the observed ratios alone: the calibration's own 1.0 is
        not averaged in, or unseen sizes would look cheap next to seen ones early on.
        """
        return self._scale_num / self._scale_den if self._scale_den else 1.0

    @property
    def draft_scale(self) -> float:
        """Measured / calibrated drafting time (1.0 until measured).

        The calibration times one step of the draft model alone; a round also catches
        the draft up on the tokens the last round added, and a cross-vocabulary drafter
        re-tokenises its text (about 30% more).
        """
        return self._draft_num / self._draft_den if self._draft_den else 1.0

    @property
    def accept(self) -> AcceptanceEstimate:
        """The acceptance estimates for the next round's context."""
        return self._estimate(self._key)

    def _estimate(self, key: tuple[str, int]) -> AcceptanceEstimate:
        if key not in self._estimates:
            self._estimates[key] = AcceptanceEstimate(self.max_gamma, prior=position_prior(key))
        return self._estimates[key]

    def round_cost(self, g: int) -> float:
        """Predicted seconds for a round drafting g tokens."""
        return self.round_costs(g)[g]

    def round_costs(self, n: int, *, free_draft: bool = False, shared: int = 0) -> list[float]:
        """round_cost(0), ..., round_cost(n) in one pass (free_draft: a lookup's tokens).

        shared: rows other sequences put in the same decode; a round then costs the
        whole decode's time, C(shared + g + 1), which every sequence in it waits for.
        """
        step = 0.0 if free_draft else self.draft_step_s * self.draft_scale
        if shared > 0:
            return [self.scale * self.verify.cost(shared + g + 1) + step * g for g in range(n + 1)]
        ratio = self._size_ratio
        return [
            (ratio[g] if g < len(ratio) else self.scale) * self.verify.cost(g + 1) + step * g
            for g in range(n + 1)
        ]

    def expected_tokens(self, g: int) -> float:
        """E(g): tokens a round drafting g yields, from the acceptance estimates."""
        total, run = 1.0, 1.0
        for a in self.accept.rates(g):
            run *= a
            total += run
        return total

    def choose(self, limit: int, *, match_len: int | None = None, by_text: bool = False) -> int:
        """Draft length for the next round, at most `limit` (room left in budget/context).

        match_len is the lookup proposal's agreement with its source (Draft.match_len),
        when the proposal is known before choosing; None for model drafters; by_text: the
        proposal matched as text (``Draft.by_text``). A lookup's tokens cost no draft
        time, even when a draft model stands behind it (composite).
        """
        self._key = context_key(match_len, self._after_miss, by_text=by_text)
        limit = min(limit, self.max_gamma)
        shared, others = 0, 0.0
        if self.share is not None and (shared := self.share.rows_elsewhere()) > 0:
            # beside other sequences the rate that counts is the whole decode's: their
            # tokens too (one each, and about half of their draft rows), over its time,
            # so that a long draft which slows everyone down is chosen only if it pays
            k = self.share.sequences_elsewhere()
            others = k + 0.5 * max(0, shared - k)
        costs = self.round_costs(limit, free_draft=match_len is not None, shared=shared)
        timed = self._timed if shared == 0 else range(1, self.max_gamma + 2)
        # what a round may lose against a plain one (beside others' rows: not capped)
        budget = self.loss_budget(costs[0]) if shared == 0 else float("inf")
        best_g, best_rate = 0, MIN_GAIN * (1.0 + others) / costs[0]
        total, run = 1.0, 1.0
        for g, a in enumerate(self.accept.rates(limit), start=1):
            run *= a
            total += run
            rate = (total + others) / costs[g]
            if rate > best_rate and g + 1 in timed and costs[g] - costs[0] <= budget:
                best_g, best_rate = g, rate
        if best_g > 0:
            self._since_plain += 1
            if self._since_plain > PLAIN_REFRESH:
                # the plain cost is the yardstick: measure it again now and then
                self._since_plain = 0
                best_g = 0
        else:
            self._since_plain = 0
        if (
            best_g == 0
            and limit > 0
            and self.draft_step_s > 0
            and self.keep_drafting(1, 1.0)  # else the probe's first token is refused anyway
            and self._probe_could_pay(limit)
            and costs[1] - costs[0] <= budget
        ):
            # the estimates can only recover if someone drafts: probe rarely, with backoff
            self._idle_rounds += 1
            if self._idle_rounds >= self._probe_after:
                self._idle_rounds = 0
                self._probe_after *= 2
                best_g = 1
        elif best_g > 0:
            self._idle_rounds = 0
            self._probe_after = FIRST_PROBE_AFTER
        self.chosen.append(best_g)
        return best_g

    def loss_budget(self, plain_s: float) -> float:
        """Seconds the next round may lose against a plain round of plain_s seconds."""
        return self.saved_s + LOSS_SHARE * (self._horizon + self._tokens) * plain_s

    def _probe_could_pay(self, limit: int) -> bool:
        """Is a probe worth it: could a draft pay, fully accepted, at the calibrated verify
        costs and the draft's measured step (its calibrated one until it has drafted)?

        The verify is priced as calibrated: the online corrections grow with depth, and
        deep in a long prompt drafting looked cheap. The draft step as measured: a round
        also catches the draft up on every token since its last one, and a cross-
        vocabulary draft re-tokenises; priced as calibrated, a draft model that costs
        about a target pass was probed for ever (through RPC workers, 0.5-3 s of probes
        in a 64-token reply, 10-44% slower than plain).
        """
        step = self.draft_step_s * self.draft_scale
        calibrated = [self.verify.cost(g + 1) + step * g for g in range(limit + 1)]
        return could_pay(calibrated, self._timed, MIN_GAIN)

    def keep_drafting(self, i: int, cumulative_conf: float) -> bool:
        """Early stop for model drafters: is draft token i (1-based) worth verifying?

        cumulative_conf is the draft's own probability of tokens 1..i. Token i adds
        about that many expected tokens and costs the verify-curve step; keep it if
        that beats the rate of a plain round (the floor every choice must beat).
        """
        costs = self.round_costs(i)
        marginal = costs[i] - costs[i - 1] - self.draft_step_s * self.draft_scale
        return cumulative_conf * costs[0] > marginal

    def observe(self, drafted: int, accepted: int, verify_s: float, draft_s: float = 0.0) -> None:
        """Update acceptance estimates and the cost scales from a finished round."""
        if draft_s > 0 and self.draft_step_s > 0:
            # a round that ran the draft model and kept nothing (the early stop refused
            # its first token) still paid the catch-up and one step: price it as one
            self._draft_num = SCALE_DISCOUNT * self._draft_num + draft_s
            self._draft_den = SCALE_DISCOUNT * self._draft_den + max(1, drafted) * self.draft_step_s
        self.accept.observe(drafted, accepted)
        self._tokens += accepted + 1
        shared = self.share is not None and self.share.last_was_shared()
        if drafted and not shared:
            # against plain rounds at today's price: accepted + 1 of them
            self.saved_s += (accepted + 1) * self.round_cost(0) - verify_s - draft_s
        if drafted:
            self._after_miss = accepted < drafted
            self._shadow = []  # the context moved past it
        k = drafted + 1
        predicted = self.verify.cost(k)
        if shared:
            return  # the decode's time was other sequences' too: no cost lesson
        if predicted > 0 and verify_s > 0:
            ratio = verify_s / predicted
            self._scale_num = SCALE_DISCOUNT * self._scale_num + ratio
            self._scale_den = SCALE_DISCOUNT * self._scale_den + 1.0
            if k not in self._timed:
                return  # (a short proposal) its interpolated price would skew its neighbours
            prev = self.k_scale.get(k)
            self.k_scale[k] = (
                ratio if prev is None else SCALE_DISCOUNT * prev + (1 - SCALE_DISCOUNT) * ratio
            )
            self._size_ratio = interpolate_ratios(self.k_scale, self.max_gamma + 1)

    def observe_free(self, proposed: list[int], produced: int) -> None:
        """A lookup drafter's proposal in a plain round, scored against the token produced.

        A match is what acceptance would have been (greedy) or has the same
        probability, p(x), as accepting a point-mass draft (sampling). Every plain
        round scores the first token of a fresh proposal (position 1); one earlier
        proposal that keeps matching goes on being scored, a token a round, at
        positions 2, 3, ..., so that deeper estimates recover too while nothing is
        drafted (without that, one miss at position 2 could stop drafting for good).
        """
        if self._shadow:
            pos = self._shadow_pos
            hit = self._shadow[pos] == produced
            self._estimate(self._shadow_key).observe_position(pos + 1, hit)
            self._shadow_pos += 1
            if not hit or self._shadow_pos == len(self._shadow):
                self._shadow = []
        if not proposed:
            return
        hit = proposed[0] == produced
        self.accept.observe_position(1, hit)
        if hit and not self._shadow and len(proposed) > 1:
            self._shadow, self._shadow_pos = list(proposed[: self.max_gamma]), 1
            self._shadow_key = self._key
