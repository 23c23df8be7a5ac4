#!/usr/bin/env python3
"""Replay lookup drafting over recorded greedy outputs: tokens per target call and
predicted speed-up, for drafting rules that have not been built into the engine.

Greedy output does not depend on the drafter (that is the exactness theorem), so one
plain run per workload records the text every drafter must produce; a drafter's
rounds can then be replayed in milliseconds: what it proposes, how much of it the
target would keep, and what the round costs on the measured cost curve. That is how
a drafting rule is compared on the tuning half before it is built and benchmarked
for real (``edgespec bench --corpus``), which is the measurement that counts.

The replayed rules:

- ``edgespec``: the engine's own NgramDrafter and AdaptiveGamma, as shipped;
- ``edgespec tokens``: the same without the lookup by text (tokens only);
- ``edgespec+counts``: the same, but where the lookup proposes nothing (no match,
  or a short contested one), llama.cpp's count-based draft below, token by token;
- ``edgespec+counts<16``: the count-based draft for every match shorter than 16
  tokens (the lookup's own for longer ones);
- ``llama-lookup nD``: llama.cpp's ``common_ngram_cache_draft`` (context cache only,
  as ``llama-lookup`` runs without cache files), drafting up to D tokens;
- ``suffix``: SuffixDecoding's single-path speculation (arXiv 2411.04975, as in
  ArcticInference: the context's suffix tree, a draft per pattern length m that
  follows the most frequent continuation while its estimated probability stays at
  least MIN_TOKEN_PROB and its length at most MAX_SPEC_FACTOR * m, the draft of the
  highest score, the sum of its probabilities, kept), every draft verified whole;
- ``suffix+policy``: the same drafts, their length chosen by edgespec's adaptive
  policy (match length m).

Time is predicted from the cost curve (seconds per k-row decode) cached for this
machine, so ratios are verify-cost ratios: prompt processing and Python overhead are
left out. Runs each workload's plain decode once (greedy outputs are cached under
build/replay/), then replays; sampled workloads are skipped.

    .venv/bin/python benchmarks/replay_lookup.py --corpus build/corpus --split tuning
    .venv/bin/python benchmarks/replay_lookup.py --curve-from docs/bench/X.json

(``--sweep``, which varied the policy's constants by setting them in their modules,
and the ``edgespec latest`` arm are in commit c13d1c3; their findings are in
docs/history.md and docs/long-context.md.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from edgespec import (
    AdaptiveGamma,
    CostCurve,
    Draft,
    LlamaModel,
    ModelPair,
    NgramDrafter,
    SamplingParams,
    load_corpus,
    load_or_measure,
    render_workload,
    resolve_model,
)

GREEDY = SamplingParams(temperature=0.0)
MAX_GAMMA = 47  # the policy's longest draft (a 48-row verify)
RNG = np.random.default_rng(0)


def record(target: LlamaModel, corpus: Path, split: str, cache: Path) -> dict[str, dict]:
    """Each greedy workload's prompt tokens and plain greedy output (cached in `cache`)."""
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for w in load_corpus(corpus, split):
        if w.temperature > 0:
            continue
        path = cache / f"{w.name}.json"
        if path.exists():
            out[w.name] = json.loads(path.read_text())
            continue
        w = render_workload(target, w)
        prompt = target.tokenize(w.prompt, add_special=True, parse_special=True)
        target.reset()
        plain = ModelPair(target, None, history=False)
        done = plain.generate(prompt, max_tokens=w.max_tokens, sampling=GREEDY)
        rec = {"kind": w.kind, "prompt": prompt, "output": list(done.tokens)}
        path.write_text(json.dumps(rec))
        out[w.name] = rec
        print(f"recorded {w.name}: {len(prompt)} + {len(done.tokens)} tokens", file=sys.stderr)
    return out


def replay_edgespec(
    prompt: list[int],
    output: list[int],
    curve: CostCurve,
    counts: int | None = None,
    text: LlamaModel | None = None,
) -> tuple[float, int]:
    """Predicted seconds and target calls of the engine's lookup + adaptive policy
    (counts: the count-based draft stands in below that match length, 0: where the
    lookup has nothing; text: the lookup by text in this model's vocabulary, as the
    engine binds it, else tokens only)."""
    drafter = NgramDrafter() if counts is None else CountedDrafter(counts)
    if text is not None:
        drafter.bind(text)
    policy = AdaptiveGamma(curve, draft_step_s=0.0)
    policy.start_generation(len(output))
    drafter.prefill(prompt)
    context, done, seconds, calls = list(prompt), 0, 0.0, 0
    while done < len(output):
        limit = len(output) - done - 1
        draft = drafter.propose(context, policy.max_gamma, GREEDY, RNG)
        g = policy.choose(
            min(limit, len(draft.tokens)), match_len=draft.match_len, by_text=draft.by_text
        )
        proposed = draft.tokens[:g]
        accepted = _accepted(proposed, output[done:])
        produced = output[done + accepted]
        cost = curve.cost(g + 1)
        policy.observe(g, accepted, cost)
        if g == 0:
            policy.observe_free(draft.tokens, produced)
        context += output[done : done + accepted + 1]
        done += accepted + 1
        seconds += cost
        calls += 1
    return seconds, calls


