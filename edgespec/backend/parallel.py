"""Several sequences in one llama.cpp context, their decodes batched across threads.

A server runs each request on its own thread through the same engine code as a
lone request, against a ``SequenceView``: a LlamaModel for one sequence id. A
view's decode hands its rows to the context's ``Batcher``; the first thread that
finds the context free (the leader) gathers the rows of every sequence that is
waiting, up to n_batch rows, runs one llama_decode for all of them, and gives each
thread a copy of its own logit rows. The leader waits a little (``Batcher.window``)
for sequences still busy between two decodes, so that sequences in step share a
decode instead of taking turns.

Exactness: each sequence has a KV stream of its own (``kv_unified`` false), so its
cells sit at the same indices, and attention reads the same cells in the same
order, whatever the other sequences hold; with edgespec's batch-invariant kernels a
row's matmuls give the same result whatever else the batch holds. A request's
logits are then bit-identical to the same request decoded alone
(tests/test_parallel.py checks it against a one-sequence context). A unified cache
was measured too: 1.5x faster on four Gemma 3 270M sequences, but its logits differed
from the sequences' alone by up to 3.0, so it is not used. The price: llama.cpp
splits a batch over KV streams into ubatches that take as many tokens from each of a
run of consecutive sequence ids (``split_equal``), so a shared decode of 26 rows of
one sequence and 1 of another is two graph passes, not one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BackendError, RpcWorkerLost
from ..prefix import ReusesPrefix
from .bindings import ll
from .checkpoints import is_prefill, window_checkpoints
from .rows import decode_rows, prompt_rows
from .rpc import on_rpc_worker_lost

LlamaModel = Any  # edgespec.backend.model.LlamaModel (which imports this module)

#: The longest a leader waits for sequences busy between decodes (seconds) ...
MAX_WAIT_S = 0.004
#: ... and at most this share of the last decode's time.
WAIT_SHARE = 0.15
#: A prompt is decoded in pieces of this many tokens while other sequences are
#: working, so that their rounds go on between the pieces.
PREFILL_PIECE = 128
#: While an urgent sequence (an editor's completion) works, the others' rows may take
#: at most this share of the decode time (counted from when it began): on a CPU each
#: row adds to every sequence's decode, so a chat's rows slow each keystroke's answer,
#: by about 1 / (1 - share) this way (more: a decode that starts within the share runs
#: to its end); and the chats still get their share.
OTHERS_SHARE = 0.25


@dataclass
class _Part:
    """One view's rows waiting for a decode."""

    view: SequenceView
    tokens: Sequence[int]
    want: list[bool]
    tiled: bool = False  # a prompt's rows, on the tiled kernel (never mixed with others)
    since: float = field(default_factory=time.perf_counter)
    done: bool = False
    logits: np.ndarray | None = None
    error: BaseException | None = None


