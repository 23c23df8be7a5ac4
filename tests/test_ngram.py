"""Prompt-lookup drafting."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting.ngram import NgramDrafter
from edgespec.sampling import SamplingParams
from edgespec.speculation.loop import generate

GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


def propose(d: NgramDrafter, context: list[int], n: int = 4) -> list[int]:
    return d.propose(context, n, GREEDY, RNG).tokens


def test_longest_latest_match_is_continued() -> None:
    d = NgramDrafter(n_min=1, n_max=3)
    #          0  1  2  3  4  5  6  7  8  9
    context = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    # tail (1, 2, 3) occurred at 0..2, followed by 4 5 9 2
    assert propose(d, context) == [4, 5, 9, 2]
    # the context grows (incremental index): tail (3, 7) is new, (7,) too: no 2-gram; the
    # 1-gram (7,) has no earlier occurrence either
    assert propose(d, [*context, 7]) == [8, 1, 2, 3]


def test_match_length_counts_the_agreement_before_the_match() -> None:
    d = NgramDrafter()
    source = list(range(100, 200))
    # the context copied 30 tokens of its source (after unrelated text), then 90 more
    ctx = [*source, 5, 6, *source[10:40]]
    assert d.propose(ctx, 4, GREEDY, RNG).match_len == 30
    ctx = [*source, 5, 6, *source[:100], 7, *source[50:52]]
    assert d.propose(ctx, 4, GREEDY, RNG).match_len == 2  # a fresh match after a change
    long = [*source, 5, *source[:90]]
    assert d.propose(long, 4, GREEDY, RNG).match_len == 64  # counted up to a cap


def test_latest_occurrence_wins_and_tail_never_matches_itself() -> None:
    d = NgramDrafter(n_min=1, n_max=2)
    assert propose(d, [5, 6]) == []  # (6,) occurs only as the tail
    # (5, 6) was followed by 1 and then by 1 again: the latest occurrence is continued
    assert propose(d, [5, 6, 1, 7, 5, 6, 1, 8, 5, 6]) == [1, 8, 5, 6]


def test_a_short_match_with_different_successors_is_not_proposed() -> None:
    d = NgramDrafter(n_min=1, n_max=2)
    # (5, 6) was followed by 1, then by 2: a coin toss, not worth a verify
    assert propose(d, [5, 6, 1, 5, 6, 2, 5, 6]) == []
    # the same tail with a long agreement before it is a copy in progress
    d = NgramDrafter(n_min=1, n_max=2)
    source = [10, 11, 12, 13, 14, 5, 6]
    draft = d.propose([5, 6, 2, *source, 1, *source], 4, GREEDY, RNG)
    # (agreeing 7 tokens back, 2 beyond the start's 5 6, which went on with 2)
    assert draft.tokens == [1, 10, 11, 12] and draft.match_len == 5
    # a gram is contested once two successors are seen, including later in the context
    d = NgramDrafter(n_min=1, n_max=1)
    assert propose(d, [3, 4, 9, 3]) == [4, 9, 3]
    assert propose(d, [3, 4, 9, 3, 5, 3]) == []


def test_a_repetition_is_drafted_past_the_context_end() -> None:
    d = NgramDrafter()
    loop = [7, 8, 9]  # text that repeats itself with a period of 3 tokens
    draft = d.propose([1, 2, *loop * 4], 10, GREEDY, RNG)
    assert draft.tokens == [*loop * 3, 7] and draft.match_len == 9
    # a match that has not agreed one whole period back is no repetition yet: its copy
    # stops at the context's end
    assert propose(d, [5, 1, 2, 3, 6, 1, 2, 3], 8) == [6, 1, 2, 3]
    assert propose(d, [6, 1, 2, 3, 6, 1, 2, 3], 8) == [6, 1, 2, 3, 6, 1, 2, 3]
    assert propose(d, [4, 4, 4], 5) == [4, 4, 4, 4, 4]


def test_changed_context_rebuilds_the_index() -> None:
    d = NgramDrafter(n_min=1, n_max=2)
    assert propose(d, [1, 2, 3, 1, 2]) == [3, 1, 2]
    assert propose(d, [4, 2, 8, 4, 2]) == [8, 4, 2]


def test_point_masses_when_sampling() -> None:
    d = NgramDrafter()
    draft = d.propose([1, 2, 3, 1, 2], 2, SamplingParams(temperature=1.0), RNG)
    assert draft.tokens == [3, 1]
    assert [q.prob(t) for q, t in zip(draft.q, draft.tokens, strict=True)] == [1.0, 1.0]


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_ngram_greedy_output_equals_plain(synthetic_models, gamma: int) -> None:
    prompt = "the cat sat on the mat and the dog sat on the mat and the cat"
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        plain = generate(target, prompt, max_tokens=80, gamma=0)
        spec = generate(target, prompt, drafter=NgramDrafter(), max_tokens=80, gamma=gamma)
        assert spec.tokens == plain.tokens
        assert spec.stats.drafted > 0 and spec.stats.accepted > 0
        assert spec.stats.draft_calls == 0  # no model was run to draft


def test_the_occurrence_agreeing_longest_is_continued_not_the_latest() -> None:
    d = NgramDrafter()
    quoted = [10, 11, 12, 13, 1, 2, 3, 4, 20, 21, 22]  # a document in which 1 2 3 4 recurs
    later = [30, 31, 1, 2, 3, 4, 40, 41, 42]
    # the context quotes the document: its tail agrees 8 tokens with the first
    # occurrence of 1 2 3 4 and only 4 with the latest one
    context = [*quoted, *later, 10, 11, 12, 13, 1, 2, 3, 4]
    draft = d.propose(context, 3, GREEDY, RNG)
    # its match length: the 8 tokens of agreement beyond the 4 of the one that went on
    # with 40
    assert (draft.tokens, draft.match_len) == ([20, 21, 22], 4)


def test_agreement_counts_only_beyond_occurrences_that_went_on_differently() -> None:
    d = NgramDrafter()
    marker = [90, 91, 92, 93, 94, 95]  # a chat template's turn start, before every reply
    context = [*marker, 1, 2, 3, 7, *marker, 4, 5, 6, 7, *marker]
    # the tail agrees 7 tokens back (7 and the marker) with the last reply's start and
    # with the first's: both went on differently, so there is no evidence of a copy
    assert d.propose(context, 3, GREEDY, RNG).tokens == []
    # one that agrees further back than any that went on differently is a copy
    quote = [8, 9, 10, 11, 12]
    context = [*quote, *marker, 1, 2, 3, 7, *marker, 4, 5, 6, *quote, *marker]
    draft = d.propose(context, 3, GREEDY, RNG)
    assert (draft.tokens, draft.match_len) == ([1, 2, 3], 5)


def test_a_replys_first_proposal_counts_no_agreement_beyond_its_gram() -> None:
    d = NgramDrafter()
    source = list(range(100, 140))
    prompt = [*source, 5, *source[:20]]  # the prompt ends agreeing 20 tokens with source
    d.prefill(prompt)
    first = d.propose(prompt, 4, GREEDY, RNG)
    assert first.tokens == source[20:24] and first.match_len == 4  # the gram's own 4
    # once the reply has a token of its own, the agreement counts in full
    assert d.propose([*prompt, source[20]], 4, GREEDY, RNG).match_len == 21


def _reference(context: list[int], n: int, compared: int) -> tuple[list[int], int]:
    """What NgramDrafter proposes, by brute force over the context (no history)."""
    from edgespec.drafting.ngram import CONTESTED_MIN_MATCH, DEFAULT_NGRAM_MAX, MATCH_LEN_CAP

    for k in range(min(DEFAULT_NGRAM_MAX, len(context) - 1), 0, -1):
        tail = context[-k:]
        ends = [e for e in range(k, len(context)) if context[e - k : e] == tail]
        if not ends:
            continue

        def agreement(e: int) -> int:
            a = 0
            while a < MATCH_LEN_CAP and e - 1 - a >= 0 and context[e - 1 - a] == context[-1 - a]:
                a += 1
            return a

        seen: list[tuple[int, int]] = []  # latest first, as far as the drafter looks
        for e in list(reversed(ends))[:compared]:
            seen.append((e, agreement(e)))
            if max(a for _, a in seen) >= MATCH_LEN_CAP:
                break
        best, most = max(seen, key=lambda ea: ea[1])  # the latest among equals
        rival = max((a for e, a in seen if context[e] != context[best]), default=0)
        margin = most - rival
        contested = len({context[e] for e in ends}) > 1
        if contested and margin < CONTESTED_MIN_MATCH:
            return [], 0
        ext = list(context)  # a repetition's copy reads on into its own draft
        while margin >= len(context) - best and len(ext) < best + n:
            ext.append(ext[len(ext) - (len(context) - best)])
        return ext[best : best + n], margin
    return [], 0


@pytest.mark.parametrize("seed", range(6))
def test_proposals_equal_a_brute_force_search(seed: int) -> None:
    from edgespec.drafting.ngram import OCCURRENCES_COMPARED

    rng = np.random.default_rng(seed)
    # a few symbols, so that grams recur often, with copied stretches
    context = [int(x) for x in rng.integers(0, 4, 40)]
    d = NgramDrafter()
    for step in range(400):
        if rng.random() < 0.3:
            start = int(rng.integers(0, len(context) - 8))
            context += context[start : start + int(rng.integers(1, 8))]
        else:
            context.append(int(rng.integers(0, 4)))
        draft = d.propose(context, 5, GREEDY, RNG)
        want = _reference(context, 5, OCCURRENCES_COMPARED)
        assert (draft.tokens, draft.match_len or 0) == want, step
