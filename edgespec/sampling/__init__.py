"""Sampling: its parameters (``params``), the processing of logits into next-token
distributions (``processing``: temperature, top-k, min-p, top-p, penalties), the
context-dependent part of it (``context_processing``: penalties over the tokens so far
and a grammar's mask, walked along a draft), and stop strings (``stops``).

The names the rest of edgespec uses most are re-exported here; ``context_processing``
(which needs a model and a grammar) is imported from its module.
"""

from .params import (
    DEFAULT_MIN_P,
    DEFAULT_PENALTY_LAST_N,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_K,
    DEFAULT_TOP_P,
    SamplingParams,
)
from .processing import (
    TokenDist,
    TopLogprobs,
    apply_penalties,
    dist_logprobs,
    greedy_tokens,
    kept_logprobs,
    process_logits,
    residual,
    row_logprobs,
)

__all__ = [
    "DEFAULT_MIN_P",
    "DEFAULT_PENALTY_LAST_N",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TOP_K",
    "DEFAULT_TOP_P",
    "SamplingParams",
    "TokenDist",
    "TopLogprobs",
    "apply_penalties",
    "dist_logprobs",
    "greedy_tokens",
    "kept_logprobs",
    "process_logits",
    "residual",
    "row_logprobs",
]
