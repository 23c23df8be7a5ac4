"""From a drafter spec (what --draft takes) to a drafter for an already-loaded target.

A spec is ``none`` (or empty), ``ngram`` (prompt lookup), ``auto`` (the default
drafter, which is the prompt lookup: free, and the adaptive gamma turns it off where
it does not pay), MODEL (a .gguf path or a catalog name) or ``ngram+MODEL`` (the
lookup first, the model where it finds nothing).
Where model files come from is the caller's ``resolve`` (``edgespec.loading.
resolve_model``): drafting knows nothing of the model store, and loading, which
imports this module, is never imported by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backend import LlamaModel
from .base import Drafter
from .compat import incompatibility
from .composite import CompositeDrafter
from .crossvocab import CrossVocabDrafter
from .history import LookupHistory
from .model import ModelDrafter
from .ngram import NgramDrafter

NO_DRAFT = ("none", "")
NGRAM = "ngram"
AUTO = "auto"  # the default drafter: what every command's --draft auto means


@dataclass(frozen=True)
class DraftSpec:
    """A drafter spec taken apart."""

    ngram: bool  # prompt lookup (first, when there is a model too)
    model: str | None  # the draft model: a .gguf path or a catalog name


def parse_draft_spec(spec: str | None) -> DraftSpec:
    """``spec`` (none, ngram, auto, MODEL or ngram+MODEL; keywords in any case) taken apart.

    ``auto`` is the n-gram prompt lookup, as ``ngram``.
    """
    spec = (spec or "").strip()
    lowered = spec.lower()
    if lowered in NO_DRAFT:
        return DraftSpec(ngram=False, model=None)
    if lowered in (NGRAM, AUTO):
        return DraftSpec(ngram=True, model=None)
    if lowered.startswith(NGRAM + "+"):
        return DraftSpec(ngram=True, model=spec[len(NGRAM) + 1 :].strip())
    return DraftSpec(ngram=False, model=spec)


def is_model_path(spec: str) -> bool:
    """True when a model spec names a file rather than a catalog model."""
    path = Path(spec).expanduser()
    return path.suffix == ".gguf" or path.exists() or "/" in spec


def build_drafter(
    target: LlamaModel,
    spec: str | None,
    *,
    resolve: Callable[[str], Path],
    n_ctx: int,
    n_threads: int | None = None,
    gpu_layers: int = 0,
    n_seq: int = 1,
) -> Drafter | None:
    """The drafter ``spec`` names for ``target``; None for ``none``.

    A draft model is loaded from ``resolve(MODEL)`` with the given context, threads
    and GPU layers: a ModelDrafter when it shares the target's vocabulary (llama.cpp's
    rule), else a CrossVocabDrafter named ``<MODEL> (cross-vocab)`` (the file name for
    a path). Errors are resolve's and the backend's (ModelLoadError and kin). A draft
    model gets ``n_seq`` sequences, for ``fork_drafter``.
    """
    parts = parse_draft_spec(spec)
    if parts.model is None:
        return NgramDrafter() if parts.ngram else None
    draft = LlamaModel(
        resolve(parts.model),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_gpu_layers=gpu_layers,
        n_seq=n_seq,
    )
    drafter: Drafter
    if incompatibility(target, draft) is None:
        drafter = ModelDrafter(draft)
    else:
        shown = draft.path.name if is_model_path(parts.model) else parts.model
        drafter = CrossVocabDrafter(target, draft, name=f"{shown} (cross-vocab)")
    return CompositeDrafter(NgramDrafter(), drafter) if parts.ngram else drafter


def fork_drafter(drafter: Drafter | None, target: LlamaModel, seq: int) -> Drafter | None:
    """A drafter like ``drafter`` for sequence ``seq`` of a multi-sequence target (a
    view, ``LlamaModel.sequence``): its own lookup index, and a draft model's view of
    the same sequence (the draft model was built with n_seq sequences)."""
    if drafter is None:
        return None
    if isinstance(drafter, NgramDrafter):
        # the same history: what one slot's requests wrote, every slot drafts from
        return NgramDrafter(n_min=drafter.n_min, n_max=drafter.n_max, history=drafter.history)
    if isinstance(drafter, CompositeDrafter):
        first = fork_drafter(drafter.first, target, seq)
        fallback = fork_drafter(drafter.fallback, target, seq)
        assert first is not None and fallback is not None
        return CompositeDrafter(first, fallback)
    if isinstance(drafter, CrossVocabDrafter):
        return CrossVocabDrafter(
            target,
            drafter.model.sequence(seq),
            name=drafter.name,
            draft_ratio=drafter.draft_ratio,
            tli=drafter.tli,
        )
    if isinstance(drafter, ModelDrafter):
        return ModelDrafter(drafter.model.sequence(seq))
    raise TypeError(f"cannot fork a {type(drafter).__name__} for a sequence")


def attach_history(drafter: Drafter, history: LookupHistory) -> LookupHistory | None:
    """Give ``drafter``'s prompt lookup (itself, or a composite's first drafter) the
    ``history`` unless it has one; returns the history it drafts from (None: it has no
    prompt lookup)."""
    lookup = drafter.first if isinstance(drafter, CompositeDrafter) else drafter
    if not isinstance(lookup, NgramDrafter):
        return None
    if lookup.history is None:
        lookup.history = history
    return lookup.history
