"""The doctor's generations: the probe, the alternating timed runs, what they measured
(verify cost per batch size, acceptance), and the exactness check over all of them."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..backend import LlamaModel
from ..bench.runner import LoadedDrafter
from ..drafting import Drafter
from ..events import DoneEvent, RoundEvent
from ..speculation.loop import stream_generate
from . import predict
from .report import Exactness

PROBE_GAMMA = 4  # the probe's draft length, from whose acceptance gamma is chosen
PROBE_TOKENS = 32
Prompts = list[str | list[int]]
Say = Callable[[str], object]


@dataclass
class Run:
    """One timed greedy generation."""

    tokens: tuple[int, ...]
    generated: int
    decode_s: float
    draft_s: float
    rounds: list[tuple[int, int, float]] = field(default_factory=list)  # drafted, kept, verify s

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """(drafted, accepted) per round."""
        return [(d, a) for d, a, _ in self.rounds]


def run_one(
    model: LlamaModel, drafter: Drafter | None, prompt: str | list[int], max_tokens: int, g: int
) -> Run:
    """One greedy generation from empty caches, each round's draft, kept and verify time."""
    model.reset()
    rounds: list[tuple[int, int, float]] = []
    done: DoneEvent | None = None
    verified = 0.0
    for ev in stream_generate(
        model, prompt, drafter=drafter, max_tokens=max_tokens, gamma=g if drafter else 0
    ):
        if isinstance(ev, RoundEvent):
            rounds.append((ev.drafted, ev.accepted, ev.stats.verify_s - verified))
            verified = ev.stats.verify_s
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    s = done.stats
    return Run(done.tokens, s.generated, s.decode_s, s.draft_s, rounds)


def envelope(ratio: Callable[[int], float], timed: Collection[int]) -> Callable[[int], float]:
    """ratio, never below a smaller timed size's: what the gamma is chosen by, so that
    a size timed cheaper than a smaller one (by noise, or llama.cpp's staircase) is not
    bet on; the prediction itself prices what the runs measure."""
    sizes = sorted(timed)

    def priced(k: int) -> float:
        return max([ratio(k)] + [ratio(j) for j in sizes if j < k])

    return priced


def probe(
    model: LlamaModel,
    drafters: dict[str, LoadedDrafter],
    prompts: Prompts,
    step_s: float,
    ratio: Callable[[int], float],
    limits: tuple[Collection[int], int, int],
    say: Say,
) -> tuple[dict[str, int], dict[str, list[Run]]]:
    """Each drafter's gamma, the best predicted from a short run at PROBE_GAMMA on every
    prompt (whose outputs are checked for exactness too); its runs.

    step_s: a target step, as calibrated; limits: (the timed verify sizes, the longest
    gamma, max_tokens)."""
    timed, max_gamma, max_tokens = limits
    priced = envelope(ratio, timed)
    gammas: dict[str, int] = {}
    probes: dict[str, list[Run]] = {}
    for label, d in drafters.items():
        n = min(PROBE_TOKENS, max_tokens)
        runs = [run_one(model, d.fresh(), p, n, PROBE_GAMMA) for p in prompts]
        probes[label] = runs
        rounds = [r for run in runs for r in run.pairs]
        alpha = predict.alpha_of(rounds)
        drafted = sum(d for d, _ in rounds)
        if alpha is None or not drafted:
            gammas[label] = min(PROBE_GAMMA, max_gamma)
            continue
        c = sum(r.draft_s for r in runs) / drafted / step_s
        rate = sum(1 for d, _ in rounds if d > 0) / len(rounds)
        gammas[label], pred = predict.best_gamma(alpha, c, priced, timed, max_gamma, rate)
        say(
            f"probe {label}: alpha {alpha:.2f}, a draft token {c:.2f} of a step: gamma "
            f"{gammas[label]} ({pred:.2f}x predicted)"
        )
    return gammas, probes


def measure(
    model: LlamaModel,
    drafters: dict[str, LoadedDrafter],
    prompts: Prompts,
    gammas: dict[str, int],
    limits: tuple[int, int, float, float],
    say: Say,
) -> dict[str, list[Run]]:
    """Plain and every drafter on every prompt, alternating (order reversed on odd
    repetitions), until the repetitions are done or the next would end past the budget;
    each configuration's runs in prompt order, one repetition after another.

    limits: (max_tokens, repetitions, the start's perf_counter, the budget in seconds)."""
    max_tokens, reps, t0, budget_s = limits
    configs = ["plain", *drafters]
    runs: dict[str, list[Run]] = {c: [] for c in configs}
    for rep in range(reps):
        start = time.perf_counter()
        for p in prompts:
            for c in configs if rep % 2 == 0 else configs[::-1]:
                if c == "plain":
                    runs[c].append(run_one(model, None, p, max_tokens, 0))
                else:
                    runs[c].append(run_one(model, drafters[c].fresh(), p, max_tokens, gammas[c]))
        now = time.perf_counter()
        say(f"repetition {rep + 1}: {now - start:.1f} s")
        if now - t0 + (now - start) > budget_s:
            break
    return runs


def measured_ratios(runs: dict[str, list[Run]]) -> dict[int, float]:
    """Verify seconds of k rows over one row's, per k the timed runs verified: the median
    round of each size over the plain runs' median step (at the prompts' depth and the
    machine's load now, which the calibration may not share)."""
    plain = [v for r in runs["plain"] for d, _, v in r.rounds if d == 0]
    if not plain:
        return {}
    one = statistics.median(plain)
    by_size: dict[int, list[float]] = {}
    for config, rs in runs.items():
        if config != "plain":
            for r in rs:
                for d, _, v in r.rounds:
                    by_size.setdefault(d + 1, []).append(v)
    return {k: statistics.median(v) / one for k, v in sorted(by_size.items()) if k > 1}


def rate(runs: list[Run]) -> float:
    """Tokens per second of decode time over these runs."""
    decode = sum(r.decode_s for r in runs)
    return sum(r.generated for r in runs) / decode if decode > 0 else 0.0


def exactness(runs: dict[str, list[Run]], probes: dict[str, list[Run]], n: int) -> Exactness:
    """Every speculative run (and every later plain one) against the first plain run of
    its prompt: equal token for token (a probe, shorter, against its prefix)."""
    plain = runs["plain"][:n]
    mismatches: list[str] = []
    compared = rejections = count = 0
    checked = [*runs.items(), *((f"{c} probe", rs) for c, rs in probes.items())]
    for config, rs in checked:
        for i, run in enumerate(rs):
            if config == "plain" and i < n:
                continue
            ref = plain[i % n].tokens
            want = ref[: len(run.tokens)] if config.endswith("probe") else ref
            count += config != "plain"
            rejections += sum(1 for d, a in run.pairs if a < d)
            compared += len(run.tokens)
            if run.tokens != want:
                at = next(
                    (j for j, (a, b) in enumerate(zip(run.tokens, want, strict=False)) if a != b),
                    min(len(run.tokens), len(want)),
                )
                mismatches.append(f"{config}, prompt {i % n + 1}: differs from plain at token {at}")
    note = "" if rejections else "no draft was rejected: the check exercised no rollback"
    return Exactness(not mismatches, count, compared, rejections, mismatches, note)
