"""Where a code completion stops, decided on its text as it streams.

Token-level stops (end-of-generation, FIM control tokens) and stop strings are
the engine's and the completion loop's; the rules here work on lines:

* **max lines**: the completion keeps at most ``max_lines`` lines (the first one
  being the rest of the cursor's line);
* **indentation** (llama.cpp's ``n_indent``): a later line indented less than
  ``min_indent`` columns ends the completion before it (and the blank lines
  before it), e.g. at the end of the function the cursor is in;
* **suffix repetition**: a model (above all one without FIM tokens, which never
  sees the suffix) often goes on to write the code that follows the cursor.
  When the completion's lines, from a line start, repeat the suffix's next
  non-blank lines (whitespace-insensitive, at least ``min_repeat_chars``
  characters of them, or all of them), the completion ends where the
  repetition starts, without the line break and the rest of the cursor's line
  that the suffix already supplies.

Text that a later cut could remove is held back: ``push`` returns only text that
is final, so a streaming client never has to take text back. Pure Python, no
model: tested on its own.
"""

from __future__ import annotations

from enum import Enum

DEFAULT_MIN_REPEAT_CHARS = 8
#: A suffix with fewer non-blank characters than this (a lone "}") is too weak a
#: signal: matching it would end completions at every closing brace.
MIN_NEEDLE_CHARS = 3


class _Match(Enum):
    DEAD = 0
    LIVE = 1
    FULL = 2


