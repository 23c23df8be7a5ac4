"""The target's cost curve measured between a reply's rounds, so that gamma auto never
waits for a calibration: the first rounds are plain, a provisional curve serves as
soon as the quick sizes are timed, and progress is cached (edgespec.policy.costs), so short
runs add up.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..backend import LlamaModel
from . import costs  # (its process registries by attribute: tests replace them)
from .costs import (
    CALIBRATION_SIZES,
    FILLER,
    MAX_VERIFY,
    ORIGIN_CACHE,
    ORIGIN_PENDING,
    ORIGIN_PROVISIONAL,
    ORIGIN_STORED,
    ORIGIN_UNWRITABLE,
    CostCurve,
    cached_curve,
    calibration_file,
    machine_key,
    read_cache,
    store_curve,
)

# Measured between rounds: these sizes first (then the policy may draft to them), each
# size GAP_REPS times, and more, up to GAP_MAX_REPS, until its two fastest timings
# agree (within NOISY_SPREAD); a busy moment only slows a timing, so the fastest counts.
QUICK_SIZES = (1, 4, 8, 16)
GAP_REPS = 2
GAP_MAX_REPS = 6


class GapCalibration:
    """The target's cost curve, measured one batch at a time between a reply's rounds.

    A batch of k filler tokens is decoded after the tokens the model holds and rolled
    back at once (``truncate``: exact), so the engine's KV cache is as it was and the
    output does not change; only the policy's choice of gamma does. Timed at the
    reply's depth rather than at CALIBRATION_DEPTH; the policy's online correction
    covers the difference. Progress is cached (a provisional entry), so short runs add
    up; once every size is settled (two timings that agree, or GAP_MAX_REPS of them)
    the curve is cached as final, flagged noisy if some size never agreed. (Starting
    over on a noisy curve, as it once did, never finished on a busy machine, nor on
    replies at different depths, so every process paid for measuring again.)
    """

    def __init__(self, model: LlamaModel, max_k: int) -> None:
        self.name = model.path.name
        self.max_k = max_k
        self.key = machine_key(model, max_k)
        self.path = calibration_file()
        quick = [k for k in QUICK_SIZES if k <= max_k]
        rest = sorted(({k for k in CALIBRATION_SIZES if k < max_k} | {max_k}) - set(quick))
        self.sizes = quick + rest  # measured in this order, a repetition at a time
        self.n_quick = len(quick)
        self.samples: dict[int, list[float]] = {k: [] for k in self.sizes}
        entry = read_cache(self.path).get(self.key) or {}
        try:  # progress an earlier process cached (pairs: size, seconds)
            pairs = zip(entry.get("gap_sizes", ()), entry.get("gap_seconds", ()), strict=True)
            for k, sec in pairs:
                if int(k) in self.samples and math.isfinite(sec) and sec > 0:
                    self.samples[int(k)].append(float(sec))
        except (TypeError, ValueError):
            pass
        self.curve = cached_curve(entry or None, self.key, max_k)
        if self.curve is None:
            self.curve = self._build()
        self._filler: list[int] = []
        self.measured = 0  # batches timed by this process
        # a model whose cache cannot drop its last tokens (recurrent or hybrid memory)
        # rebuilds the whole context to roll a batch back: then nothing more is
        # measured between rounds (`edgespec calibrate` measures it)
        self.stopped = False

    @property
    def done(self) -> bool:
        """Whether a final (not provisional) curve is in: nothing left to measure."""
        return self.curve is not None and not self.curve.provisional

    def next_size(self) -> int:
        """The next batch size to time: the quick sizes first, then the rest, per rep;
        only sizes not settled yet."""
        open_ = [k for k in self.sizes if not _settled(self.samples[k])] or self.sizes
        fewest = min(len(self.samples[k]) for k in open_)
        return next(k for k in open_ if len(self.samples[k]) == fewest)

    def price(self, k: int) -> float:
        """What timing a batch of k will likely cost: the fastest timing of the largest
        size timed up to k, scaled by k over it (0 before anything is timed)."""
        timed = [s for s in self.sizes if self.samples[s]]
        below = [s for s in timed if s <= k] or timed[:1]
        if not below:
            return 0.0
        s = max(below)
        return min(self.samples[s]) * k / s

    def measure(self, model: LlamaModel) -> CostCurve | None:
        """Time one batch after the model's tokens, roll it back; the curve so far."""
        if self.done or self.stopped:
            return self.curve
        k = self.next_size()
        depth = len(model.tokens)
        if depth + k > model.n_ctx:
            return self.curve  # no room in this context: another reply measures it
        if not self._filler:
            self._filler = model.tokenize(FILLER)
            while len(self._filler) < self.max_k:
                self._filler += self._filler
        redecodes = getattr(model, "redecodes", 0)
        try:
            t0 = time.perf_counter()
            model.decode(self._filler[:k], logits="all")
            self.samples[k].append(time.perf_counter() - t0)
        finally:
            model.truncate(depth)  # exactly the tokens the engine had
        if getattr(model, "redecodes", 0) != redecodes:
            self.stopped = True
        self.measured += 1
        curve = self._build()
        old = self.curve
        if curve is not None and (old is None or len(curve.timed) >= len(old.timed)):
            self.curve = curve  # (not a few sizes in place of a full, noisy curve)
        self._store()
        return self.curve

    def _build(self) -> CostCurve | None:
        """A curve from the sizes timed so far (None until the quick sizes are)."""
        sizes = [k for k in self.sizes if self.samples[k]]
        if not sizes or not all(self.samples[k] for k in self.sizes[: self.n_quick]):
            return None
        sizes.sort()
        best = [min(self.samples[k]) for k in sizes]
        if len(sizes) == 1:
            secs = [best[0] * k for k in range(1, self.max_k + 1)]
        else:
            slope = (best[-1] - best[-2]) / (sizes[-1] - sizes[-2])
            secs = [
                float(np.interp(k, sizes, best)) if k <= sizes[-1]
                else best[-1] + max(slope, 0.0) * (k - sizes[-1])
                for k in range(1, self.max_k + 1)
            ]  # fmt: skip
        complete = all(_settled(v) for v in self.samples.values())
        noisy = complete and not all(_agree(v) for v in self.samples.values())
        return CostCurve(
            model=self.name,
            key=self.key,
            seconds=tuple(secs),
            noisy=noisy,
            timed=tuple(sizes),
            provisional=not complete,
        )

    def _store(self) -> None:
        curve = self.curve
        theirs = cached_curve(read_cache(self.path).get(self.key), self.key, self.max_k)
        if theirs is not None and not theirs.provisional and (curve is None or curve.provisional):
            self.curve = theirs  # another process (or calibrate) finished it meanwhile
            costs._process_curves[self.key] = theirs
            costs._process_origins[self.key] = ORIGIN_CACHE
            return
        if curve is None:
            return
        if curve.provisional:
            pairs = [(k, s) for k, v in self.samples.items() for s in v]
            store_curve(
                self.path, curve, gap_sizes=[k for k, _ in pairs], gap_seconds=[s for _, s in pairs]
            )
            costs._process_origins[self.key] = ORIGIN_PROVISIONAL
        else:
            stored = store_curve(self.path, curve)
            costs._process_curves[self.key] = curve
            costs._process_origins[self.key] = ORIGIN_STORED if stored else ORIGIN_UNWRITABLE


