"""The measurements of benchmarks/device/checks.py, each on loaded edgespec models.

Every function returns plain JSON-ready dicts. Nothing here knows about GPUs: the
caller loads the models with the offload it wants (``n_gpu_layers``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgespec import DoneEvent, LlamaModel, ModelDrafter, ModelPair, SamplingParams, process_logits

FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "
#: The prompts of tests/test_engine.py's greedy-equality test.
PROMPTS = (
    "Hello world",
    "the cat sat on the mat and",
    "Once upon a time, in a land far away,",
    "1 2 3 4 5",
    "café über naïve",
)
#: tests/test_sampling_distribution.py's sampling settings and prompt.
CHI_CONFIGS = {
    "topk8": SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    "topp-minp": SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.02),
}
CHI_PROMPT = "Once upon a time"
CHI_ALPHA = 2.5e-5


def generate(target: LlamaModel, prompt: str | list[int], *, drafter=None, **kwargs) -> DoneEvent:
    """edgespec's generate with ``drafter`` on ``target`` (None: plain), no lookup history."""
    return ModelPair(target, drafter, history=False).generate(prompt, **kwargs)


def filler_tokens(model: LlamaModel, n: int) -> list[int]:
    """At least ``n`` tokens of ordinary text."""
    tokens = model.tokenize(FILLER)
    while len(tokens) < n:
        tokens += tokens
    return tokens


def logit_diffs(
    model: LlamaModel, depths: Sequence[int] = (16, 300), sizes: Sequence[int] = (2, 4, 8, 9, 16)
) -> dict:
    """Largest |logit| difference between a k-token batch and k one-token decodes.

    Returns ``{"max_abs_diff": {"depth=D,k=K": float}, "identical": bool}``; identical
    means every batch row equalled its one-token row bit for bit.
    """
    tokens = filler_tokens(model, max(depths) + max(sizes))
    diffs: dict[str, float] = {}
    identical = True
    for depth in depths:
        model.reset()
        model.decode(tokens[:depth], logits="none")
        single = [model.decode([t])[0].copy() for t in tokens[depth : depth + max(sizes)]]
        for k in sizes:
            model.truncate(depth)
            batch = model.decode(tokens[depth : depth + k], logits="all")
            diffs[f"depth={depth},k={k}"] = max(
                float(np.abs(batch[i] - single[i]).max()) for i in range(k)
            )
            identical &= all(np.array_equal(batch[i], single[i]) for i in range(k))
    model.reset()
    return {"max_abs_diff": diffs, "identical": identical}


def verify_curve(model: LlamaModel, max_k: int = 48, reps: int = 5, depth: int = 64) -> dict:
    """Seconds of one decode of k tokens with logits on every row, for every k = 1..max_k.

    Sizes are interleaved within each repetition (load drift hits all alike); after
    one untimed warm-up round. Returns the median and fastest of each size and the
    median ratio to one token.
    """
    tokens = filler_tokens(model, depth + max_k)
    model.reset()
    model.decode(tokens[:depth], logits="none")
    samples: dict[int, list[float]] = {k: [] for k in range(1, max_k + 1)}
    for rep in range(reps + 1):
        for k in samples:
            model.truncate(depth)
            t0 = time.perf_counter()
            model.decode(tokens[depth : depth + k], logits="all")
            if rep:  # the first round warms up (CUDA graphs, allocations)
                samples[k].append(time.perf_counter() - t0)
    model.reset()
    median = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "depth": depth,
        "reps": reps,
        "median_s": [median[k] for k in samples],
        "min_s": [min(v) for v in samples.values()],
        "ratio": [median[k] / median[1] for k in samples],
    }


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def greedy_exactness(
    target: LlamaModel,
    drafts: dict[str, LlamaModel],
    gammas: Sequence[int] = (1, 2, 4, 8),
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = 48,
) -> dict:
    """Greedy speculative output == plain output, for each draft, gamma and prompt.

    Returns ``{"equal": bool, "cases": n, "mismatches": [...], "acceptance": {draft: rate}}``.
    """
    plain = {p: generate(target, p, max_tokens=max_tokens, gamma=0).tokens for p in prompts}
    mismatches, acceptance, cases = [], {}, 0
    for name, draft in drafts.items():
        drafter = ModelDrafter(draft)
        accepted = drafted = 0
        for gamma in gammas:
            for prompt in prompts:
                done = generate(target, prompt, drafter=drafter, max_tokens=max_tokens, gamma=gamma)
                cases += 1
                accepted += done.stats.accepted
                drafted += done.stats.drafted
                at = _first_difference(done.tokens, plain[prompt])
                if at is not None:
                    mismatches.append(
                        {"draft": name, "gamma": gamma, "prompt": prompt, "first_diff": at}
                    )
        acceptance[name] = accepted / drafted if drafted else None
    return {
        "equal": not mismatches,
        "cases": cases,
        "max_tokens": max_tokens,
        "mismatches": mismatches,
        "acceptance": acceptance,
    }


