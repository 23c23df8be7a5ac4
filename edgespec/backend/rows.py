"""The checks every decode makes of its arguments (one place for the model and its views)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import BackendError, ContextFullError


def decode_rows(
    n: int, logits: str | Sequence[int], *, held: int, n_ctx: int, n_batch: int
) -> tuple[list[int], int]:
    """Check a decode of n tokens after ``held`` ones; (the rows whose logits are
    wanted, where the last batch of n_batch starts). BackendError/ContextFullError."""
    if n == 0:
        raise BackendError("decode called with no tokens")
    if held + n > n_ctx:
        raise ContextFullError(f"context full: {held} + {n} tokens exceed the context of {n_ctx}")
    if isinstance(logits, str):
        rows = {"last": [n - 1], "all": list(range(n)), "none": []}[logits]
    else:
        rows = list(logits)
    last_start = (n - 1) // n_batch * n_batch
    if any(not (last_start <= r < n) for r in rows):
        # Logits of an earlier chunk would be overwritten by the next decode.
        raise BackendError(f"logits requested outside the last batch of {n_batch} tokens")
    return rows, last_start



#: A "last" decode's rows before the last go to the tiled kernel when at least this many
#: (fewer: the second llama_decode that the last row then takes costs more than it saves).
PROMPT_MIN_ROWS = 32


def prompt_rows(n: int, logits: str | Sequence[int], tiled: bool | None = None) -> int:
    """How many leading tokens of a decode of n tokens wanting ``logits`` go to the tiled
    kernel (see LlamaModel.decode): tiled True all, False none; None, the rule: all of a
    prefill ("none"), all but the last of "last" (if PROMPT_MIN_ROWS or more), and none
    where other rows are wanted (a verify batch)."""
    if tiled is not None:
        return n if tiled else 0
    if isinstance(logits, str) and logits == "none":
        return n
    if isinstance(logits, str) and logits == "last" and n - 1 >= PROMPT_MIN_ROWS:
        return n - 1
    return 0