def _agree(timings: list[float]) -> bool:
    """Whether a size's two fastest timings agree (within NOISY_SPREAD)."""
    fast = sorted(timings)[:2]
    return len(fast) == 2 and fast[1] <= costs.NOISY_SPREAD * fast[0]


def _settled(timings: list[float]) -> bool:
    """Whether a size needs no more timings between rounds."""
    return len(timings) >= GAP_REPS and (_agree(timings) or len(timings) >= GAP_MAX_REPS)


def policy_curve(
    model: LlamaModel, *, max_k: int = MAX_VERIFY
) -> tuple[CostCurve, GapCalibration | None]:
    """The curve --gamma auto starts from, without measuring anything now.

    A final cached curve, or one measured in full in this process (noisy or not):
    (it, None). Otherwise the process's GapCalibration for this
    model and machine, and its provisional curve, or, before its quick sizes are
    timed, a curve with only size 1 timed (the policy then decodes plainly).
    """
    max_k = min(max_k, model.n_batch)
    key = machine_key(model, max_k)
    if key in costs._process_curves:
        return costs._process_curves[key], None
    gaps = costs._gap_calibrations.get(key)
    if gaps is None:
        gaps = costs._gap_calibrations[key] = GapCalibration(model, max_k)
    if gaps.done:
        costs._process_curves.setdefault(key, gaps.curve)  # type: ignore[arg-type]
        costs._process_origins.setdefault(key, ORIGIN_CACHE)
        return gaps.curve, None  # type: ignore[return-value]
    if gaps.curve is not None:
        costs._process_origins[key] = ORIGIN_PROVISIONAL
        return gaps.curve, gaps
    costs._process_origins[key] = ORIGIN_PENDING
    return pending_curve(model, key, max_k), gaps


def pending_curve(model: LlamaModel, key: str, max_k: int) -> CostCurve:
    """A placeholder before anything is timed: only size 1, so every round is plain."""
    return CostCurve(
        model=model.path.name,
        key=key,
        seconds=tuple(float(k) for k in range(1, max_k + 1)),
        timed=(1,),
        provisional=True,
    )


def calibration_note(model: LlamaModel, *, max_k: int = MAX_VERIFY) -> str | None:
    """What --gamma auto does about the cost curve, for stderr or a panel; None if final."""
    curve, gaps = policy_curve(model, max_k=max_k)
    if gaps is None:
        return None
    if gaps.curve is None:
        return (
            "no cost curve for this model and machine yet: plain decoding first, the "
            "curve measured between tokens (`edgespec calibrate` measures it at once)"
        )
    return "provisional cost curve: refined between tokens (`edgespec calibrate` finishes it)"


def calibration_progress(model: LlamaModel, *, max_k: int = MAX_VERIFY) -> str | None:
    """How far measuring between rounds has got, for a line at the end; None if final."""
    gaps = costs._gap_calibrations.get(machine_key(model, min(max_k, model.n_batch)))
    if gaps is None or not gaps.measured:
        return None
    if gaps.done:
        return "cost curve measured between tokens and cached: later runs use it"
    settled = sum(_settled(v) for v in gaps.samples.values())
    have = sum(len(v) for v in gaps.samples.values())
    return (
        f"cost curve: {settled} of {len(gaps.sizes)} sizes settled, {have} timings so far, "
        "cached; later runs go on measuring between tokens"
    )