class Batcher:
    """Merges the decodes of one context's sequences into shared llama_decode calls."""

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self._cv = threading.Condition()
        self._pending: list[_Part] = []
        self._busy = False  # a decode or a cache edit is running on the context
        self._edits_waiting = 0  # cache edits waiting for the context: they go first
        self.working: set[int] = set()  # sequences inside a generation
        self.urgent: set[int] = set()  # ... of which urgent (working(urgent=True))
        self.last_rows: dict[int, int] = {}  # rows each sequence had in the last decode
        self.last_decode_s = 0.0
        self.decodes = 0  # llama_decode calls made
        self.shared = 0  # ... of which carried more than one sequence
        self.rows = 0  # rows decoded in all
        self.deferred = 0  # decodes that left a waiting, not urgent sequence out
        self._urgent_since = 0.0  # when the urgent set last became non-empty ...
        self._others_s = 0.0  # ... and the decode time the others' rows took since
        self._inflight: list[_Part] = []  # the parts of the decode running now
        self._failed: BaseException | None = None  # the context is gone (fail)

    # ------------------------------------------------------------------ waiting

    @property
    def window(self) -> float:
        """How long a leader waits for working sequences that have not submitted yet."""
        return min(MAX_WAIT_S, WAIT_SHARE * self.last_decode_s)

    def _eligible(self, part: _Part, now: float) -> bool:
        """May part join the next decode? Always, unless an urgent sequence works, part
        is not urgent, and the others have had their OTHERS_SHARE of the time."""
        if not self.urgent or part.view.seq_id in self.urgent:
            return True
        return self._others_s < OTHERS_SHARE * (now - self._urgent_since)

    def _ready(self, now: float) -> bool:
        if not self._pending or self._busy or self._edits_waiting:
            return False
        eligible = [p for p in self._pending if self._eligible(p, now)]
        if not eligible:
            return False
        waiting = {p.view.seq_id for p in eligible}
        expected = self.working if not self.urgent else self.urgent
        return expected <= waiting or now - eligible[0].since >= self.window

    def _next_check(self, now: float) -> float | None:
        """Seconds until a pending part may become ready to go (None: only when told)."""
        if not self._pending or self._busy or self._edits_waiting:
            return None
        times = [p.since + self.window for p in self._pending if self._eligible(p, now)]
        if len(times) < len(self._pending) and OTHERS_SHARE > 0:  # some wait for their share
            times.append(self._urgent_since + self._others_s / OTHERS_SHARE)
        return max(1e-4, min(times) - now) if times else None

    def _take(self) -> list[_Part]:
        """The oldest eligible pending parts that fit one batch (the oldest always goes)."""
        room = self.model.n_batch
        now = time.perf_counter()
        batch, rest = [], []
        for part in self._pending:
            if (
                self._eligible(part, now)
                and len(part.tokens) <= room
                and part.view.seq_id not in {p.view.seq_id for p in batch}
                and (not batch or part.tiled == batch[0].tiled)
            ):
                batch.append(part)
                room -= len(part.tokens)
            else:
                rest.append(part)
        self._pending = rest
        self.deferred += any(not self._eligible(p, now) for p in rest)
        return batch

    def decode(
        self, view: SequenceView, tokens: Sequence[int], want: list[bool], tiled: bool = False
    ) -> np.ndarray:
        """Decode tokens for view (at its next positions); its wanted rows, copied."""
        part = _Part(view, tokens, want, tiled)
        with self._cv:
            if self._failed is not None:
                raise self._failed
            self._pending.append(part)
            self._cv.notify_all()
            while not part.done:
                now = time.perf_counter()
                if self._ready(now):
                    self._lead(self._take())
                    continue
                self._cv.wait(self._next_check(now))
        if part.error is not None:
            raise part.error
        assert part.logits is not None
        return part.logits

    def _lead(self, batch: list[_Part]) -> None:
        """Run one decode for batch (called holding the lock; released meanwhile)."""
        self._busy = True
        # llama.cpp splits a batch over per-sequence KV streams into ubatches of
        # consecutive sequence ids, in batch order: ascending ids make fewer of them
        batch.sort(key=lambda p: p.view.seq_id)
        self._inflight = batch
        self._cv.release()
        t0 = time.perf_counter()
        try:
            results = self.model._decode_parts(
                [(p.view.seq_id, len(p.view.tokens), p.tokens, p.want) for p in batch],
                batch[0].tiled,
            )
            for p, logits in zip(batch, results, strict=True):
                p.logits = logits
        except BaseException as exc:  # every part of a failed decode fails alike
            for p in batch:
                p.view._resync()
                p.error = exc if isinstance(exc, BackendError) else BackendError(str(exc))
        finally:
            elapsed = time.perf_counter() - t0
            self._cv.acquire()
            self._inflight = []
            self._busy = False
            self.last_decode_s = elapsed
            self.decodes += 1
            self.shared += len(batch) > 1
            self.rows += sum(len(p.tokens) for p in batch)
            self.last_rows = {p.view.seq_id: len(p.tokens) for p in batch}
            if self.urgent:  # the others' share of this decode, by their rows
                others = sum(len(p.tokens) for p in batch if p.view.seq_id not in self.urgent)
                self._others_s += elapsed * others / max(1, sum(self.last_rows.values()))
            for p in batch:
                p.view.shared_last = len(batch) > 1
            for p in batch:
                p.done = True
            self._cv.notify_all()

    def fail(self, exc: BaseException) -> None:
        """The context is gone for good (a lost RPC worker, whose decode never returns):
        every waiting decode, and every later one, raises exc instead of waiting."""
        with self._cv:
            self._failed = exc
            for part in [*self._pending, *self._inflight]:
                part.error, part.done = exc, True
            self._pending = []
            self._cv.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the context alone (no decode runs meanwhile): for KV cache edits."""
        with self._cv:
            # a waiting edit goes before the next decode: a sequence that decodes
            # back to back (an urgent one) would otherwise win the lock every time
            self._edits_waiting += 1
            try:
                while self._busy and self._failed is None:
                    self._cv.wait()
            finally:
                self._edits_waiting -= 1
            if self._failed is not None:
                raise self._failed
            self._busy = True
        try:
            yield
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def _sharing(self, seq_id: int) -> set[int]:
        """The other sequences whose rows seq_id's decodes carry: the working ones; for
        an urgent one, the other urgent ones (the rest are held to OTHERS_SHARE)."""
        return (self.urgent if seq_id in self.urgent else self.working) - {seq_id}

    def rows_elsewhere(self, seq_id: int) -> int:
        """Rows the sequences sharing with seq_id had in the last decode (0 when alone)."""
        with self._cv:
            sharing = self._sharing(seq_id)
            return sum(n for s, n in self.last_rows.items() if s in sharing)

    def sequences_elsewhere(self, seq_id: int) -> int:
        """Sequences sharing with seq_id that had rows in the last decode."""
        with self._cv:
            sharing = self._sharing(seq_id)
            return sum(1 for s in self.last_rows if s in sharing)


_batchers: dict[int, Batcher] = {}


def batcher_of(model: LlamaModel) -> Batcher:
    """The Batcher of model's context (one per context)."""
    batcher = _batchers.get(id(model))
    if batcher is None:
        batcher = _batchers[id(model)] = Batcher(model)
        if getattr(model, "rpc", ()):  # its decodes may never return: see fail
            on_rpc_worker_lost(lambda msg: batcher.fail(RpcWorkerLost(msg)))
    return batcher


