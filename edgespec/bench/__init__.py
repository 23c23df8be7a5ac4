"""``edgespec bench``: plain vs speculative decoding on shipped workloads, side by side.

workloads (prompt files), runner (alternating timed runs in one process),
llamacpp (llama.cpp's own binaries on the same workload), stats (pure
statistics, projection, goals), report (JSON and Markdown tables), chart (PNG).

**The measurement API.** This package is also the one door of the harness in
``benchmarks/`` below the library API (``import edgespec``): the names in
``__all__`` are what its scripts time or take apart, so that they import nothing
else of edgespec's (tests/test_architecture.py checks it). They are here rather than
in ``edgespec`` because a library user never needs them: the engine's loop on a model
and drafter of one's own (``engine_generate``, which also takes an ``AdaptiveGamma``
carried across calls), the drafters and the ``--gamma auto`` policy's pieces, the
completion service the server runs (without HTTP), the shipped workloads and corpora,
and a loopback proxy that delays RPC messages. Unlike ``edgespec``'s, these names
may change with the internals they expose.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> (module under edgespec, its name there)
_EXPORTS: dict[str, tuple[str, str]] = {
    # the engine's loop, on a LlamaModel and a drafter of the caller's
    "engine_generate": ("engine", "generate"),
    "process_logits": ("sampling", "process_logits"),
    # drafters
    "Draft": ("drafting.base", "Draft"),
    "NgramDrafter": ("drafting.ngram", "NgramDrafter"),
    "ModelDrafter": ("drafting.model", "ModelDrafter"),
    "build_drafter": ("drafting.build", "build_drafter"),
    "LookupHistory": ("drafting.history", "LookupHistory"),
    # the --gamma auto policy
    "make_policy": ("planning", "make_policy"),
    "AdaptiveGamma": ("policy.adaptive", "AdaptiveGamma"),
    "CostCurve": ("policy.costs", "CostCurve"),
    "load_or_measure": ("policy.costs", "load_or_measure"),
    "measure_curve": ("policy.costs", "measure_curve"),
    "use_curve": ("policy.costs", "use_curve"),
    "CALIBRATION_DEPTH": ("policy.costs", "CALIBRATION_DEPTH"),
    "MAX_VERIFY": ("policy.costs", "MAX_VERIFY"),
    # the completion service and the server, without a client process
    "CompletionSession": ("completion.session", "CompletionSession"),
    "CompletionRequest": ("completion.session", "CompletionRequest"),
    "CompletionResult": ("completion.session", "CompletionResult"),
    "CodeRules": ("completion.session", "CodeRules"),
    "DEFAULT_MAX_LINES": ("completion.session", "DEFAULT_MAX_LINES"),
    "load_session": ("completion.session", "load_session"),
    "EdgespecServer": ("server.app", "EdgespecServer"),
    "cli_main": ("cli", "main"),
    # workloads and corpora
    "Workload": ("bench.workloads", "Workload"),
    "builtin_workloads": ("bench.workloads", "builtin_workloads"),
    "parse_workload": ("bench.workloads", "parse_workload"),
    "render_workload": ("bench.runner", "render_workload"),
    "load_corpus": ("bench.corpus", "load_corpus"),
    "split_of": ("bench.corpus", "split_of"),
    # RPC workers over a slow network
    "LatencyProxy": ("bench.latency_proxy", "LatencyProxy"),
    "probe_rpc_worker": ("backend", "probe_rpc_worker"),
}

# explicit, and the same names as the table above (tests/test_library.py)
__all__ = [
    "engine_generate",
    "process_logits",
    "Draft",
    "NgramDrafter",
    "ModelDrafter",
    "build_drafter",
    "LookupHistory",
    "make_policy",
    "AdaptiveGamma",
    "CostCurve",
    "load_or_measure",
    "measure_curve",
    "use_curve",
    "CALIBRATION_DEPTH",
    "MAX_VERIFY",
    "CompletionSession",
    "CompletionRequest",
    "CompletionResult",
    "CodeRules",
    "DEFAULT_MAX_LINES",
    "load_session",
    "EdgespecServer",
    "cli_main",
    "Workload",
    "builtin_workloads",
    "parse_workload",
    "render_workload",
    "load_corpus",
    "split_of",
    "LatencyProxy",
    "probe_rpc_worker",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'edgespec.bench' has no attribute {name!r}")
    module, attr = where
    return getattr(importlib.import_module(f"edgespec.{module}"), attr)


if TYPE_CHECKING:
    from ..backend import probe_rpc_worker
    from ..cli import main as cli_main
    from ..completion.session import (
        DEFAULT_MAX_LINES,
        CodeRules,
        CompletionRequest,
        CompletionResult,
        CompletionSession,
        load_session,
    )
    from ..drafting.base import Draft
    from ..drafting.build import build_drafter
    from ..drafting.history import LookupHistory
    from ..drafting.model import ModelDrafter
    from ..drafting.ngram import NgramDrafter
    from ..engine import generate as engine_generate
    from ..planning import make_policy
    from ..policy.adaptive import AdaptiveGamma
    from ..policy.costs import (
        CALIBRATION_DEPTH,
        MAX_VERIFY,
        CostCurve,
        load_or_measure,
        measure_curve,
        use_curve,
    )
    from ..sampling import process_logits
    from ..server.app import EdgespecServer
    from .corpus import load_corpus, split_of
    from .latency_proxy import LatencyProxy
    from .runner import render_workload
    from .workloads import Workload, builtin_workloads, parse_workload
