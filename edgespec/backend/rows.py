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