class SequenceView(ReusesPrefix):
    """One sequence of a multi-sequence LlamaModel, usable wherever a LlamaModel is.

    It tracks its own tokens and KV cells (positions 0..n-1 of its sequence id);
    vocabulary, file and thread facts are the model's. ``working()`` marks it as in
    a generation, which leaders wait for.
    """

    def __init__(self, model: LlamaModel, seq_id: int, batcher: Batcher) -> None:
        self.model = model
        self.seq_id = seq_id
        self.batcher = batcher
        self.tokens: list[int] = []
        self.tiled_at = bytearray()  # as LlamaModel's
        self.redecodes = 0
        self.shared_last = False  # the last decode carried other sequences' rows
        self.checkpoints = window_checkpoints(model, seq_id)

    def __getattr__(self, name: str):
        # vocabulary, path, n_vocab, n_batch, n_threads, rpc, ...: the model's
        return getattr(self.model, name)

    @property
    def n_ctx(self) -> int:
        """Cells this sequence holds."""
        return self.model.n_ctx

    @contextlib.contextmanager
    def working(self, *, urgent: bool = False) -> Iterator[None]:
        """Mark this sequence as inside a generation for the duration; an urgent one
        (an editor waiting on a keystroke) holds the others' rows to OTHERS_SHARE."""
        b = self.batcher
        with b._cv:
            b.working.add(self.seq_id)
            if urgent:
                if not b.urgent:  # the others' share counts from here
                    b._urgent_since, b._others_s = time.perf_counter(), 0.0
                b.urgent.add(self.seq_id)
        try:
            yield
        finally:
            with b._cv:
                b.working.discard(self.seq_id)
                b.urgent.discard(self.seq_id)
                b._cv.notify_all()

    def rows_elsewhere(self) -> int:
        """Rows the sequences sharing its decodes added to the last one (see _sharing)."""
        return self.batcher.rows_elsewhere(self.seq_id)

    def sequences_elsewhere(self) -> int:
        """Sequences sharing its decodes that had rows in the last one."""
        return self.batcher.sequences_elsewhere(self.seq_id)

    def alone(self) -> bool:
        """True when no other sequence of the context is in a generation."""
        with self.batcher._cv:
            return not (self.batcher.working - {self.seq_id})

    def last_was_shared(self) -> bool:
        """True when this sequence's last decode carried other sequences' rows."""
        return self.shared_last

    def decode(
        self, tokens: Sequence[int], *, logits: str | Sequence[int] = "last",
        tiled: bool | None = None,
    ) -> np.ndarray:  # fmt: skip
        """As LlamaModel.decode, for this sequence; the rows are a copy."""
        n = len(tokens)
        rows, last_start = decode_rows(n, logits, held=len(self.tokens), n_ctx=self.n_ctx,
                                       n_batch=self.model.n_batch)  # fmt: skip
        wanted = set(rows)
        k = prompt_rows(n, logits, tiled) if self.model.tiled_prompts else 0
        out = np.empty((0, self.model.n_vocab), dtype=np.float32)
        for piece in self._pieces(n, last_start):  # each cut where the prompt's rows end
            for start, end in ((piece[0], min(piece[1], k)), (max(piece[0], k), piece[1])):
                if end > start:
                    on, want = start < k, [i in wanted for i in range(start, end)]
                    out = self.batcher.decode(self, tokens[start:end], want, on)
                    self.tokens.extend(tokens[start:end])
                    self.tiled_at.extend(bytes([on]) * (end - start))
        if self.checkpoints is not None and is_prefill(tokens, logits):
            with self.batcher.exclusive():
                self.checkpoints.take(self.tokens)
        return out

    def _pieces(self, n: int, last_start: int) -> Iterator[tuple[int, int]]:
        """Where to cut n tokens: batches of n_batch, the rows-free ones in smaller
        pieces while other sequences work (their rounds go between them)."""
        n_batch = self.model.n_batch
        for start in range(0, n, n_batch):
            end = min(n, start + n_batch)
            if start < last_start and self.batcher.working - {self.seq_id}:
                for s in range(start, end, PREFILL_PIECE):
                    yield s, min(end, s + PREFILL_PIECE)
            else:
                yield start, end

    def truncate(self, n: int) -> None:
        """Roll this sequence back to its first n tokens."""
        if n >= len(self.tokens):
            return
        if n < 0:
            raise BackendError(f"cannot truncate to {n} tokens")
        start = 0
        with self.batcher.exclusive():
            kept = self.model.rolled_back(self.seq_id, n)
            if not kept and self.checkpoints is not None:
                start = self.checkpoints.restore(self.tokens, n)
        if kept:
            del self.tokens[n:], self.tiled_at[n:]
            return
        self.rebuild(n, start)  # see LlamaModel.rolled_back

    def reset(self) -> None:
        """Empty this sequence's cells (the others keep theirs)."""
        with self.batcher.exclusive():
            ll.llama_memory_seq_rm(self.model._mem, self.seq_id, -1, -1)
        del self.tokens[:], self.tiled_at[:]
        if self.checkpoints is not None:
            self.checkpoints.clear()

    def _resync(self) -> None:
        # called by a leader, holding the context: drop cells past what we track
        ll.llama_memory_seq_rm(self.model._mem, self.seq_id, len(self.tokens), -1)

    def close(self) -> None:
        """Nothing: the model owns the context."""
