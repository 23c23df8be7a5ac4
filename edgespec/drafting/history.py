"""A lookup that learns across requests: an n-gram index over earlier prompts and outputs.

The prompt lookup (``NgramDrafter``) sees one request's context. An editor's
twentieth completion in a file, or a chat client that resends a revised function,
often continues text an earlier request *generated* (a suggestion the user only
half took) and that no later prompt holds. ``LookupHistory`` keeps the last
``max_tokens`` tokens of finished requests (prompt and output) with an index of their
n-grams; the n-gram drafter consults it where the context has no proposal.

It belongs to the session that owns the target (token ids mean nothing across
models), is shared by all of a server's slots (a lock guards it: slots run on their
own threads), and can be saved and loaded (``save``/``load``, atomic writes).

From llama.cpp's ``common/ngram-cache.cpp`` (llama-lookup's context, "dynamic" and
"static" caches): the order of consultation (the context first, then the cache of
earlier generations), the stricter rule for the longer-lived cache (there, larger
minimum counts and shares; here, a contested gram needs a longer agreement) and the
cache saved between runs and merged into. Not its successor counts: a count says
which token most often followed a short gram across all the text, while what pays
here is the *latest* occurrence and how far back it agrees with the context (the
``match_len`` the adaptive policy keys its acceptance estimates on), as in the
context lookup.
"""

from __future__ import annotations

import json
import threading
from array import array
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from ..files import replace_file
from ..prefix import common_prefix

DEFAULT_HISTORY_TOKENS = 262_144  # about 1 MiB of tokens, and an index of ~3 entries each
# n-gram sizes indexed, longest first: the latest occurrence of a 16-gram agrees with
# the context at least 16 tokens back, where the latest of a 4-gram among a few
# 100k tokens is often a coincidence
HISTORY_GRAMS = (16, 8, 4)
# a match whose gram has been followed by different tokens must agree this far back
HISTORY_CONTESTED_MIN_MATCH = 8
AGREEMENT_CAP = 64  # as the context lookup's MATCH_LEN_CAP
_SEP = -1  # between documents: never a token, so matches and copies stop there
_RECENT = 4  # a new document's shared prefix is looked for in the last few documents
FORMAT = "edgespec-lookup-history"
VERSION = 1


