"""One GGUF model and its llama.cpp context: the only module that touches llama_cpp.

``LlamaModel`` keeps the tokens its KV cache holds (sequence 0, positions 0..n-1)
and offers exactly what the speculative loop needs: decode a run of tokens asking
logits only for chosen rows, roll the cache back to a prefix, and reuse the
longest common prefix between calls.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Batch-invariant kernels. Speculative verification scores k tokens in one batch,
# plain decoding one at a time; greedy output is identical only if both give the
# same logits bit for bit. llama.cpp's CPU backend switches kernels with the batch
# size: repacked weights (n >= 4), a tiled K-quant matmul (n >= 8), and, for one
# token over an F16 KV cache of 512+ cells, flash attention split across threads.
# Each rounds differently (logits off by up to ~1.5 on Gemma 3 270M). We turn off
# the first two and keep the KV cache in BF16, which the split path does not take;
# BF16 is the models' training precision, with F16's footprint. The cost is within
# the noise here (scripts/kernel_check.py). EDGESPEC_FAST_KERNELS=1 restores
# llama.cpp's defaults, for speed over bit-exactness.
FAST_KERNELS = os.environ.get("EDGESPEC_FAST_KERNELS", "") == "1"
if not FAST_KERNELS:
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")

import llama_cpp as ll  # noqa: E402  (must follow the environment set-up above)

from .errors import BackendError, ContextFullError, ModelLoadError  # noqa: E402
from .files import check_regular_file  # noqa: E402

DEFAULT_CTX = 4096
DEFAULT_BATCH = 512
GGUF_MAGIC = b"GGUF"
GGML_TYPE_BF16 = 30

# enum ggml_log_level of this build's ggml.h (llama_cpp/_logger.py's comment shows an
# older order, where 4 was DEBUG): NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5.
GGML_LOG_WARN, GGML_LOG_ERROR, GGML_LOG_CONT = 3, 4, 5

#: Recent (level, text) warnings and errors from llama.cpp, to explain a failure.
_log_tail: list[tuple[int, str]] = []
_last_level = 0


@ll.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # Keep llama.cpp quiet, but remember recent warnings/errors to explain a failure.
    global _last_level
    line = text.decode("utf-8", "replace")
    if level == GGML_LOG_CONT:  # the rest of the previous message
        if _last_level in (GGML_LOG_WARN, GGML_LOG_ERROR) and _log_tail:
            _log_tail[-1] = (_log_tail[-1][0], _log_tail[-1][1] + line)
        return
    _last_level = level
    if level in (GGML_LOG_WARN, GGML_LOG_ERROR):
        _log_tail.append((level, line))
        del _log_tail[:-16]


#: llama.cpp's error lines that only say that something failed, not why.
_GENERIC = re.compile(r"failed to (load model|initialize the context)\W*$|^error loading model\W*$")


def _failure_reason(default: str) -> str:
    """llama.cpp's own reason for the failure just logged: its first telling error line
    (else its last warning, else ``default``), without the function-name prefixes."""

    def clean(text: str) -> str:
        text = " ".join(text.split())
        text = re.sub(r"^(\w+: )+", "", text)  # "llama_model_load: " and the like
        return re.sub(r"^error loading model: ", "", text)

    errors = [clean(t) for lv, t in _log_tail if lv == GGML_LOG_ERROR]
    telling = [e for e in errors if e and not _GENERIC.search(e)]
    if telling:
        return telling[0]
    warnings = [clean(t) for lv, t in _log_tail if lv == GGML_LOG_WARN]
    return next((w for w in reversed(warnings) if w), errors[0] if errors else default)


ll.llama_log_set(_log_callback, ctypes.c_void_p(0))
ll.llama_backend_init()


def default_threads() -> int:
    """Physical-ish core count: llama.cpp decodes fastest with one thread per core."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )


@dataclass(frozen=True)
class VocabInfo:
    """What the draft/target compatibility rule compares."""

    vocab_type: int
    n_vocab: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int


