"""The real chat engine's drafter switch, on tiny synthetic models."""

from __future__ import annotations

from edgespec_tui.session import LlamaChatEngine, ModelChoice

from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.crossvocab import CrossVocabDrafter
from edgespec.drafting.ngram import NgramDrafter


def test_set_drafter_builds_each_choice_and_closes_the_last(synthetic_models) -> None:
    target, draft = synthetic_models["target"], synthetic_models["draft_permuted"]
    choice = ModelChoice(target=str(target), draft=f"ngram+{draft}", n_ctx=256, n_threads=1)
    engine = LlamaChatEngine.load(choice)
    try:
        assert engine.info.drafter_choices == ("none", "ngram", "draft_permuted", "self")
        loaded = engine.drafter
        assert isinstance(loaded, CompositeDrafter)
        assert isinstance(loaded.fallback, CrossVocabDrafter)
        engine.set_drafter("self")  # the target drafting for itself: same vocabulary
        assert isinstance(engine.drafter, ModelDrafter) and engine.drafter.model.path == target
        assert engine.drafter.model is not engine.target
        assert loaded.model._ctx is None  # the draft model it replaced was closed
        engine.set_drafter("ngram")
        assert isinstance(engine.drafter, NgramDrafter) and engine.info.draft == "ngram"
        engine.set_drafter("draft_permuted")
        assert engine.drafter.name == "ngram+draft_permuted.gguf (cross-vocab)"
        engine.set_drafter("none")
        assert engine.drafter is None and engine.info.draft is None
    finally:
        engine.close()


def test_draft_auto_is_the_ngram_choice(synthetic_models) -> None:
    """chat's default --draft auto is the n-gram drafter, and F5 steps on from it."""
    target = str(synthetic_models["target"])
    choice = ModelChoice(target=target, draft="auto", n_ctx=256, n_threads=1)
    engine = LlamaChatEngine.load(choice)
    try:
        assert isinstance(engine.drafter, NgramDrafter)
        assert engine.info.draft == "ngram"
        assert engine.info.drafter_choices == ("none", "ngram", "self")
    finally:
        engine.close()
