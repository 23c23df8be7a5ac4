"""llama-server's ``t_max_predict_ms``, for the worker to poll while a completion runs."""

from __future__ import annotations

import time


class TimeLimit:
    """llama-server's ``t_max_predict_ms``: once generating has taken longer than
    this (measured from the first token), the completion ends after the next
    piece holding a newline, that piece kept (stop type "limit"). 0: no limit.

    The pieces are those the session releases: where code rules hold a line's
    newline back, it is seen, and the completion ends, with the next piece."""

    def __init__(self, ms: int) -> None:
        self.ms = ms
        self.reached = False
        self._start: float | None = None

    def saw(self, piece: str) -> None:
        """A piece of the completion was produced."""
        if self.ms <= 0:
            return
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if "\n" in piece and (now - self._start) * 1000 > self.ms:
            self.reached = True