@dataclass(frozen=True)
class FimTokens:
    """Fill-in-the-middle token ids from the GGUF vocabulary; None where the model has none."""

    pre: int | None = None
    suf: int | None = None
    mid: int | None = None
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None

    @property
    def usable(self) -> bool:
        """True when prefix, suffix and middle tokens all exist (FIM prompts possible)."""
        return None not in (self.pre, self.suf, self.mid)


def _check_gguf_file(path: Path) -> None:
    check_regular_file(path)  # by stat, before opening: a named pipe would block the open
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file (bad magic {magic!r}): {path}")


class LlamaModel:
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
    ) -> None:
        self.path = Path(path)
        _check_gguf_file(self.path)
        self.rpc = tuple(rpc or ())
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        if self.rpc:
            devices = rpc_devices(self.rpc)
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
            mparams.n_gpu_layers = n_gpu_layers if n_gpu_layers > 0 else -1  # -1: all
        mparams.use_extra_bufts = FAST_KERNELS  # weight repacking: see FAST_KERNELS
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
        cparams.n_ctx = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        # A sliding-window cache evicts old cells, so a rollback could need tokens it
        # already dropped. A full-size SWA cache keeps every cell and rolls back exactly.
        cparams.swa_full = ll.llama_model_n_swa(model) > 0
        cparams.no_perf = True
        if not FAST_KERNELS and (n_gpu_layers == 0 or self.rpc):  # (CPU workers)
            cparams.type_k = cparams.type_v = GGML_TYPE_BF16  # see FAST_KERNELS
        ctx = ll.llama_init_from_model(model, cparams)
        if not ctx:
            reason = _failure_reason("out of memory?")
            self.close()
            raise ModelLoadError(f"cannot create a context for {self.path.name}: {reason}")
        self._ctx = ctx
        self._mem = ll.llama_get_memory(ctx)
        self.n_ctx = ll.llama_n_ctx(ctx)
        # llama.cpp caps the batch at the context size: chunk by what it enforces
        self.n_batch = min(n_batch, ll.llama_n_batch(ctx))
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[int] = []
        self.redecodes = 0  # times a rollback had to rebuild the cache by re-decoding

    # --- vocabulary -------------------------------------------------------

    def vocab_info(self) -> VocabInfo:
        """Vocabulary facts used by the compatibility check."""
        v = self._vocab
        return VocabInfo(
            vocab_type=ll.llama_vocab_type(v),
            n_vocab=self.n_vocab,
            add_bos=bool(ll.llama_vocab_get_add_bos(v)),
            bos=ll.llama_vocab_bos(v),
            add_eos=bool(ll.llama_vocab_get_add_eos(v)),
            eos=ll.llama_vocab_eos(v),
        )

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (as in the GGUF, e.g. '▁the')."""
        raw = ll.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <end_of_turn>, ...)."""
        return bool(ll.llama_vocab_is_eog(self._vocab, token))

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """Text to token ids; add_special adds BOS where the model wants it."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(
                self._vocab, data, len(data), buf, cap, add_special, parse_special
            )
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The bytes a token contributes to the text (may be part of a UTF-8 character)."""
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def chat_template(self) -> str | None:
        """The model's default chat template from its GGUF metadata, if any."""
        raw = ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    def fim_tokens(self) -> FimTokens:
        """The vocabulary's fill-in-the-middle tokens (each None when absent)."""
        v = self._vocab

        def tok(fn) -> int | None:  # llama.cpp returns LLAMA_TOKEN_NULL (-1) when absent
            t = fn(v)
            return t if t >= 0 else None

        return FimTokens(
            pre=tok(ll.llama_vocab_fim_pre),
            suf=tok(ll.llama_vocab_fim_suf),
            mid=tok(ll.llama_vocab_fim_mid),
            pad=tok(ll.llama_vocab_fim_pad),
            rep=tok(ll.llama_vocab_fim_rep),
            sep=tok(ll.llama_vocab_fim_sep),
        )

    def grammar(self, text: str, root: str = "root") -> GrammarMatcher:
        """A grammar's start state over this model's vocabulary (ValueError if refused)."""
        smpl = ll.llama_sampler_init_grammar(self._vocab, text.encode(), root.encode())
        if not smpl:  # (checked grammars parse: only then is stderr captured for the reason)
            smpl = compile_grammar(text, root, self._vocab)
        return GrammarMatcher(smpl, self.n_vocab)

    # --- context ----------------------------------------------------------

    def decode(self, tokens: Sequence[int], *, logits: str | Sequence[int] = "last") -> np.ndarray:
        """Append tokens to the cache and return logits for some of them.

        Args:
            tokens: ids to process at positions len(self.tokens)...
            logits: "last", "all", "none", or indices into ``tokens``.

        Returns:
            A (rows, n_vocab) float32 view into llama.cpp's buffer, valid until the
            next decode on this model; copy it to keep it.
        """
        n = len(tokens)
        if n == 0:
            raise BackendError("decode called with no tokens")
        if len(self.tokens) + n > self.n_ctx:
            raise ContextFullError(
                f"context full: {len(self.tokens)} + {n} tokens exceed the context of {self.n_ctx}"
            )
        if isinstance(logits, str):
            rows = {"last": [n - 1], "all": list(range(n)), "none": []}[logits]
        else:
            rows = list(logits)
        last_start = (n - 1) // self.n_batch * self.n_batch
        if any(not (last_start <= r < n) for r in rows):
            # Logits of an earlier chunk would be overwritten by the next decode.
            raise BackendError(f"logits requested outside the last batch of {self.n_batch} tokens")
        wanted = set(rows)
        for start in range(0, n, self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._fill_batch(chunk, [start + i in wanted for i in range(len(chunk))])
            rc = ll.llama_decode(self._ctx, self._batch)
            if rc != 0:
                self._resync_after_failure()
                raise BackendError(f"llama_decode failed with code {rc}")
            self.tokens.extend(chunk)
        if not rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return self._logit_rows([r - last_start for r in rows])

    def _fill_batch(self, tokens: Sequence[int], want_logits: Sequence[bool]) -> None:
        b = self._batch
        base = len(self.tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = base + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = want_logits[i]
        b.n_tokens = len(tokens)

    def _logit_rows(self, batch_rows: Sequence[int]) -> np.ndarray:
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

    def truncate(self, n: int) -> None:
        """Roll the KV cache back so it holds exactly the first n tokens."""
        if n >= len(self.tokens):
            return
        if n < 0:
            raise BackendError(f"cannot truncate to {n} tokens")
        ok = ll.llama_memory_seq_rm(self._mem, 0, n, -1)
        pos_max = ll.llama_memory_seq_pos_max(self._mem, 0)
        if ok and pos_max == n - 1:
            del self.tokens[n:]
            return
        # Partial removal refused (recurrent/hybrid memory): rebuild from the prefix.
        keep = self.tokens[:n]
        self.reset()
        self.redecodes += 1
        if keep:
            self.decode(keep, logits="none")

    def reset(self) -> None:
        """Empty the KV cache."""
        ll.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest common prefix of the cache and ``tokens``; return its length.

        At least one token is left to decode, since the caller needs its logits.
        """
        n = 0
        limit = min(len(self.tokens), len(tokens) - 1)
        while n < limit and self.tokens[n] == tokens[n]:
            n += 1
        self.truncate(n)
        return n

    def close(self) -> None:
        """Free the context and the model (idempotent)."""
        if self._batch is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            ll.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            ll.llama_model_free(self._model)
            self._model = None

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


# --- RPC workers -------------------------------------------------------------
# llama.cpp spreads a model's layers over RPC workers (its ggml-rpc backend, what
# `rpc-server` and `--rpc` use). The functions are reached as llama.cpp's own tools
# reach them: the "RPC" backend registry of the ggml library llama_cpp loaded, and
# its proc addresses. A device of a worker goes into llama_model_params.devices for
# the target only; RPC devices are never registered globally, so a draft model
# loaded with devices=NULL stays on this machine.

RPC_UNAVAILABLE = "this llama.cpp was built without RPC; rebuild with scripts/bootstrap.sh"
RPC_DEFAULT_PORT = 50052
RPC_PROBE_TIMEOUT = 5.0  # seconds to connect to a worker and get its HELLO answer
_RPC_CMD_HELLO = 14  # ggml-rpc.cpp: "RPC_CMD_HELLO must be always 14"
_RPC_CONN_CAPS_SIZE = 24
_RPC_PROTO_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of ggml-rpc.h in llama-cpp-python 0.3.36
_GGML_DEV_CPU, _GGML_DEV_ACCEL = 0, 3

_ggml_lib = None
_rpc_endpoints: dict[str, list[int]] = {}  # endpoint -> its device pointers, once added
_abort_handler = None  # keeps the ctypes callback alive


def _ggml():
    """The ggml library llama_cpp loaded, with the registry functions declared."""
    global _ggml_lib
    if _ggml_lib is None:
        from llama_cpp._ggml import libggml as lib

        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, res, args in (
            ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_reg_dev_count", sz, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, sz]),
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_by_type", vp, [ctypes.c_int]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
            ("ggml_set_abort_callback", vp, [vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _ggml_lib = lib
    return _ggml_lib


def rpc_supported() -> bool:
    """True when this llama.cpp has the RPC backend (built with -DGGML_RPC=on)."""
    return bool(ll.llama_supports_rpc())


def _rpc_proc(name: str, restype, *argtypes):
    """A function of the RPC backend by its proc address (as llama.cpp's tools get it)."""
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if not reg:
        raise BackendError(RPC_UNAVAILABLE)
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if not addr:
        raise BackendError(f"{RPC_UNAVAILABLE} ({name} missing)")
    return ctypes.CFUNCTYPE(restype, *argtypes)(addr)


def parse_rpc_endpoints(text: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` (llama.cpp's --rpc) as a list of endpoints;
    ValueError with one line for a malformed one."""
    endpoints = []
    for part in text.split(","):
        part = part.strip()
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not HOST:PORT: {part!r} (--rpc takes HOST:PORT[,HOST:PORT...])")
        endpoints.append(f"{host}:{int(port)}")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"a worker is named twice in {text!r}")
    return endpoints


def probe_rpc_worker(endpoint: str, timeout: float = RPC_PROBE_TIMEOUT) -> tuple[int, int, int]:
    """Connect to a worker and say HELLO as ggml-rpc's client does; its protocol
    version. BackendError (one line) when it cannot be reached or does not answer.

    llama.cpp aborts the whole process on a worker it cannot connect to, so edgespec
    asks first. A worker serves one client at a time: one busy with another process
    accepts the connection but does not answer until that client leaves.
    """
    import socket
    import struct

    host, _, port = endpoint.rpartition(":")
    request = struct.pack("<BQ", _RPC_CMD_HELLO, _RPC_CONN_CAPS_SIZE) + bytes(_RPC_CONN_CAPS_SIZE)
    want = 4 + _RPC_CONN_CAPS_SIZE
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
            s.sendall(request)
            answer = b""
            while len(answer) < 8 + want:
                chunk = s.recv(8 + want - len(answer))
                if not chunk:
                    raise BackendError(
                        f"RPC worker {endpoint} closed the connection (not an edgespec or "
                        "llama.cpp RPC worker, or another protocol version?)"
                    )
                answer += chunk
    except TimeoutError:
        raise BackendError(
            f"RPC worker {endpoint} did not answer within {timeout:g} s "
            "(busy with another client, or not an RPC worker?)"
        ) from None
    except OSError as exc:
        raise BackendError(f"cannot reach RPC worker {endpoint}: {exc.strerror or exc}") from None
    (size,) = struct.unpack("<Q", answer[:8])
    major, minor, patch = answer[8], answer[9], answer[10]
    if size != want or major != _RPC_PROTO_MAJOR:
        raise BackendError(
            f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this llama.cpp "
            f"{_RPC_PROTO_MAJOR}.x: run the same llama.cpp build on both sides"
        )
    return major, minor, patch


def _install_rpc_abort_handler() -> None:
    """Turn ggml-rpc's abort on a lost worker into one line on stderr and exit status 1.

    ggml-rpc ends the process (GGML_ABORT) when a worker dies or answers nonsense;
    nothing can be unwound from there, so the message is made a clear one instead of
    an abort with a backtrace. Other aborts keep ggml's behaviour (message, abort).
    """
    global _abort_handler
    if _abort_handler is not None:
        return
    import sys

    @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
    def handler(message: bytes) -> None:
        text = " ".join((message or b"").decode("utf-8", "replace").split())
        text = re.sub(r"^\S+:\d+: ", "", text)  # ggml_abort's "file:line: "
        if re.search(r"RPC|Failed to connect", text):
            workers = ",".join(_unreachable(_rpc_endpoints) or _rpc_endpoints) or "?"
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            os.write(2, f"edgespec: error: lost an RPC worker ({workers}): {text}\n".encode())
            os._exit(1)
        os.write(2, f"{text}\n".encode())  # then ggml aborts, as without a handler

    _ggml().ggml_set_abort_callback(ctypes.cast(handler, ctypes.c_void_p))
    _abort_handler = handler


def _unreachable(endpoints: Sequence[str]) -> list[str]:
    """Those of the endpoints that refuse a connection now (a worker that died; a live
    one busy with this process still accepts, into its backlog)."""
    import socket

    dead = []
    for ep in endpoints:
        host, _, port = ep.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=0.5).close()
        except OSError:
            dead.append(ep)
    return dead


def rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The devices of these workers, in order (each worker is asked first: see
    ``probe_rpc_worker``). Added once per process, as llama.cpp keeps one connection
    per worker."""
    add_server = _rpc_proc("ggml_backend_rpc_add_server", ctypes.c_void_p, ctypes.c_char_p)
    lib = _ggml()
    devices: list[int] = []
    for ep in endpoints:
        if ep not in _rpc_endpoints:
            probe_rpc_worker(ep)
            _install_rpc_abort_handler()
            reg = add_server(ep.encode())
            n = lib.ggml_backend_reg_dev_count(reg) if reg else 0
            if n == 0:
                raise BackendError(f"RPC worker {ep} has no devices")
            _rpc_endpoints[ep] = [lib.ggml_backend_reg_dev_get(reg, i) for i in range(n)]
        devices.extend(_rpc_endpoints[ep])
    return devices


@dataclass(frozen=True)
class DeviceInfo:
    """A ggml device: its name, description and memory in bytes."""

    name: str
    description: str
    free: int
    total: int


def device_info(dev: int) -> DeviceInfo:
    """Name, description and memory of a ggml device (an RPC worker's is asked over
    the network)."""
    lib = _ggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    name = (lib.ggml_backend_dev_name(dev) or b"").decode()
    desc = (lib.ggml_backend_dev_description(dev) or b"").decode()
    return DeviceInfo(name, desc, free.value, total.value)


def worker_devices() -> list[int]:
    """What llama.cpp's rpc-server serves: the accelerators (GPUs) if any, else the CPU."""
    lib = _ggml()
    devs = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    gpus = [d for d in devs if lib.ggml_backend_dev_type(d) not in (_GGML_DEV_CPU, _GGML_DEV_ACCEL)]
    return gpus or [lib.ggml_backend_dev_by_type(_GGML_DEV_CPU)]


def _check_can_listen(host: str, port: int) -> None:
    """BackendError (one line) unless host:port can be bound, as ggml-rpc binds it
    (SO_REUSEADDR); asked first, since ggml-rpc only prints a line and returns."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise BackendError(
                f"the RPC worker cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def run_rpc_worker(
    host: str,
    port: int,
    *,
    n_threads: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_ready=None,
) -> None:
    """Serve llama.cpp's RPC protocol on host:port until interrupted (Ctrl+C), with
    edgespec's kernel settings (the environment set at the top of this module), one
    client at a time. BackendError (one line) when it cannot listen there.

    ``host`` must be a numeric IPv4 address (ggml-rpc binds with inet_addr); the
    caller decides which addresses are acceptable: the protocol has no
    authentication. ``on_ready(devices)`` is called with the DeviceInfo served,
    before listening.
    """
    import threading

    start = _rpc_proc(
        "ggml_backend_rpc_start_server",
        None,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_void_p),
    )
    devs = worker_devices()
    arr = (ctypes.c_void_p * len(devs))(*devs)
    threads = n_threads if n_threads and n_threads > 0 else default_threads()
    cache = str(cache_dir).encode() if cache_dir is not None else None
    endpoint = f"{host}:{port}"
    _check_can_listen(host, port)
    if on_ready is not None:
        on_ready([device_info(d) for d in devs])
    # ggml_backend_rpc_start_server never returns while it serves: run it on a thread
    # so that the main thread still sees Ctrl+C (and exits; the thread is a daemon).
    server = threading.Thread(
        target=start,
        args=(endpoint.encode(), cache, threads, len(devs), arr),
        name="edgespec-rpc-worker",
        daemon=True,
    )
    server.start()
    while server.is_alive():
        server.join(0.5)
    raise BackendError(
        f"the RPC worker could not listen on {endpoint} (port in use, or not an address "
        "of this machine?)"
    )


# --- grammars ----------------------------------------------------------------

# llama_token_data {int32 id; float logit; float p}: candidates the grammar sampler masks
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def _stderr_of(fn):
    """Run fn() with file descriptor 2 captured (llama.cpp's grammar parser reports its
    errors with fprintf(stderr)); return (fn's result, what it wrote)."""
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode("utf-8", "replace")


def _grammar_failure(stderr: str) -> str:
    """The telling line of a grammar parse failure."""
    for line in stderr.splitlines():
        if "error parsing grammar" in line:
            return line.split("error parsing grammar:", 1)[-1].strip()
    return _failure_reason("invalid grammar")


def compile_grammar(text: str, root: str, vocab: object | None = None) -> object:
    """A llama.cpp grammar sampler for GBNF ``text`` (no vocabulary: only to check it).

    Raises ValueError with llama.cpp's one-line reason when the grammar is refused."""
    if not text.strip():
        raise ValueError("the grammar is empty")
    _log_tail.clear()
    smpl, err = _stderr_of(
        lambda: ll.llama_sampler_init_grammar(vocab, text.encode(), root.encode())
    )
    if not smpl:
        raise ValueError(" ".join(_grammar_failure(err).split()))
    return smpl


def check_gbnf(text: str, root: str = "root") -> None:
    """Parse a GBNF grammar with llama.cpp's parser; ValueError (one line) if it is refused."""
    ll.llama_sampler_free(compile_grammar(text, root))


def json_schema_to_gbnf(schema_json: str) -> str:
    """llama-cpp-python's JSON-schema-to-GBNF converter (llama.cpp's json_schema_to_grammar)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf as convert

    return convert(schema_json)


class GrammarMatcher:
    """The state of a llama.cpp grammar over one model's vocabulary: which tokens may
    come next (``allowed``), advanced token by token (``accept``), cheap to ``clone``."""

    def __init__(self, smpl: object, n_vocab: int) -> None:
        self._smpl = smpl
        self.n_vocab = n_vocab
        self._all: np.ndarray | None = None  # the full-vocabulary candidate buffer

    def clone(self) -> GrammarMatcher:
        """An independent copy of the current state."""
        return GrammarMatcher(ll.llama_sampler_clone(self._smpl), self.n_vocab)

    def accept(self, token: int) -> None:
        """Advance past token, which ``allowed`` must have admitted (llama.cpp aborts
        otherwise)."""
        ll.llama_sampler_accept(self._smpl, token)

    def allowed(self, ids: np.ndarray | None = None) -> np.ndarray:
        """For each of ids (default: the whole vocabulary), whether it may come next."""
        if ids is None:
            if self._all is None:
                self._all = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
                self._all["id"] = np.arange(self.n_vocab)
            cand = self._all
            cand["logit"] = 0.0
        else:
            cand = np.zeros(len(ids), dtype=_TOKEN_DATA)
            cand["id"] = ids
        arr = ll.llama_token_data_array(
            data=cand.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)),
            size=len(cand),
            selected=-1,
            sorted=False,
        )
        ll.llama_sampler_apply(self._smpl, ctypes.byref(arr))
        return cand["logit"] == 0.0

    def close(self) -> None:
        """Free the llama.cpp sampler (idempotent)."""
        if self._smpl:
            ll.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
