"""The drafter contract (``model``, ``is_lookup``) and the one drafter builder."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import edgespec.drafting
from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, Draft, Drafter, ModelDrafter, build_drafter
from edgespec.drafting.build import DraftSpec, parse_draft_spec
from edgespec.drafting.crossvocab import CrossVocabDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import ModelLoadError
from edgespec.policy.adaptive import AdaptiveGamma
from edgespec.policy.costs import CostCurve
from edgespec.speculation.loop import generate
from edgespec.speculation.planning import _split_lookup


@pytest.fixture(scope="module")
def target(synthetic_models):
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as m:
        yield m


def _resolve_as_is(spec: str) -> Path:
    return Path(spec)


def _build(target: LlamaModel, spec: str | None, resolve=_resolve_as_is):
    return build_drafter(target, spec, resolve=resolve, n_ctx=256, n_threads=1)


def _close(drafter) -> None:
    if drafter is not None and drafter.model is not None:
        drafter.model.close()


# ----------------------------------------------------------------------------- contract


class _Fake:
    """A drafter that proposes nothing and logs when it is asked."""

    def __init__(self, name: str, log: list[str], *, is_lookup: bool) -> None:
        self.name, self.log, self.is_lookup = name, log, is_lookup
        self.model = None

    def prefill(self, context) -> None:
        pass

    def propose(self, context, n, sampling, rng, **kwargs) -> Draft:
        self.log.append(f"{self.name} proposes")
        return Draft([], [])


class _Logged(AdaptiveGamma):
    def __init__(self, log: list[str]) -> None:
        # a verify that costs its batch size: drafting never pays, gamma stays 0
        super().__init__(CostCurve("t", "k", tuple(float(k) for k in range(1, 49))), draft_step_s=1)
        self.log = log

    def choose(self, limit: int, *, match_len: int | None = None, by_text: bool = False) -> int:
        self.log.append("choose")
        return super().choose(limit, match_len=match_len, by_text=by_text)


def test_a_lookup_flagged_drafter_is_asked_before_gamma_is_chosen(target) -> None:
    log: list[str] = []
    generate(target, "Hello world", drafter=_Fake("lookup", log, is_lookup=True),
             max_tokens=3, gamma=_Logged(log))  # fmt: skip
    # (the last round, with room for no draft, asks nobody)
    assert log == ["lookup proposes", "choose"] * 2 + ["choose"]


def test_a_drafter_not_flagged_is_asked_only_after_gamma_is_chosen(target) -> None:
    log: list[str] = []
    generate(target, "Hello world", drafter=_Fake("model", log, is_lookup=False),
             max_tokens=3, gamma=_Logged(log))  # fmt: skip
    assert log == ["choose"] * 3  # gamma 0 every round: never asked


def test_a_composite_splits_by_its_drafters_flags(target) -> None:
    log: list[str] = []
    lookup, model = _Fake("lookup", log, is_lookup=True), _Fake("model", log, is_lookup=False)
    assert _split_lookup(CompositeDrafter(lookup, model)) == (lookup, model)
    backwards = CompositeDrafter(model, lookup)
    assert not backwards.is_lookup and _split_lookup(backwards) == (None, backwards)
    both = CompositeDrafter(lookup, _Fake("lookup2", log, is_lookup=True))
    assert both.is_lookup and _split_lookup(both) == (both, None)
    assert _split_lookup(None) == (None, None)
    generate(target, "Hello world", drafter=CompositeDrafter(lookup, model),
             max_tokens=3, gamma=_Logged(log))  # fmt: skip
    assert log == ["lookup proposes", "choose"] * 2 + ["choose"]  # the model waits for a g > 0


def _drafter_classes() -> set[type]:
    """Every class in edgespec.drafting that proposes drafts (the protocol aside)."""
    found = set()
    for info in pkgutil.iter_modules(edgespec.drafting.__path__):
        module = importlib.import_module(f"edgespec.drafting.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            ours = cls.__module__ == module.__name__ and cls is not Drafter
            if ours and hasattr(cls, "propose"):
                found.add(cls)
    return found


def test_every_shipped_drafter_declares_the_contract(synthetic_models, target) -> None:
    with LlamaModel(synthetic_models["draft_permuted"], n_ctx=256, n_threads=1) as other:
        ngram, model = NgramDrafter(), ModelDrafter(target)
        cross = CrossVocabDrafter(target, other)
        composite = CompositeDrafter(ngram, cross)
        drafters = [ngram, model, cross, composite]
        assert {type(d) for d in drafters} == _drafter_classes()
        declared = [(d.model, d.is_lookup) for d in drafters]
        assert declared == [(None, True), (target, False), (other, False), (other, False)]
        assert NgramDrafter.is_lookup and NgramDrafter.model is None  # on the class itself
        assert not ModelDrafter.is_lookup and not CrossVocabDrafter.is_lookup


# ----------------------------------------------------------------------------- building


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        (None, DraftSpec(False, None)),
        (" None ", DraftSpec(False, None)),
        ("", DraftSpec(False, None)),
        ("NGRAM", DraftSpec(True, None)),
        ("m.gguf", DraftSpec(False, "m.gguf")),
        ("Ngram+ some-model ", DraftSpec(True, "some-model")),
    ],
)
def test_draft_specs_are_taken_apart(spec, parts) -> None:
    assert parse_draft_spec(spec) == parts


def test_build_drafter_from_each_kind_of_spec(synthetic_models, target) -> None:
    assert _build(target, "none") is None and _build(target, None) is None
    assert isinstance(_build(target, "ngram"), NgramDrafter)
    same = _build(target, str(synthetic_models["draft_noisy"]))
    assert isinstance(same, ModelDrafter) and same.model.path == synthetic_models["draft_noisy"]
    _close(same)
    cross = _build(target, str(synthetic_models["draft_permuted"]))
    assert isinstance(cross, CrossVocabDrafter) and cross.target is target
    assert cross.name == "draft_permuted.gguf (cross-vocab)"
    _close(cross)
    both = _build(target, f"ngram+{synthetic_models['draft_badvocab']}")
    assert isinstance(both, CompositeDrafter) and isinstance(both.first, NgramDrafter)
    assert both.name == "ngram+draft_badvocab.gguf (cross-vocab)"
    assert both.model is both.fallback.model is not None
    _close(both)


def test_build_drafter_names_a_catalog_model_and_uses_the_resolver(
    synthetic_models, target
) -> None:
    asked: list[str] = []

    def catalog(name: str) -> Path:
        asked.append(name)
        if name != "tiny-permuted":
            raise ModelLoadError(f"no model file or catalog model named {name!r}")
        return synthetic_models["draft_permuted"]

    drafter = _build(target, "ngram+tiny-permuted", resolve=catalog)
    assert drafter.name == "ngram+tiny-permuted (cross-vocab)" and asked == ["tiny-permuted"]
    _close(drafter)
    with pytest.raises(ModelLoadError, match="'nope'"):
        _build(target, "nope", resolve=catalog)


def test_the_bench_builds_every_drafter_around_its_one_target(
    synthetic_models, target, monkeypatch
) -> None:
    import edgespec.bench.runner as runner

    def forbidden(*_a, **_k):
        raise AssertionError("a second target was loaded")

    monkeypatch.setattr(runner, "load_pair", forbidden)
    setup = runner.BenchSetup(target="t", drafters=[], workloads=[], gammas=[], n_ctx=256)
    ngram = runner.LoadedDrafter.load("ngram", target, setup)
    assert ngram.model is None and ngram.fresh() is not ngram.fresh()  # a new index a run
    for spec in (
        str(synthetic_models["draft_permuted"]),
        f"ngram+{synthetic_models['draft_noisy']}",
    ):
        loaded = runner.LoadedDrafter.load(spec, target, setup)
        drafter = loaded.fresh()
        assert loaded.model is drafter.model is not None and loaded.fresh() is drafter
        if isinstance(drafter, CrossVocabDrafter):
            assert drafter.target is target
        loaded.model.close()
    with pytest.raises(runner.InvalidParameterError, match="'none' is not a drafter"):
        runner.LoadedDrafter.load("none", target, setup)