def _exact_first_two(
    target_path: Path, prompt: list[int], sp: SamplingParams, n_vocab: int, n_gpu_layers: int
) -> tuple[np.ndarray, np.ndarray]:
    """The target's processed distributions of the first and second generated token."""
    with LlamaModel(target_path, n_ctx=256, n_threads=1, n_gpu_layers=n_gpu_layers) as m:
        p1 = process_logits(m.decode(prompt, logits="last"), sp)[0]
        p2 = np.zeros(n_vocab)
        for x, px in zip(p1.ids, p1.probs, strict=True):
            m.truncate(len(prompt))
            p2 += px * process_logits(m.decode([int(x)], logits="last"), sp)[0].dense(n_vocab)
    return p1.dense(n_vocab), p2


def _pvalue(samples: list[int], probs: np.ndarray) -> tuple[float, int]:
    """Chi-square p-value of ``samples`` against ``probs``; also the count off its support."""
    from scipy import stats

    counts = np.bincount(samples, minlength=len(probs))
    support = probs * len(samples) > 0
    outside = int(counts[~support].sum())
    expected, observed = probs[support] * len(samples), counts[support]
    small = expected < 5  # pooled, so the chi-square approximation holds
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    expected = expected * (observed.sum() / expected.sum())  # float rounding of the sums
    return float(stats.chisquare(observed, expected).pvalue), outside


def chi_square(
    target_path: Path,
    target: LlamaModel,
    draft: LlamaModel,
    n_gpu_layers: int,
    runs: int = 2000,
    gamma: int = 3,
) -> dict:
    """tests/test_sampling_distribution.py's test: sampled speculative tokens 1 and 2
    follow the target's exact distributions (chi-square, ALPHA per test)."""
    prompt = target.tokenize(CHI_PROMPT, parse_special=True)
    out: dict = {"runs": runs, "alpha": CHI_ALPHA, "configs": {}}
    passed = True
    for name, sp in CHI_CONFIGS.items():
        p1, p2 = _exact_first_two(target_path, prompt, sp, target.n_vocab, n_gpu_layers)
        firsts, seconds, accepted, drafted = [], [], 0, 0
        drafter = ModelDrafter(draft)
        for seed in range(runs):
            done = generate(
                target, prompt, drafter=drafter, max_tokens=3, gamma=gamma, sampling=sp, seed=seed
            )
            firsts.append(done.tokens[0])
            seconds.append(done.tokens[1])
            accepted += done.stats.accepted
            drafted += done.stats.drafted
        pv1, off1 = _pvalue(firsts, p1)
        pv2, off2 = _pvalue(seconds, p2)
        ok = pv1 > CHI_ALPHA and pv2 > CHI_ALPHA and off1 == off2 == 0
        passed &= ok
        out["configs"][name] = {
            "pvalue_first": pv1,
            "pvalue_second": pv2,
            "off_support": off1 + off2,
            "acceptance": accepted / drafted if drafted else None,
            "passed": ok,
        }
    out["passed"] = passed
    return out


def plain_vs_speculative(
    target: LlamaModel,
    draft: LlamaModel,
    gammas: Sequence[int] = (4, 8),
    prompts: Sequence[str] = PROMPTS[:3],
    max_tokens: int = 64,
) -> dict:
    """Wall time of plain and speculative greedy generation over ``prompts``.

    One untimed warm-up of each first. Returns seconds, tokens per second, acceptance,
    the speed-up over plain and whether every output equalled plain's.
    """
    drafter = ModelDrafter(draft)

    def run(gamma: int) -> tuple[float, int, int, int, list[tuple[int, ...]]]:
        generate(target, prompts[0], drafter=drafter, max_tokens=8, gamma=gamma)  # warm-up
        t0 = time.perf_counter()
        outs, tokens, accepted, drafted = [], 0, 0, 0
        for prompt in prompts:
            done = generate(target, prompt, drafter=drafter, max_tokens=max_tokens, gamma=gamma)
            outs.append(done.tokens)
            tokens += len(done.tokens)
            accepted += done.stats.accepted
            drafted += done.stats.drafted
        return time.perf_counter() - t0, tokens, accepted, drafted, outs

    plain_s, plain_n, _, _, plain_out = run(0)
    result: dict = {
        "max_tokens": max_tokens,
        "prompts": len(prompts),
        "plain": {"seconds": plain_s, "tokens": plain_n, "tokens_per_s": plain_n / plain_s},
    }
    for gamma in gammas:
        s, n, acc, dr, outs = run(gamma)
        result[f"gamma={gamma}"] = {
            "seconds": s,
            "tokens": n,
            "tokens_per_s": n / s,
            "acceptance": acc / dr if dr else None,
            "speedup": plain_s / s * (n / plain_n if plain_n else 1.0),
            "equal_to_plain": outs == plain_out,
        }
    return result
