"""One GGUF model and its llama.cpp context.

``LlamaModel`` keeps the tokens its KV cache holds (sequence 0, positions 0..n-1)
and offers exactly what the speculative loop needs: decode a run of tokens asking
logits only for chosen rows, roll the cache back to a prefix, and reuse the
longest common prefix between calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BackendError, ModelLoadError, RpcWorkerLost
from ..files import check_gguf_file
from ..prefix import ReusesPrefix
from .bindings import decode_in_mode, ll, swa_ring, tiled_mode
from .checkpoints import is_prefill, window_checkpoints
from .compute import ComputeThread, local_compute
from .kernels import FAST_KERNELS, REPACK_WEIGHTS, default_threads
from .log import _failure_reason, _log_tail
from .rows import decode_rows, prompt_rows
from .rpc import rpc_devices, rpc_worker_lost
from .rpc_watch import DEFAULT_RPC_TIMEOUT_S, check_rpc_timeout, watched
from .vocab import Vocabulary

if TYPE_CHECKING:
    from .parallel import SequenceView

DEFAULT_CTX = 4096
MAX_SEQ = 64  # sequences one context may hold (llama.cpp's LLAMA_MAX_SEQ is 256)
DEFAULT_BATCH = 512
GGML_TYPE_BF16, GGML_TYPE_F16 = 30, 1


_said_full_swa_cache = False


def _say_full_swa_cache_once() -> None:
    """Warn once per process that a sliding-window model keeps its full-size cache."""
    global _said_full_swa_cache
    if not _said_full_swa_cache:
        _said_full_swa_cache = True
        logging.getLogger("edgespec").warning(
            "edgespec: this llama-cpp-python lacks edgespec's sliding-window ring patch "
            "(scripts/bootstrap.sh applies it): sliding-window layers keep a full-size "
            "cache, exact but using more memory"
        )


class LlamaModel(ReusesPrefix, Vocabulary):
    """A GGUF model with one llama.cpp context and a tracked KV cache.

    Args:
        path: the .gguf file.
        n_ctx: context length in tokens (capped at the model's training length).
        n_threads: CPU threads for decoding (None or <= 0: the cores available).
        n_gpu_layers: layers to offload to Metal/CUDA/Vulkan (0 on a CPU build); with
            ``rpc``, the layers placed on the workers (0: all of them).
        rpc: llama.cpp RPC workers (``HOST:PORT``) to spread the layers over, split
            by their memory as llama.cpp's --rpc does; BackendError if one cannot be
            reached.
        rpc_timeout: seconds a decode may wait on the workers; past it they count as
            lost (see edgespec.backend.rpc_watch), where ggml-rpc would wait for ever.
        n_seq: sequences the context holds, each with ``n_ctx`` cells of its own (a
            per-sequence KV stream, not a unified cache: see edgespec.backend.parallel);
            with more than one, ``sequence(i)`` gives each its view. The model's own
            decode/truncate then act on sequence 0 unbatched: use the views instead.
        context_params: llama.cpp ``llama_context_params`` fields set over edgespec's own
            choices, by name (e.g. ``{"flash_attn_type": 0, "type_k": 1}``): for
            experiments with llama.cpp's settings. edgespec's choices are the
            batch-invariant ones; others can make greedy speculative output differ from
            plain.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_ctx: int = DEFAULT_CTX,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        n_batch: int = DEFAULT_BATCH,
        rpc: Sequence[str] | None = None,
        rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S,
        n_seq: int = 1,
        context_params: Mapping[str, int] | None = None,
    ) -> None:
        if isinstance(n_seq, bool) or not isinstance(n_seq, int) or not 1 <= n_seq <= MAX_SEQ:
            raise BackendError(f"n_seq must be a whole number from 1 to {MAX_SEQ}, got {n_seq!r}")
        self.path = Path(path)
        check_gguf_file(self.path)
        self.rpc = tuple(rpc or ())
        # every llama_decode on one thread per device group: see edgespec.backend.compute
        self._compute = ComputeThread(f"edgespec-rpc-{self.path.name}") if self.rpc else None
        try:
            self.rpc_timeout = check_rpc_timeout(rpc_timeout)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        if self.rpc:
            devices = rpc_devices(self.rpc)
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers > 0 else -1  # -1: all
        mparams.use_extra_bufts = REPACK_WEIGHTS  # see kernels.py
        _log_tail.clear()
        model = ll.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not model:
            reason = _failure_reason("llama.cpp could not load it")
            raise ModelLoadError(f"cannot load {self.path.name}: {reason}")
        self._model = model
        self._ctx = None
        self._batch = None
        self._vocab = ll.llama_model_get_vocab(model)
        self.n_vocab = ll.llama_vocab_n_tokens(self._vocab)
        self.n_gpu_layers = n_gpu_layers
        # as llama.cpp's own -t: 0 or less means every core (llama_context takes it as is)
        self.n_threads = n_threads if n_threads and n_threads > 0 else default_threads()

        n_ctx_train = ll.llama_model_n_ctx_train(model)
        cparams = ll.llama_context_default_params()
        per_seq = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        cparams.n_ctx = per_seq * n_seq
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq
        cparams.kv_unified = False  # a KV stream per sequence: see edgespec.backend.parallel
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        # Sliding-window layers keep llama.cpp's ring of n_swa + n_ubatch cells. Exact
        # after a rollback only with edgespec's patch (scripts/patches/llama-kv-swa-ring.patch):
        # position p goes to cell p mod size, so a rolled-back position is decoded again
        # into its own cell and attention sums the window in plain decoding's order. A
        # llama.cpp without it (a stock llama-cpp-python) keeps the full-size cache,
        # where every position has its own cell (exact, more memory); fast mode is not
        # bit-exact anyway and keeps the ring.
        swa_full = not FAST_KERNELS and not swa_ring()
        cparams.swa_full = swa_full
        cparams.no_perf = True
        if not FAST_KERNELS and (n_gpu_layers == 0 or self.rpc):  # (CPU workers)
            cparams.type_k, cparams.type_v = GGML_TYPE_BF16, GGML_TYPE_F16  # see FAST_KERNELS
        fields = {f[0] for f in type(cparams)._fields_}
        for field, value in (context_params or {}).items():
            if field not in fields:
                self.close()
                raise BackendError(f"no llama.cpp context parameter {field!r}")
            setattr(cparams, field, value)
        ctx = ll.llama_init_from_model(model, cparams)
        if not ctx:
            reason = _failure_reason("out of memory?")
            self.close()
            raise ModelLoadError(f"cannot create a context for {self.path.name}: {reason}")
        self._ctx = ctx
        self._mem = ll.llama_get_memory(ctx)
        self.n_swa = ll.llama_model_n_swa(model)  # > 0: a ring that holds the window
        #: the sliding-window layers' cache: "ring" (window-sized), "full" (every
        #: position: a llama.cpp without edgespec's ring patch), "none" (no such layers)
        self.swa_cache = "none" if self.n_swa <= 0 else "full" if swa_full else "ring"
        if self.swa_cache == "full":
            _say_full_swa_cache_once()
        self.n_ctx = ll.llama_n_ctx_seq(ctx)  # what one sequence holds
        self.n_seq = n_seq
        # llama.cpp caps the batch at the context size: chunk by what it enforces
        self.n_batch = min(n_batch, ll.llama_n_batch(ctx))
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[int] = []
        #: 1 where the tiled kernel computed that position (a prompt's; see decode)
        self.tiled_at = bytearray()
        # prompts on the tiled kernel: a CPU context of a llama.cpp with the mode patch
        self.tiled_prompts = tiled_mode() and n_gpu_layers == 0 and not self.rpc
        self.redecodes = 0  # times a rollback had to rebuild the cache by re-decoding
        self._views: list = []  # sequence(i) views, made on first use
        self.checkpoints = window_checkpoints(self, 0)

    # --- context ----------------------------------------------------------

    def decode(
        self, tokens: Sequence[int], *, logits: str | Sequence[int] = "last",
        tiled: bool | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Append tokens to the cache and return logits for some of them.

        Args:
            tokens: ids to process at positions len(self.tokens)...
            logits: "last", "all", "none", or indices into ``tokens``.
            tiled: the kernel of the rows (``tiled_at``): None, the prompt's rule
                (``rows.prompt_rows``: a prefill's rows, or all but the last of "last",
                on the tiled kernel, where the loaded llama.cpp offers it); True or
                False, every row on the tiled or the one-row kernel (a rebuild).

        Returns:
            A (rows, n_vocab) float32 view into llama.cpp's buffer, valid until the
            next decode on this model; copy it to keep it.
        """
        self._check_workers()
        n = len(tokens)
        rows, _ = decode_rows(n, logits, held=len(self.tokens), n_ctx=self.n_ctx,
                              n_batch=self.n_batch)  # fmt: skip
        # Each kernel gives a row the same logits whatever the batch (see kernels.py), so
        # a position decoded again (a rebuild) on the kernel it was first decoded on
        # gets back its cells bit for bit: docs/architecture.md, "Prompt kernels"
        k = prompt_rows(n, logits, tiled) if self.tiled_prompts else 0
        last = 0  # where the last llama_decode's tokens start
        for start, end in ((0, k), (k, n)):
            if end > start:
                wanted = {r - start for r in rows if start <= r < end}
                last = start + self._decode_run(tokens[start:end], wanted, tiled=start < k)
        if self.checkpoints is not None and is_prefill(tokens, logits):
            self.checkpoints.take(self.tokens)
        if not rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return self._logit_rows([r - last for r in rows])

    def _decode_run(self, tokens: Sequence[int], wanted: set[int], *, tiled: bool) -> int:
        """Decode tokens in batches of n_batch on one kernel; where the last batch starts."""
        start = 0
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._fill_batch(chunk, [start + i in wanted for i in range(len(chunk))])
            with watched(self.rpc, self.rpc_timeout):
                rc = (self._compute or local_compute()).run(
                    decode_in_mode, self._ctx, self._batch, tiled
                )
            if rc != 0:
                self._resync_after_failure()
                raise BackendError(f"llama_decode failed with code {rc}")
            self.tokens.extend(chunk)
            self.tiled_at.extend(bytes([tiled]) * len(chunk))
        return start

    def _fill_batch(self, tokens: Sequence[int], want_logits: Sequence[bool]) -> None:
        self._fill_rows([(0, len(self.tokens), tokens, want_logits)])

    def _fill_rows(self, parts: Sequence[tuple[int, int, Sequence[int], Sequence[bool]]]) -> None:
        """Fill the batch with (seq_id, first position, tokens, want_logits) parts."""
        b = self._batch
        i = 0
        for seq_id, base, tokens, want in parts:
            for j, t in enumerate(tokens):
                b.token[i] = t
                b.pos[i] = base + j
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq_id
                b.logits[i] = want[j]
                i += 1
        b.n_tokens = i

    def _decode_parts(
        self, parts: Sequence[tuple[int, int, Sequence[int], Sequence[bool]]], tiled: bool = False
    ) -> list[np.ndarray]:
        """One llama_decode over (seq_id, first position, tokens, want_logits) parts, on
        the tiled kernel or the one-row one; a copy of each part's wanted logit rows (the
        parts hold n_batch tokens at most)."""
        self._check_workers()
        self._fill_rows(parts)
        with watched(self.rpc, self.rpc_timeout):
            rc = (self._compute or local_compute()).run(
                decode_in_mode, self._ctx, self._batch, tiled and self.tiled_prompts
            )
        if rc != 0:
            raise BackendError(f"llama_decode failed with code {rc}")
        out, row = [], 0
        for _, _, tokens, want in parts:
            idx = [row + j for j, w in enumerate(want) if w]
            rows = self._logit_rows(idx).copy() if idx else np.empty((0, self.n_vocab), np.float32)
            out.append(rows)
            row += len(tokens)
        return out

    def sequence(self, i: int) -> SequenceView:
        """The view of sequence i (0 <= i < n_seq): a LlamaModel for the engine whose
        decodes share one llama_decode with the other sequences' (see parallel)."""
        from .parallel import SequenceView, batcher_of

        if not 0 <= i < self.n_seq:
            raise BackendError(f"no sequence {i}: the context holds {self.n_seq}")
        while len(self._views) < self.n_seq:
            self._views.append(SequenceView(self, len(self._views), batcher_of(self)))
        return self._views[i]

    def _logit_rows(self, batch_rows: Sequence[int]) -> np.ndarray:
        with watched(self.rpc, self.rpc_timeout):  # (waits for the decode's last pass)
            first = ll.llama_get_logits_ith(self._ctx, batch_rows[0])
        if not first:
            raise BackendError("llama.cpp returned no logits")
        base = ctypes.addressof(first.contents)
        row_bytes = self.n_vocab * ctypes.sizeof(ctypes.c_float)
        contiguous = all(
            ctypes.addressof(ll.llama_get_logits_ith(self._ctx, r).contents) == base + k * row_bytes
            for k, r in enumerate(batch_rows)
        )
        if contiguous:
            arr = (ctypes.c_float * (self.n_vocab * len(batch_rows))).from_address(base)
            return np.frombuffer(arr, dtype=np.float32).reshape(len(batch_rows), self.n_vocab)
        return np.stack(
            [
                np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ctx, r), shape=(self.n_vocab,))
                for r in batch_rows
            ]
        )

    def _check_workers(self) -> None:
        """RpcWorkerLost once a worker is gone: its layers, and this context, with it."""
        if self.rpc and (lost := rpc_worker_lost()) is not None:
            raise RpcWorkerLost(lost)

    def truncate(self, n: int) -> None:
        """Roll the KV cache back so it holds exactly the first n tokens."""
        if n >= len(self.tokens):
            return
        self._check_workers()
        if n < 0:
            raise BackendError(f"cannot truncate to {n} tokens")
        if self.rolled_back(0, n):
            del self.tokens[n:], self.tiled_at[n:]
            return
        start = self.checkpoints.restore(self.tokens, n) if self.checkpoints else 0
        self.rebuild(n, start)

    def rolled_back(self, seq_id: int, n: int) -> bool:
        """Drop seq_id's cells from n on; False if the caller must rebuild the first n
        tokens: recurrent memory refused, or (as llama-server checks) a window-sized SWA
        ring reused cells of the window before n (its oldest kept position > n - n_swa)."""
        mem = self._mem
        if not ll.llama_memory_seq_rm(mem, seq_id, n, -1):
            return False
        kept = ll.llama_memory_seq_pos_max(mem, seq_id) == n - 1
        window = max(0, n - self.n_swa) if self.n_swa else n
        return kept and ll.llama_memory_seq_pos_min(mem, seq_id) <= window

    def reset(self) -> None:
        """Empty the KV cache."""
        self._check_workers()
        with watched(self.rpc, self.rpc_timeout):  # (clears the workers' buffers too)
            ll.llama_memory_clear(self._mem, True)
        self.tokens.clear()
        self.tiled_at.clear()
        if self.checkpoints is not None:
            self.checkpoints.clear()

    def close(self) -> None:
        """Free the context and the model (idempotent). Not after a lost worker: a thread
        is parked inside this context's decode (see stay_up_on_worker_loss)."""
        if self.rpc and rpc_worker_lost() is not None:
            return
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None
        if self._compute is not None:
            self._compute.stop()
            self._compute = None

    def _resync_after_failure(self) -> None:
        # A failed decode may leave part of the batch in the cache: trim to what we track.
        ll.llama_memory_seq_rm(self._mem, 0, len(self.tokens), -1)

    def __enter__(self) -> LlamaModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
