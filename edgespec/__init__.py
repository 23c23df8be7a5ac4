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

Beyond the pair: the drafters and the adaptive gamma policy (a pair of one's own, a
policy carried across calls), the completion service and the in-process server, the
CLI's ``main`` and the options a command plugin shares, the bench's workloads.

Names here are imported on first use, so ``import edgespec`` stays cheap and
llama.cpp's library loads only when a model does. Modules below ``edgespec`` are
internal and may change: code outside the package (the chat app, the benchmarks)
uses only these names (tests/test_architecture.py checks it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

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
    "DEFAULT_MAX_TOKENS": "speculation.loop",
    "DEFAULT_GAMMA": "speculation.loop",
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
    # drafters: a pair of one's own (ModelPair(target, drafter)) or a drafter to study
    "Draft": "drafting",
    "NgramDrafter": "drafting.ngram",
    "ModelDrafter": "drafting.model",
    "LookupHistory": "drafting.history",
    "build_drafter": "drafting.build",
    # gamma="auto": the adaptive policy (one can be carried across calls) and the
    # target's verify-cost curve it plans with
    "AdaptiveGamma": "policy.adaptive",
    "make_policy": "speculation.planning",
    "CostCurve": "policy.costs",
    "load_or_measure": "policy.costs",
    "measure_curve": "policy.costs",
    "use_curve": "policy.costs",
    # the distribution SamplingParams makes of a logit row (what sampling keeps exact)
    "process_logits": "sampling",
    "TokenDist": "sampling",
    # the completion service (editors) and the OpenAI-compatible server, in process
    "CompletionSession": "completion.session",
    "CompletionRequest": "completion.session",
    "CompletionResult": "completion.session",
    "CodeRules": "completion.session",
    "DEFAULT_MAX_LINES": "completion.session",
    "load_session": "completion.session",
    "EdgespecServer": "server.app",
    # the CLI, and what a command plugin (entry-point group edgespec.commands) shares
    "main": "cli",
    "DEFAULT_TARGET": "commands.options",
    "DEFAULT_CHAT_TARGET": "commands.options",
    "add_model_options": "commands.options",
    "add_sampling_options": "commands.options",
    "load_options": "commands.options",
    "sampling_from_args": "commands.options",
    "one_line": "errors",
    # edgespec bench's workloads and corpora
    "Workload": "bench.workloads",
    "builtin_workloads": "bench.workloads",
    "parse_workload": "bench.workloads",
    "render_workload": "bench.runner",
    "load_corpus": "bench.corpus",
    "split_of": "bench.corpus",
    # what speculation does on this machine and build (``edgespec doctor``)
    "doctor": "diagnosis",
    "DoctorReport": "diagnosis",
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
    "Draft",
    "NgramDrafter",
    "ModelDrafter",
    "LookupHistory",
    "build_drafter",
    "AdaptiveGamma",
    "make_policy",
    "CostCurve",
    "load_or_measure",
    "measure_curve",
    "use_curve",
    "process_logits",
    "TokenDist",
    "CompletionSession",
    "CompletionRequest",
    "CompletionResult",
    "CodeRules",
    "DEFAULT_MAX_LINES",
    "load_session",
    "EdgespecServer",
    "main",
    "DEFAULT_TARGET",
    "DEFAULT_CHAT_TARGET",
    "add_model_options",
    "add_sampling_options",
    "load_options",
    "sampling_from_args",
    "one_line",
    "Workload",
    "builtin_workloads",
    "parse_workload",
    "render_workload",
    "load_corpus",
    "split_of",
    "doctor",
    "DoctorReport",
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
    from .bench.corpus import load_corpus, split_of
    from .bench.runner import render_workload
    from .bench.workloads import Workload, builtin_workloads, parse_workload
    from .chat_template import ChatFormat, ChatTemplateError
    from .cli import main
    from .commands.options import (
        DEFAULT_CHAT_TARGET,
        DEFAULT_TARGET,
        add_model_options,
        add_sampling_options,
        load_options,
        sampling_from_args,
    )
    from .completion.session import (
        DEFAULT_MAX_LINES,
        CodeRules,
        CompletionRequest,
        CompletionResult,
        CompletionSession,
        load_session,
    )
    from .context_overflow import Fit, fit_messages, reply_reserve
    from .diagnosis import DoctorReport, doctor
    from .drafting import Draft, Drafter
    from .drafting.build import DraftSpec, build_drafter, parse_draft_spec
    from .drafting.history import LookupHistory
    from .drafting.model import ModelDrafter
    from .drafting.ngram import NgramDrafter
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
        one_line,
    )
    from .events import DoneEvent, Event, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
    from .grammar import Grammar, GrammarError
    from .loading import LoadOptions, resolve_model
    from .modelstore.catalog import Catalog, CatalogModel, load_catalog
    from .policy.adaptive import AdaptiveGamma
    from .policy.costs import CostCurve, load_or_measure, measure_curve, use_curve
    from .sampling import (
        DEFAULT_MIN_P,
        DEFAULT_TEMPERATURE,
        DEFAULT_TOP_K,
        DEFAULT_TOP_P,
        SamplingParams,
        TokenDist,
        process_logits,
    )
    from .server.app import EdgespecServer
    from .speculation.loop import DEFAULT_GAMMA, DEFAULT_MAX_TOKENS
    from .speculation.planning import make_policy
