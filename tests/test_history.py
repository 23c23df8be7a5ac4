"""The lookup history: earlier requests' prompts and outputs drafted from, across requests."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.completion.session import CompletionRequest, CompletionResult, CompletionSession
from edgespec.drafting.build import attach_history, fork_drafter
from edgespec.drafting.composite import CompositeDrafter
from edgespec.drafting.history import HISTORY_CONTESTED_MIN_MATCH, LookupHistory
from edgespec.drafting.ngram import NgramDrafter
from edgespec.speculation.loop import generate

GREEDY = np.random.default_rng(0)


def _propose(d: NgramDrafter, context: list[int], n: int = 8):
    from edgespec.sampling import SamplingParams

    return d.propose(context, n, SamplingParams(), GREEDY)


def test_a_later_request_drafts_from_an_earlier_ones_output() -> None:
    history = LookupHistory()
    earlier_output = list(range(100, 140))
    history.add([1, 2, 3, *earlier_output])
    # the new prompt ends with the start of that output, which it holds nowhere else
    context = [7, 8, 9, *earlier_output[:20]]
    assert _propose(NgramDrafter(), context).tokens == []  # the per-request lookup: nothing
    draft = _propose(NgramDrafter(history=history), context)
    assert draft.tokens == earlier_output[20:28]
    assert draft.match_len == 20  # weighed by the adaptive policy like the context's


def test_a_replys_first_proposal_from_the_history_counts_no_long_agreement() -> None:
    history = LookupHistory()
    earlier_output = list(range(100, 140))
    history.add([1, 2, 3, *earlier_output])
    prompt = [7, 8, 9, *earlier_output[:20]]
    d = NgramDrafter(history=history)
    d.prefill(prompt)  # right after the prompt: agreement is not yet the reply's own
    first = _propose(d, prompt)
    assert first.tokens == earlier_output[20:28] and first.match_len == d.n_max
    assert _propose(d, [*prompt, earlier_output[20]]).match_len == 21


def test_the_history_is_consulted_only_where_the_context_has_no_match() -> None:
    history = LookupHistory()
    source = list(range(100, 160))
    history.add([*source, 1, 1, 1])
    # the context copies source[30:40] after its own copy of source[:40] then 5: its own
    # match agrees 10 tokens back; the history's (source[:40] ... ) agrees 10 too: a tie
    ctx = [*source[:40], 5, 6, *source[30:40]]
    d = NgramDrafter(history=history)
    assert _propose(d, ctx).tokens == [5, 6, *source[30:36]]  # the context's, on a tie
    # a context with no match of its own copies from the history
    ctx = [*source[:12], 5, *source[:30]]
    assert _propose(NgramDrafter(history=history), ctx).tokens == source[30:38]
    # one with a shorter match of its own keeps it
    ctx = [*source[28:30], 9, *source[:30]]
    assert _propose(NgramDrafter(history=history), ctx).tokens == [9, *source[:7]]


def test_the_history_stops_at_a_documents_end_and_refuses_short_contested_grams() -> None:
    history = LookupHistory()
    history.add([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    assert history.lookup([0, 5, 6, 7, 8, 9, 10], 8) == ([11, 12], 6)  # not into what follows
    history.add([50, 5, 6, 7, 8, 99])  # (5, 6, 7, 8) followed by 9, then 99: contested
    assert history.lookup([0, 5, 6, 7, 8], 4) is None  # agrees 4 < 8 tokens back
    long = [20 + i for i in range(HISTORY_CONTESTED_MIN_MATCH)]
    history.add([*long, 5, 6, 7, 8, 42, 43])
    assert history.lookup([*long, 5, 6, 7, 8], 4) == ([42, 43], 12)


def test_the_history_is_bounded_and_drops_the_oldest() -> None:
    history = LookupHistory(max_tokens=400)
    docs = [[1000 * d + i for i in range(50)] for d in range(20)]  # 51 tokens each held
    for doc in docs:
        history.add(doc)
    assert len(history) <= 400
    assert history.lookup(docs[0][:10], 4) is None  # the first ones are gone
    assert history.lookup(docs[-1][:10], 4) == (docs[-1][10:14], 10)  # the last is held
    held = history.documents
    assert 0 < held < 20 and len(history) == 51 * held


def test_a_document_sharing_a_recent_prefix_stores_its_new_part() -> None:
    history = LookupHistory()
    file = list(range(1000, 1500))
    history.add([*file, 7, 8, 9])
    history.add([*file, 3, 4, 5])  # an editor's next request: the same file, a new ending
    assert len(history) < 2 * len(file)
    # both endings are found, the latest for the shared tail
    assert history.lookup(file[-20:], 3) == ([3, 4, 5], 20)


def test_two_threads_adding_and_proposing() -> None:
    history = LookupHistory(max_tokens=3000)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            rng = np.random.default_rng(1)
            for _ in range(200):
                history.add(rng.integers(0, 50, 60).tolist())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            stop.set()

    def reader() -> None:
        try:
            rng = np.random.default_rng(2)
            d = NgramDrafter(history=history)
            while not stop.is_set():
                ctx = rng.integers(0, 50, 40).tolist()
                draft = _propose(d, ctx)
                assert all(0 <= t < 50 for t in draft.tokens)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not errors and len(history) <= 3000


def test_save_and_load(tmp_path) -> None:
    history = LookupHistory(model="m.gguf")
    history.add(list(range(100, 140)))
    history.save(tmp_path / "h.json")
    again = LookupHistory(model="m.gguf")
    assert again.load(tmp_path / "h.json") == 1
    assert again.lookup(list(range(100, 120)), 4) == ([120, 121, 122, 123], 20)
    with pytest.raises(ValueError, match="another|not"):
        LookupHistory(model="other.gguf").load(tmp_path / "h.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError):
        LookupHistory().load(tmp_path / "bad.json")


def test_slots_share_one_history() -> None:
    history = LookupHistory()
    d = NgramDrafter(history=history)
    forked = fork_drafter(d, None, 1)  # type: ignore[arg-type] - a lookup needs no target
    assert isinstance(forked, NgramDrafter) and forked.history is history
    comp = CompositeDrafter(NgramDrafter(), NgramDrafter())
    assert attach_history(comp, history) is history and comp.first.history is history
    assert attach_history(None, history) is None


def _requests(session: CompletionSession, prompts: list[list[int]]) -> list[tuple[int, ...]]:
    out = []
    for prompt in prompts:
        for item in session.run(CompletionRequest(prompt, 40)):
            if isinstance(item, CompletionResult):
                out.append(item.tokens)
    return out


@pytest.mark.parametrize("gamma", [4, "auto"])
def test_greedy_output_is_the_same_with_and_without_history(synthetic_models, gamma) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        base = "the cat sat on the mat and the dog sat on the mat and"
        texts = [base, base + " the cat", "a dog and " + base, base + " the dog sat"]
        prompts = [target.tokenize(t, add_special=True, parse_special=False) for t in texts]
        plain = [
            generate(target, p, max_tokens=40, gamma=0).tokens for p in prompts
        ]  # the target alone
        with_history = CompletionSession(target, NgramDrafter(), gamma=gamma, name="t")
        without = CompletionSession(target, NgramDrafter(), gamma=gamma, name="t", history=False)
        assert with_history.history is not None and without.history is None
        found = []
        lookup = with_history.history.lookup

        def counted(*args, **kwargs):
            out = lookup(*args, **kwargs)
            found.append(out is not None)
            return out

        with_history.history.lookup = counted  # type: ignore[method-assign]
        assert [list(t) for t in _requests(with_history, prompts)] == [list(p) for p in plain]
        assert [list(t) for t in _requests(without, prompts)] == [list(p) for p in plain]
        assert with_history.history.documents == len(prompts)
        assert any(found)  # the history did propose


def test_the_chat_engine_remembers_replies_whichever_drafter(synthetic_models) -> None:
    from edgespec_tui.prompt import ChatMessage
    from edgespec_tui.session import GenerationSettings, LlamaChatEngine, ModelChoice

    target = str(synthetic_models["target"])
    choice = ModelChoice(target=target, draft="auto", n_ctx=256, n_threads=1)
    engine = LlamaChatEngine.load(choice)
    try:
        assert engine.drafter.history is engine.history
        convo = [ChatMessage("user", "the cat sat on the mat")]
        events = list(engine.stream_reply(convo, GenerationSettings(gamma=3, max_tokens=8)))
        assert engine.history.documents == 1 and len(engine.history) > len(events[-1].tokens)
        engine.set_drafter("none")
        engine.set_drafter("ngram")
        assert engine.drafter.history is engine.history
    finally:
        engine.close()
