"""Stop strings in text that grows a piece at a time.

``StopSequenceMatcher`` answers the two questions a stream asks after each new
piece: does a stop string start somewhere (``find``), and, if not, how many
characters at the end must wait because they could be the start of one
(``held_back``)? A stream that sends only ``text[:len(text) - held_back(text)]``
never sends part of a stop string that the final text drops. Pure Python: the
engine uses it, and tests/test_stopping.py tests it on its own.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopSequenceMatcher:
    """Matches a set of stop strings against a growing text.

    Args:
        stops: the stop strings; empty ones are ignored (they would match anywhere).
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops: tuple[str, ...] = tuple(s for s in stops if s)

    def find(self, text: str, n_new: int | None = None) -> int | None:
        """Index in text where the earliest stop string starts, or None.

        n_new: how many characters at the end of text are new since the last call;
        only matches that end in them are looked for (earlier ones were found then).
        None searches the whole text.
        """
        best = None
        for s in self.stops:
            start = 0 if n_new is None else max(0, len(text) - n_new - len(s) + 1)
            i = text.find(s, start)
            if i >= 0 and (best is None or i < best):
                best = i
        return best

    def held_back(self, text: str) -> int:
        """Length of the longest end of text that begins some stop string (0 if none).

        A whole stop string is not counted: ``find`` reports it.
        """
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:k]):
                    best = k
                    break
        return best