class NgramCache:
    """llama.cpp's common_ngram_cache: per n-gram, how often each token followed it."""

    # common/ngram-cache.cpp: a draft stops when the sample or the top share is below
    MIN_SAMPLES = (2, 2, 1, 1)  # draft_min_sample_size_lax, by n-gram size 1..4
    MIN_PERCENT = (66, 50, 50, 50)  # draft_min_percent_lax

    def __init__(self, n_min: int = 1, n_max: int = 4) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.counts: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        self.seen = 0

    def update(self, tokens: Sequence[int]) -> None:
        """Count the successors of every n-gram ending at the tokens added since the last call."""
        for i in range(max(self.seen, 1), len(tokens)):
            for n in range(self.n_min, min(self.n_max, i) + 1):
                self.counts[tuple(tokens[i - n : i])][tokens[i]] += 1
        self.seen = len(tokens)

    def draft(self, tokens: Sequence[int], n_draft: int) -> list[int]:
        """common_ngram_cache_draft: token by token, the longest confident gram's top successor."""
        draft: list[int] = []
        seq = list(tokens)
        while len(draft) < n_draft:
            tok = None
            for n in range(self.n_max, self.n_min - 1, -1):
                part = self.counts.get(tuple(seq[-n:]))
                if not part:
                    continue
                top, top_count = part.most_common(1)[0]
                total = sum(part.values())
                if (
                    total < self.MIN_SAMPLES[n - 1]
                    or 100 * top_count < self.MIN_PERCENT[n - 1] * total
                ):
                    continue
                tok = top
                break
            if tok is None:
                break
            draft.append(tok)
            seq.append(tok)
        return draft


class CountedDrafter(NgramDrafter):
    """NgramDrafter with llama.cpp's count-based draft for short (or no) matches."""

    def __init__(self, below: int) -> None:
        super().__init__()
        self.below = below
        self.cache = NgramCache()

    def prefill(self, context: Sequence[int]) -> None:
        super().prefill(context)
        self.cache.update(context)

    def propose(self, context, n, sampling, rng, **kw) -> Draft:  # type: ignore[override]
        self.cache.update(context)
        draft = super().propose(context, n, sampling, rng, **kw)
        if self.below == 0 and draft.tokens:
            return draft
        if self.below and (draft.match_len or 0) >= self.below:
            return draft
        tokens = self.cache.draft(context, n)
        return Draft(tokens, [], match_len=1) if tokens else Draft([], [])


def replay_llama_lookup(
    prompt: list[int], output: list[int], curve: CostCurve, n_draft: int
) -> tuple[float, int]:
    """Predicted seconds and target calls of llama-lookup with -n n_draft."""
    cache = NgramCache()
    context, done, seconds, calls = list(prompt), 0, 0.0, 0
    cache.update(context)
    while done < len(output):
        draft = cache.draft(context, min(n_draft, len(output) - done - 1))
        accepted = _accepted(draft, output[done:])
        context += output[done : done + accepted + 1]
        cache.update(context)
        done += accepted + 1
        seconds += curve.cost(len(draft) + 1)
        calls += 1
    return seconds, calls


# SuffixDecoding's defaults in ArcticInference (suffix_decoding_*)
MIN_TOKEN_PROB = 0.1
MAX_SPEC_FACTOR = 1.0
MAX_PATTERN = 64  # the suffix tree's depth


def suffix_draft(context: Sequence[int], n: int) -> tuple[list[int], int]:
    """SuffixDecoding's best single-path draft for context (at most n tokens) and the
    pattern length it matched. Every earlier position whose preceding tokens agree with
    the context's last m is an occurrence of the length-m pattern (a node of the suffix
    tree); its continuation counts are the children's."""
    end, last = len(context), context[-1]
    agree: dict[int, int] = {}  # position after an occurrence -> pattern length matched
    for i in range(1, end):
        if context[i - 1] == last:
            a = 1
            while a < MAX_PATTERN and a < i and context[i - 1 - a] == context[end - 1 - a]:
                a += 1
            agree[i] = a
    best: tuple[float, list[int], int] = (0.0, [], 0)
    for m in sorted(set(agree.values())):
        live = [i for i, a in agree.items() if a >= m]
        draft: list[int] = []
        prob, score = 1.0, 0.0
        while live and len(draft) < min(n, int(MAX_SPEC_FACTOR * m)):
            j = len(draft)
            live = [i for i in live if i + j < end]
            counts = Counter(context[i + j] for i in live)
            if not counts:
                break
            tok, c = counts.most_common(1)[0]
            prob *= c / len(live)
            if prob < MIN_TOKEN_PROB:
                break
            draft.append(tok)
            score += prob
            live = [i for i in live if context[i + j] == tok]
        if score > best[0]:
            best = (score, draft, m)
    return best[1], best[2]


