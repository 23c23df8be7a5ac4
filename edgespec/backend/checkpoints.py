"""Window checkpoints: copies of one sequence's sliding-window cells, so that a rollback
deeper than the window-sized ring can restore a copy and decode on from there instead
of decoding the whole prefix again.

The ring of a sliding-window layer holds the last ``n_swa`` positions and a batch
(see LlamaModel): a rollback to n keeps its cells only while the ring still holds
the window before n. Past that, llama-server restores a "context checkpoint"
(tools/server, ``--ctx-checkpoints``); this is the same idea, taken where edgespec
decodes a prompt: after every prefill (a decode that wants no logits) of at least
``CHECKPOINT_MIN_TOKENS``. So a reply generated again for the same prompt, or a new
request that departs from the last one after the end of an earlier prompt, restores
the newest checkpoint at or before where it departs and decodes only the tokens after
it.

A checkpoint holds only the window layers' cells (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``:
llama.cpp writes the cells within the window of the sequence's last position); the full
layers keep their own cells, trimmed to the checkpoint's length. Restored cells go back
to the cells plain decoding used (position p at cell p mod size, edgespec's ring patch),
so decoding from a checkpoint gives the same logits, bit for bit, as a fresh cache.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

from .bindings import ll

MAX_CHECKPOINTS = 3  # per sequence; each n_swa cells of the window layers (Gemma 3 270M: 7.5 MiB)
CHECKPOINT_MIN_TOKENS = 32  # shorter prefills (a few tokens of a turn) take none
_PARTIAL_ONLY = ll.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


@dataclass(frozen=True)
class WindowCheckpoint:
    """The window layers' cells of a sequence that held ``tokens``."""

    tokens: tuple[int, ...]
    data: ctypes.Array

    @property
    def size(self) -> int:
        """Bytes held."""
        return len(self.data)


class WindowCheckpoints:
    """The checkpoints of sequence ``seq_id`` of a context with sliding-window layers:
    ``take`` after a prefill, ``restore`` in a rollback the ring cannot serve. The
    caller holds the context (no decode of another thread in between)."""

    def __init__(self, ctx: object, mem: object, seq_id: int, n_swa: int) -> None:
        self._ctx, self._mem, self.seq_id, self.n_swa = ctx, mem, seq_id, n_swa
        self.held: list[WindowCheckpoint] = []  # oldest first
        self.restores = 0  # rollbacks served by a checkpoint

    def take(self, tokens: Sequence[int]) -> None:
        """Copy the window's cells of a sequence that now holds ``tokens``; the
        checkpoints that are no longer a prefix of it, and the oldest past
        MAX_CHECKPOINTS, are dropped."""
        n = len(tokens)
        self.held = [c for c in self.held if len(c.tokens) < n and _starts(tokens, c.tokens)]
        size = ll.llama_state_seq_get_size_ext(self._ctx, self.seq_id, _PARTIAL_ONLY)
        if size == 0:
            return
        data = (ctypes.c_uint8 * size)()
        got = ll.llama_state_seq_get_data_ext(self._ctx, data, size, self.seq_id, _PARTIAL_ONLY)
        if got != size:
            return  # (nothing kept: a rollback falls back to decoding again)
        self.held.append(WindowCheckpoint(tuple(tokens), data))
        del self.held[:-MAX_CHECKPOINTS]

    def restore(self, tokens: Sequence[int], n: int) -> int:
        """Put back the newest checkpoint of a prefix of ``tokens[:n]`` (the sequence
        holds ``tokens``, or their first n): the sequence then holds its first m
        tokens, m is returned. 0: none applies, and the caller decodes from the start."""
        for cp in reversed(self.held):
            m = len(cp.tokens)
            if m > n or not _starts(tokens, cp.tokens):
                continue
            ll.llama_memory_seq_rm(self._mem, self.seq_id, m, -1)  # the full layers: first m
            read = ll.llama_state_seq_set_data_ext(
                self._ctx, cp.data, len(cp.data), self.seq_id, _PARTIAL_ONLY
            )
            last = ll.llama_memory_seq_pos_max(self._mem, self.seq_id)
            first = ll.llama_memory_seq_pos_min(self._mem, self.seq_id)
            if read == len(cp.data) and last == m - 1 and first <= max(0, m - self.n_swa):
                self.restores += 1
                return m
            break  # a failed restore leaves the cells unknown: decode from the start
        return 0  # (the caller's reset then drops every checkpoint)

    def clear(self) -> None:
        """Drop every checkpoint (the sequence was emptied)."""
        self.held.clear()


def window_checkpoints(model: object, seq_id: int) -> WindowCheckpoints | None:
    """Checkpoints for sequence ``seq_id`` of a LlamaModel, or None: no window layers, a
    full-size window cache (a llama.cpp without the ring patch: every position kept, so
    nothing to restore), or RPC workers (each copy would cross the network)."""
    ring = getattr(model, "swa_cache", "ring") == "ring"
    if model.n_swa <= 0 or model.rpc or not ring:  # type: ignore[attr-defined]
        return None
    return WindowCheckpoints(model._ctx, model._mem, seq_id, model.n_swa)  # type: ignore[attr-defined]


def is_prefill(tokens: Sequence[int], logits: object) -> bool:
    """Whether a decode of ``tokens`` wanting ``logits`` is a prefill worth a checkpoint."""
    return isinstance(logits, str) and logits == "none" and len(tokens) >= CHECKPOINT_MIN_TOKENS


def _starts(tokens: Sequence[int], prefix: tuple[int, ...]) -> bool:
    return len(tokens) >= len(prefix) and tuple(tokens[: len(prefix)]) == prefix
