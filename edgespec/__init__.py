"""edgespec: exact speculative decoding for GGUF models on your own machine.

The library API, layered as mlx-lm's::

    import edgespec

    with edgespec.load("gemma-3-270m", draft="ngram") as pair:
        done = edgespec.generate(pair, "def fibonacci(n):", max_tokens=48)
        print(done.text, done.stats.acceptance_rate)

``load`` returns a ``ModelPair`` (target model and drafter); ``stream_generate``
yields ``TokenEvent`` / ``RoundEvent`` / ``DoneEvent``, ``generate`` returns the
``DoneEvent``, and ``chat`` / ``stream_chat`` do the same for a conversation in the
model's chat template. Each is also a method of the pair. The output is exactly the
target's own. Everything edgespec raises on purpose is an ``EdgespecError`` with a
one-line message. docs/library.md has the whole tour.

Names here are imported on first use, so ``import edgespec`` stays cheap and
llama.cpp's library loads only when a model does. Modules below ``edgespec`` (other
than ``edgespec.bench`` and ``edgespec.commands``, see their docstrings) are
internal and may change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the internal module that defines it
_EXPORTS: dict[str, str] = {
    # loading and generating
    "load": "api",
    "ModelPair": "api",
    "stream_generate": "api",
    "generate": "api",
    "stream_chat": "api",
    "chat": "api",
    "DEFAULT_DRAFT": "api",
    "LoadOptions": "loading",
    "resolve_model": "loading",
    "parse_draft_spec": "drafting.build",
    "DraftSpec": "drafting.build",
    "DEFAULT_MAX_TOKENS": "engine",
    "DEFAULT_GAMMA": "engine",
    "DEFAULT_CTX": "backend",
    "DEFAULT_RPC_TIMEOUT_S": "backend",
    # sampling and constraints
    "SamplingParams": "sampling",
    "DEFAULT_TEMPERATURE": "sampling",
    "DEFAULT_TOP_K": "sampling",
    "DEFAULT_TOP_P": "sampling",
    "DEFAULT_MIN_P": "sampling",
    "Grammar": "grammar",
    "GrammarError": "grammar",
    # events
    "Event": "events",
    "TokenEvent": "events",
    "RoundEvent": "events",
    "DoneEvent": "events",
    "Stats": "events",
    "StopReason": "events",
    "TokenKind": "events",
    # errors
    "EdgespecError": "errors",
    "ModelLoadError": "errors",
    "ModelFetchError": "errors",
    "IncompatibleModelsError": "errors",
    "InvalidParameterError": "errors",
    "ContextFullError": "errors",
    "BackendError": "errors",
    "RpcWorkerLost": "errors",
    "CatalogError": "errors",
    "ChatTemplateError": "chat_template",
    # the types a pair is made of
    "LlamaModel": "backend",
    "Drafter": "drafting",
    "ChatFormat": "chat_template",
    # a conversation longer than the context (--context-overflow truncate-middle)
    "fit_messages": "context_overflow",
    "reply_reserve": "context_overflow",
    "Fit": "context_overflow",
    # the model catalog
    "load_catalog": "modelstore.catalog",
    "Catalog": "modelstore.catalog",
    "CatalogModel": "modelstore.catalog",
    # a target on llama.cpp RPC workers (load(..., rpc=[...])): losing one
    "on_rpc_worker_lost": "backend",
    "stay_up_on_worker_loss": "backend",
    "unanswering_rpc_workers": "backend",
}

# explicit, and the same names as the table above (tests/test_library.py)
__all__ = [
    "__version__",
    "load",
    "ModelPair",
    "stream_generate",
    "generate",
    "stream_chat",
    "chat",
    "DEFAULT_DRAFT",
    "LoadOptions",
    "resolve_model",
    "parse_draft_spec",
    "DraftSpec",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_GAMMA",
    "DEFAULT_CTX",
    "DEFAULT_RPC_TIMEOUT_S",
    "SamplingParams",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TOP_K",
    "DEFAULT_TOP_P",
    "DEFAULT_MIN_P",
    "Grammar",
    "GrammarError",
    "Event",
    "TokenEvent",
    "RoundEvent",
    "DoneEvent",
    "Stats",
    "StopReason",
    "TokenKind",
    "EdgespecError",
    "ModelLoadError",
    "ModelFetchError",
    "IncompatibleModelsError",
    "InvalidParameterError",
    "ContextFullError",
    "BackendError",
    "RpcWorkerLost",
    "CatalogError",
    "ChatTemplateError",
    "LlamaModel",
    "Drafter",
    "ChatFormat",
    "fit_messages",
    "reply_reserve",
    "Fit",
    "load_catalog",
    "Catalog",
    "CatalogModel",
    "on_rpc_worker_lost",
    "stay_up_on_worker_loss",
    "unanswering_rpc_workers",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'edgespec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from .api import (
        DEFAULT_DRAFT,
        ModelPair,
        chat,
        generate,
        load,
        stream_chat,
        stream_generate,
    )
    from .backend import (
        DEFAULT_CTX,
        DEFAULT_RPC_TIMEOUT_S,
        LlamaModel,
        on_rpc_worker_lost,
        stay_up_on_worker_loss,
        unanswering_rpc_workers,
    )
    from .chat_template import ChatFormat, ChatTemplateError
    from .context_overflow import Fit, fit_messages, reply_reserve
    from .drafting import Drafter
    from .drafting.build import DraftSpec, parse_draft_spec
    from .engine import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS
    from .errors import (
        BackendError,
        CatalogError,
        ContextFullError,
        EdgespecError,
        IncompatibleModelsError,
        InvalidParameterError,
        ModelFetchError,
        ModelLoadError,
        RpcWorkerLost,
    )
    from .events import DoneEvent, Event, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
    from .grammar import Grammar, GrammarError
    from .loading import LoadOptions, resolve_model
    from .modelstore.catalog import Catalog, CatalogModel, load_catalog
    from .sampling import (
        DEFAULT_MIN_P,
        DEFAULT_TEMPERATURE,
        DEFAULT_TOP_K,
        DEFAULT_TOP_P,
        SamplingParams,
    )