def replay_suffix(
    prompt: list[int], output: list[int], curve: CostCurve, policy: bool
) -> tuple[float, int]:
    """Predicted seconds and target calls of SuffixDecoding's drafts over the context
    (policy: their length chosen by edgespec's adaptive policy, else verified whole)."""
    chooser = AdaptiveGamma(curve, draft_step_s=0.0) if policy else None
    if chooser is not None:
        chooser.start_generation(len(output))
    context, done, seconds, calls = list(prompt), 0, 0.0, 0
    while done < len(output):
        limit = min(len(output) - done - 1, MAX_GAMMA)
        draft, m = suffix_draft(context, limit)
        g = len(draft) if chooser is None else chooser.choose(len(draft), match_len=m)
        accepted = _accepted(draft[:g], output[done:])
        cost = curve.cost(g + 1)
        if chooser is not None:
            chooser.observe(g, accepted, cost)
            if g == 0:  # as the engine does: a plain round still scores the proposal
                chooser.observe_free(draft, output[done])
        context += output[done : done + accepted + 1]
        done += accepted + 1
        seconds += cost
        calls += 1
    return seconds, calls


def _accepted(draft: Sequence[int], truth: Sequence[int]) -> int:
    n = 0
    while n < len(draft) and n < len(truth) - 1 and draft[n] == truth[n]:
        n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--corpus", type=Path, default=Path("build/corpus"))
    ap.add_argument("--split", default="tuning")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096, help="the target's context (4096)")
    ap.add_argument("--cache", type=Path, default=Path("build/replay"))
    ap.add_argument("--json", type=Path, help="write the per-text figures here")
    ap.add_argument(
        "--curve-from", type=Path, help="price rounds on this bench report's calibration instead"
    )
    args = ap.parse_args()
    target = LlamaModel(resolve_model(args.model), n_ctx=args.ctx, n_threads=args.threads)
    records = record(target, args.corpus, args.split, args.cache)
    curve = load_or_measure(target)
    if args.curve_from:
        seconds = json.loads(args.curve_from.read_text())["calibration"]["target"]
        curve = dataclasses.replace(curve, seconds=tuple(seconds))
    arms: dict[str, Callable[[list[int], list[int]], tuple[float, int]]] = {
        "edgespec": lambda p, o: replay_edgespec(p, o, curve, text=target),
        "edgespec tokens": lambda p, o: replay_edgespec(p, o, curve),
        "edgespec+counts": lambda p, o: replay_edgespec(p, o, curve, counts=0),
        "edgespec+counts<16": lambda p, o: replay_edgespec(p, o, curve, counts=16),
        **{
            f"llama-lookup n{d}": (lambda p, o, d=d: replay_llama_lookup(p, o, curve, d))
            for d in (3, 8, 16)
        },
        "suffix": lambda p, o: replay_suffix(p, o, curve, policy=False),
        "suffix+policy": lambda p, o: replay_suffix(p, o, curve, policy=True),
    }
    rows: dict[str, dict] = {}
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    print(f"{'text':32s} " + " ".join(f"{a:>19s}" for a in arms) + "  (x plain, tokens/call)")
    for name, rec in sorted(records.items(), key=lambda kv: (kv[1]["kind"], kv[0])):
        plain = len(rec["output"]) * curve.cost(1)
        cells, row = [], {}
        for arm, run in arms.items():
            seconds, calls = run(rec["prompt"], rec["output"])
            row[arm] = {"speedup": plain / seconds, "tokens_per_call": len(rec["output"]) / calls}
            by_kind[rec["kind"]][arm].append(plain / seconds)
            cells.append(f"{plain / seconds:5.2f}x {len(rec['output']) / calls:5.2f}t/c")
        rows[name] = {"kind": rec["kind"], **row}
        print(f"{name:32s} " + " ".join(f"{c:>19s}" for c in cells))
    print("median by kind:")
    for kind, per_arm in sorted(by_kind.items()):
        print(
            f"  {kind:10s} "
            + " ".join(f"{a}={statistics.median(v):.2f}" for a, v in per_arm.items())
        )
    every = {a: [r[a]["speedup"] for r in rows.values()] for a in arms}
    print("all texts: " + "; ".join(
        f"{a} median {statistics.median(v):.2f}, worst {min(v):.2f}" for a, v in every.items()
    ))  # fmt: skip
    if args.json:
        report = {"command": " ".join(sys.argv), "cost_curve_s": list(curve.seconds)}
        args.json.write_text(json.dumps({**report, "texts": rows}, indent=1))


if __name__ == "__main__":
    main()