class CodeStop:
    """Line-based stop rules for one completion.

    Args:
        suffix: the text after the cursor ("" when unknown).
        at_line_start: the cursor is at the start of a line (the prefix ends with
            a newline or is empty), so the suffix's first line is a whole line.
        max_lines: keep at most this many lines (None: no limit).
        min_indent: end before a non-blank later line indented less than this.
        min_repeat_chars: suffix characters a repetition must match to count.
    """

    def __init__(
        self,
        suffix: str = "",
        *,
        at_line_start: bool = False,
        max_lines: int | None = None,
        min_indent: int | None = None,
        min_repeat_chars: int = DEFAULT_MIN_REPEAT_CHARS,
    ) -> None:
        if max_lines is not None and max_lines < 1:
            raise ValueError(f"max_lines must be >= 1, got {max_lines}")
        self.text = ""
        self.stop_reason: str | None = None  # "max_lines", "indent" or "suffix"
        self.clamped = False  # a cut fell inside shown text (a bug; tests check it)
        self._emitted = 0
        self._max_lines = max_lines
        self._min_indent = min_indent or 0
        self._at_line_start = at_line_start
        rest, _, body = ("", "", suffix) if at_line_start else suffix.partition("\n")
        self._rest = rest.strip()
        needle = [s.strip() for s in body.split("\n") if s.strip()]
        total = sum(len(s) for s in needle)
        self._needle = needle if total >= MIN_NEEDLE_CHARS else []
        self._threshold = min(min_repeat_chars, total)
        self._first_live = 0 if at_line_start else 1  # earlier candidates are dead

    @property
    def stopped(self) -> bool:
        """True once a rule has ended the completion."""
        return self.stop_reason is not None

    def push(self, piece: str) -> str:
        """Add generated text; return the text that became final (maybe "")."""
        if self.stop_reason is not None:
            return ""
        self.text += piece
        cut = self._find_cut(final=False)
        if cut is not None:
            return self._stop(*cut)
        return self._release(self._safe_end())

    def finish(self) -> str:
        """Generation ended (end token, token limit, stop string): return the rest."""
        if self.stop_reason is None:
            cut = self._find_cut(final=True)
            if cut is not None:
                return self._stop(*cut)
        return self._release(len(self.text))

    # ------------------------------------------------------------------ internals

    def _stop(self, end: int, reason: str) -> str:
        if end < self._emitted:  # never take back what was shown (_safe_end prevents it)
            self.clamped = True
            end = self._emitted
        self.text = self.text[:end]
        self.stop_reason = reason
        return self._release(end)

    def _release(self, end: int) -> str:
        if end <= self._emitted:
            return ""
        out = self.text[self._emitted : end]
        self._emitted = end
        return out

    def _line_starts(self) -> list[int]:
        starts = [0]
        i = self.text.find("\n")
        while i >= 0:
            starts.append(i + 1)
            i = self.text.find("\n", i + 1)
        return starts

    def _find_cut(self, *, final: bool) -> tuple[int, str] | None:
        """(end, reason) of the earliest rule that fires, or None."""
        starts = self._line_starts()
        lines = self.text.split("\n")
        cuts: list[tuple[int, str]] = []
        if self._max_lines is not None and len(starts) > self._max_lines:
            cuts.append((starts[self._max_lines] - 1, "max_lines"))
        if self._min_indent:
            for i in range(1, len(lines)):
                body = lines[i].lstrip(" \t")
                if body.strip() and len(lines[i]) - len(body) < self._min_indent:
                    cuts.append((self._trimmed_end(starts[i], trim_rest=False), "indent"))
                    break
        if self._needle:
            for i in range(self._first_live, len(lines)):
                status, matched = self._match(lines[i:], final)
                if status is _Match.DEAD:
                    if i == self._first_live:  # dead for good: a line never un-mismatches
                        self._first_live += 1
                elif status is _Match.FULL or (final and matched >= self._threshold):
                    cuts.append((self._trimmed_end(starts[i]), "suffix"))
                    break
        return min(cuts) if cuts else None

    def _match(self, lines: list[str], final: bool) -> tuple[_Match, int]:
        """Do ``lines`` (the last one partial unless final) repeat the needle's start?"""
        j = matched = 0
        for k, line in enumerate(lines):
            s = line.strip()
            if not s:
                continue
            if k == len(lines) - 1 and not final:  # still growing
                # compared stripped, as a whole line is: a trailing space may stay
                if self._needle[j].startswith(s):
                    return _Match.LIVE, matched + len(s)
                return _Match.DEAD, matched
            if s == self._needle[j]:
                j += 1
                matched += len(s)
                if matched >= self._threshold or j == len(self._needle):
                    return _Match.FULL, matched
            elif final and k == len(lines) - 1 and self._needle[j].startswith(s):
                return _Match.LIVE, matched + len(s)
            else:
                return _Match.DEAD, matched
        return _Match.LIVE, matched

    def _trimmed_end(self, start: int, *, trim_rest: bool = True) -> int:
        """Where the text ends when cut before the line at offset ``start``.

        Trailing blank lines go (the suffix has its own line breaks); with
        ``trim_rest`` (a suffix repetition) so does a repeated rest of the cursor line.
        """
        kept = self.text[:start]
        end = len(kept.rstrip())
        if end == 0:
            return 0
        if self._at_line_start:
            # the suffix starts a line: keep the line break that ends the completion
            nl = kept.find("\n", end)
            return nl + 1 if nl >= 0 else end
        # the suffix supplies the line break, and the rest of the cursor's line
        if trim_rest and self._rest and "\n" not in kept[:end] and kept[:end].endswith(self._rest):
            end -= len(self._rest)
        return end

    def _safe_end(self) -> int:
        """How much text no later cut can remove."""
        text = self.text
        safe = len(text.rstrip())  # trailing whitespace may be trimmed
        lines = text.split("\n")
        if len(lines) == 1 and self._rest and not self._at_line_start:
            # the cursor's line may still end with a repetition of its rest
            line = text.rstrip()
            for k in range(min(len(self._rest), len(line)), 0, -1):
                if line.endswith(self._rest[:k]):
                    safe = min(safe, len(line) - k)
                    break
        if self._needle:
            starts = self._line_starts()
            for i in range(self._first_live, len(lines)):
                if self._match(lines[i:], False)[0] is not _Match.DEAD:
                    safe = min(safe, self._trimmed_end(starts[i]))
                    break
        return max(safe, self._emitted)