class LookupHistory:
    """The last ``max_tokens`` tokens of earlier requests, with a latest-occurrence index.

    ``add(tokens)`` appends a finished request's prompt and output (the part a recent
    document already holds is stored once: an editor's prompts are mostly the same
    file); ``lookup(context, n)`` copies up to n tokens that followed the latest
    occurrence of the context's longest indexed tail gram, with how far back it agrees.
    The oldest documents are dropped once the history holds more than ``max_tokens``.
    """

    def __init__(self, max_tokens: int = DEFAULT_HISTORY_TOKENS, *, model: str = "") -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.max_tokens = max_tokens
        self.model = model  # what save() records and load() checks (e.g. the GGUF's name)
        self._lock = threading.Lock()
        self._tokens = array("i")  # the documents, each followed by _SEP
        self._base = 0  # absolute position of _tokens[0] (positions never move)
        # hash(gram) -> absolute position just after its latest occurrence, as ~pos
        # when the gram has been followed by different tokens; entries before _base
        # are stale (purged when documents are dropped)
        self._index: dict[int, int] = {}
        self._starts: deque[int] = deque()  # absolute start of each document held
        self._recent: deque[tuple[int, tuple[int, ...]]] = deque(maxlen=_RECENT)  # (start, doc)
        self.changes = 0  # documents added so far (what a saver compares)

    def __len__(self) -> int:
        """Tokens held (separators included)."""
        return len(self._tokens)

    @property
    def documents(self) -> int:
        """Documents held."""
        return len(self._starts)

    def add(self, tokens: Sequence[int]) -> None:
        """Append a finished request's tokens (its prompt, then its output)."""
        doc = tuple(int(t) for t in tokens)
        if not doc:
            return
        with self._lock:
            # (a document whose start was dropped holds its prefix no longer)
            shared = max(
                (common_prefix(doc, r) for at, r in self._recent if at >= self._base), default=0
            )
            # a prefix a recent document holds is indexed there already; keep enough
            # of it before the new part for matches to run back into it
            start = max(0, shared - AGREEMENT_CAP) if shared >= max(HISTORY_GRAMS) else 0
            part = doc[start:]
            if len(part) <= max(HISTORY_GRAMS) and start > 0:
                return  # nothing new worth indexing
            self._recent.append((self._base + len(self._tokens) - start, doc))
            self._append(part)
            self._drop_oldest()

    def _append(self, part: tuple[int, ...]) -> None:
        self.changes += 1
        tokens, index = self._tokens, self._index
        begin = self._base + len(tokens)
        self._starts.append(begin)
        tokens.extend(part)
        tokens.append(_SEP)
        base = self._base
        for i in range(1, len(part)):
            nxt = part[i]
            for k in HISTORY_GRAMS:
                if k > i:
                    continue
                key = hash(part[i - k : i])
                seen = index.get(key)
                pos = begin + i
                if seen is not None:
                    old = ~seen if seen < 0 else seen
                    if seen < 0 or old < base or tokens[old - base] != nxt:
                        pos = ~pos  # contested (conservatively, also by dropped text)
                index[key] = pos

    def _drop_oldest(self) -> None:
        if len(self._tokens) <= self.max_tokens:
            return
        # drop whole documents down to 3/4 of the bound, so the purge of the index
        # is paid once every max_tokens/4 tokens added
        keep_from = self._base + len(self._tokens) - self.max_tokens * 3 // 4
        while self._starts and self._starts[0] < keep_from:
            self._starts.popleft()
        new_base = self._starts[0] if self._starts else self._base + len(self._tokens)
        if not self._starts:  # one document longer than the bound: keep its tail
            new_base = keep_from
            self._starts.append(new_base)
        del self._tokens[: new_base - self._base]
        self._base = new_base
        self._index = {
            key: pos for key, pos in self._index.items() if (~pos if pos < 0 else pos) >= new_base
        }

    def lookup(
        self, context: Sequence[int], n: int, *, longer_than: int = 0
    ) -> tuple[list[int], int] | None:
        """Up to n tokens that followed the latest occurrence of the context's longest
        indexed tail gram, and how many tokens back it agrees with the context; None
        when nothing agrees more than ``longer_than`` tokens, or the gram is contested
        and agrees less than HISTORY_CONTESTED_MIN_MATCH tokens."""
        if n <= 0:
            return None
        with self._lock:
            tokens, base = self._tokens, self._base
            for k in HISTORY_GRAMS:
                if k > len(context):
                    continue
                tail = tuple(context[-k:])
                pos = self._index.get(hash(tail))
                if pos is None:
                    continue
                contested = pos < 0
                end = (~pos if contested else pos) - base
                if end < 0:
                    continue  # dropped
                match = _agreement(tokens, end, context)
                if match < k:
                    continue  # a hash collision
                if match <= longer_than or (contested and match < HISTORY_CONTESTED_MIN_MATCH):
                    return None
                out = []
                for t in tokens[end : end + n]:
                    if t == _SEP:
                        break
                    out.append(t)
                return (out, match) if out else None
        return None

    # ------------------------------------------------------------------ saving

    def save(self, path: str | Path) -> None:
        """Write the history to ``path`` atomically (readers see the old file or this)."""
        with self._lock:
            ends = [*list(self._starts)[1:], self._base + len(self._tokens)]
            docs = [
                self._tokens[a - self._base : b - self._base - 1].tolist()
                for a, b in zip(self._starts, ends, strict=True)
            ]
        data = {"format": FORMAT, "version": VERSION, "model": self.model, "documents": docs}
        replace_file(Path(path), lambda tmp: tmp.write_text(json.dumps(data), encoding="utf-8"))

    def load(self, path: str | Path) -> int:
        """Add the documents saved at ``path`` after those held; returns how many.

        Raises ValueError for a file that is no saved history or was saved for
        another model (token ids mean nothing across vocabularies), OSError when it
        cannot be read.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a saved lookup history ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path}: not a saved lookup history")
        if data.get("version") != VERSION:
            raise ValueError(f"{path}: lookup history version {data.get('version')!r}")
        if self.model and data.get("model") and data["model"] != self.model:
            raise ValueError(f"{path}: saved for model {data['model']!r}, not {self.model!r}")
        docs = data.get("documents")
        if not isinstance(docs, list) or not all(
            isinstance(d, list) and all(isinstance(t, int) and t >= 0 for t in d) for d in docs
        ):
            raise ValueError(f"{path}: malformed lookup history")
        with self._lock:
            for d in docs:  # as saved: the parts recent documents did not hold
                if d:
                    self._append(tuple(d))
            self._drop_oldest()
        return len(docs)


def _agreement(tokens: array, end: int, context: Sequence[int]) -> int:
    """How many tokens before ``end`` in the history agree with the context's tail."""
    n = 0
    limit = min(AGREEMENT_CAP, end, len(context))
    while n < limit and tokens[end - 1 - n] == context[-1 - n]:
        n += 1
    return n
