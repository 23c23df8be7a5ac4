"""llguidance over a llama.cpp vocabulary: the token mask of a grammar, state by state.

The tokenizer llguidance needs (every token's bytes, the model's own tokenize
function for the text a grammar forces) is built once per vocabulary and kept for
the process; the bytes are also cached on disk, keyed by the model file, so a later
process skips the walk over the vocabulary (``tokenizer_for``).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import threading
from pathlib import Path

import llguidance
import numpy as np

from .bindings import ll

#: a control token's bytes are marked so, as llguidance's own llama.cpp helper does:
#: a grammar then admits it only where it names it (``<|end|>``)
_SPECIAL = b"\xff"
_lock = threading.Lock()
_tokenizers: dict[str, tuple[llguidance.LLTokenizer, int, np.ndarray]] = {}
_vocab_models: list[object] = []  # the vocabulary-only loads the tokenizers call into


class GrammarMatcher:
    """A grammar's state over one vocabulary: the tokens that may come next (``bits``,
    llguidance's bitmask, computed once per state; read as a whole with ``mask``, or a
    token at a time with ``admits``), advanced token by token (``accept``), cheap to
    ``clone``.

    The mask is the definition of what may come next. Where the grammar forces no text,
    llguidance builds it from the tokens whose bytes the grammar can take next (its
    ``compute_bias`` over an empty prefix), the very test ``validate_tokens`` makes of one
    token, so ``admits`` asks that of an ordinary token without building the mask (about
    a microsecond against 0.05-0.7 ms). Where text is forced the mask holds
    the tokenizer's first token of it alone, which ``validate_tokens`` does not know (it
    also admits other splits of the text), and ends of generation and control tokens
    are admitted by rules of their own: there the mask is read."""

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        n_vocab: int,
        tok: llguidance.LLTokenizer,
        special: np.ndarray,
    ) -> None:
        self._m = matcher
        self._tok = tok
        self._special = special  # tokens the mask alone can judge (control, ends)
        self.n_vocab = n_vocab
        self._words: np.ndarray | None = None  # the mask's bits, once computed
        self._mask: np.ndarray | None = None  # the mask unpacked, once asked for
        self._forced: bool | None = None  # whether text is forced here, once asked

    def clone(self) -> GrammarMatcher:
        """An independent copy of the current state."""
        out = GrammarMatcher(self._m.deep_copy(), self.n_vocab, self._tok, self._special)
        out._words, out._mask, out._forced = self._words, self._mask, self._forced
        return out

    def accept(self, token: int) -> None:
        """Advance past token, which ``mask`` must have admitted (ValueError otherwise)."""
        if not self._m.consume_token(token):
            raise ValueError(f"the grammar does not admit token {token}: {self._m.get_error()}")
        self._words = self._mask = self._forced = None

    def bits(self) -> np.ndarray:
        """The mask as llguidance's bitmask: bit t % 32 of word t // 32 (read-only)."""
        if self._words is None:
            words = np.empty((self.n_vocab + 31) // 32, dtype=np.int32)
            self._m.unsafe_compute_mask_ptr(words.ctypes.data, words.nbytes)
            if self.n_vocab % 32:  # no bits past the vocabulary
                words[-1] &= np.int32((1 << (self.n_vocab % 32)) - 1)
            words.flags.writeable = False
            self._words = words
        return self._words

    def mask(self) -> np.ndarray:
        """For each token of the vocabulary, whether it may come next (read-only)."""
        if self._mask is None:
            bits = np.unpackbits(self.bits().view(np.uint8), bitorder="little")
            self._mask = bits[: self.n_vocab].view(bool)
            self._mask.flags.writeable = False
        return self._mask

    def allowed(self, ids: np.ndarray | None = None) -> np.ndarray:
        """For each of ids (default: the whole vocabulary), whether it may come next."""
        if ids is None:
            return self.mask()
        ids = np.asarray(ids, dtype=np.int64)
        words = self.bits()
        inside = (ids >= 0) & (ids < self.n_vocab)
        at = np.where(inside, ids, 0)
        return inside & ((words[at >> 5] >> (at & 31)) & 1).astype(bool)

    def admits(self, token: int) -> bool:
        """Whether token may come next: its bit of the mask, or, where the mask is not
        built and no text is forced, whether the grammar takes its bytes (the same)."""
        if not 0 <= token < self.n_vocab:
            return False
        if self._words is None and not self._special[token] and not self._forces_text():
            return self._m.validate_tokens([token]) == 1
        return bool((int(self.bits()[token >> 5]) >> (token & 31)) & 1)

    def several(self) -> bool:
        """Whether the grammar surely admits more than one token here, told without the
        mask (False: it may admit one; the mask says). True where the mask is not built,
        no text is forced and the grammar cannot end: two or more bytes may then come
        next, each a token of its own in a vocabulary with a token for every byte (all
        llama.cpp's byte-level and byte-fallback ones). Where a vocabulary lacks some
        byte this may say True of a state that admits a single token; callers treat such
        a state as an ordinary one (its row's logits computed), which costs time only."""
        return self._words is None and not self._forces_text() and not self._m.is_accepting()

    def may_end(self) -> bool:
        """Whether an end of generation may come next (the grammar is satisfied here)."""
        return bool(self._m.is_accepting())

    def _forces_text(self) -> bool:
        if self._forced is None:
            self._forced = bool(self._m.compute_ff_bytes())
        return self._forced

    @property
    def has_bits(self) -> bool:
        """Whether this state's mask is computed already."""
        return self._words is not None

    def use_bits(self, words: np.ndarray) -> None:
        """Take this state's mask as computed elsewhere (``bits`` of an equal state)."""
        self._words, self._mask = words, None

    def allowed_ids(self) -> np.ndarray:
        """The ids the grammar admits next, ascending (read from the bitmask's nonzero
        words only: cheap where few are admitted)."""
        words = self.bits()
        nz = np.flatnonzero(words)
        bits = np.unpackbits(words[nz].view(np.uint8).reshape(-1, 4), axis=1, bitorder="little")
        return ((nz[:, None] << 5) + np.arange(32))[bits.astype(bool)]

    def n_words(self) -> int:
        """How many of the bitmask's 32-token words admit some token (a sparsity gauge)."""
        return int(np.count_nonzero(self.bits()))

    def only(self) -> int | None:
        """The one token the grammar admits next, or None (none, or several). Where
        text is forced and the mask is not built, the text's first token as the
        tokenizer splits it: llguidance's mask there holds that token alone."""
        if self._words is None and self._forces_text():
            forced = self._m.compute_ff_tokens()
            if forced:
                return int(forced[0])
        words = self.bits()
        nz = np.flatnonzero(words)
        if len(nz) != 1:
            return None
        w = int(words[nz[0]]) & 0xFFFFFFFF
        if w & (w - 1):
            return None
        return int(nz[0]) * 32 + w.bit_length() - 1

    def forced_tokens(self) -> list[int]:
        """The tokens of the text the grammar forces next, as the tokenizer would split
        it (llguidance leaves out a last token that longer text could still merge into)."""
        return list(self._m.compute_ff_tokens())

    def forced_text_tokens(self) -> list[int]:
        """All the text the grammar forces next, tokenized: ``forced_tokens`` and the
        last token it leaves out (``' "'`` before a string value, which the value's first
        characters may merge into: a guess for a draft, which the target verifies)."""
        forced = self._m.compute_ff_bytes()
        return list(self._tok.tokenize_bytes(forced)) if forced else []

    def close(self) -> None:
        """Release the matcher (idempotent)."""
        self._m = None  # type: ignore[assignment]

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def grammar_error(spec: str) -> str | None:
    """Why llguidance refuses a grammar spec without a vocabulary (None: it is valid)."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(spec)
    return (messages[0] if messages else "rejected") if is_error else None


def matcher_for(path: Path, spec: str) -> GrammarMatcher:
    """A grammar's start state over a model file's vocabulary (ValueError, one line,
    if refused)."""
    tok, n_vocab, special = _tokenizer_entry(path)
    m = llguidance.LLMatcher(tok, spec, log_level=0)
    if m.is_error():
        raise ValueError(" ".join(m.get_error().split())[:300])
    return GrammarMatcher(m, n_vocab, tok, special)


def tokenizer_for(path: Path) -> tuple[llguidance.LLTokenizer, int]:
    """llguidance's tokenizer for a model file's vocabulary, and its size: built once per
    process from token bytes cached on disk after the first build. Every
    end-of-generation token ends a grammar's text.

    The tokenizer calls llama.cpp's tokenize on a vocabulary for the text a grammar
    forces, so it holds a vocabulary-only load of the file of its own, kept for the
    process: a model closed and loaded again leaves it nothing dangling."""
    tok, n_vocab, _ = _tokenizer_entry(path)
    return tok, n_vocab


def _tokenizer_entry(path: Path) -> tuple[llguidance.LLTokenizer, int, np.ndarray]:
    """``tokenizer_for``'s tokenizer and size, and which tokens are control tokens or
    ends of generation (whose admission only the mask tells)."""
    stat = path.stat()
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    with _lock:
        entry = _tokenizers.get(key)
        if entry is None:
            vocab = _vocab_only(path)
            tokens, eog = _cached_vocab(vocab, key)
            fptr = ctypes.cast(ll.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
            tok = llguidance.LLTokenizer.from_llamacpp(
                tokens=tokens, vocab_ptr=vocab, tokenize_fptr=fptr, eos_token=eog, slices=None
            )
            n_vocab = ll.llama_vocab_n_tokens(vocab)
            special = np.zeros(n_vocab, dtype=bool)
            special[[i for i, t in enumerate(tokens[:n_vocab]) if t[:1] == _SPECIAL]] = True
            special[[t for t in eog if 0 <= t < n_vocab]] = True
            entry = _tokenizers[key] = (tok, n_vocab, special)
        return entry


def _vocab_only(path: Path) -> object:
    """The vocabulary of a vocabulary-only load of path, never freed (one per file)."""
    params = ll.llama_model_default_params()
    params.vocab_only = True
    model = ll.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ValueError(f"cannot read the vocabulary of {path.name}")
    _vocab_models.append(model)
    return ll.llama_model_get_vocab(model)


def _cached_vocab(vocab: object, key: str) -> tuple[list[bytes], list[int]]:
    path = _cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.tokens"
    with contextlib.suppress(OSError, ValueError):
        return _read_vocab(path)
    tokens, eog = _vocab_table(vocab)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(_pack(tokens, eog))
        tmp.replace(path)  # atomic: a reader sees a whole file or none
    return tokens, eog


def _vocab_table(vocab: object) -> tuple[list[bytes], list[int]]:
    """Every token's bytes (control tokens marked, as llguidance's llama.cpp helper
    does), and the end-of-generation tokens."""
    n = ll.llama_vocab_n_tokens(vocab)
    size = 16 * 1024
    buf = ctypes.create_string_buffer(size + 1)
    control, user = ll.LLAMA_TOKEN_ATTR_CONTROL, ll.LLAMA_TOKEN_ATTR_USER_DEFINED
    out, eog = [], []
    for token in range(n):
        k = ll.llama_token_to_piece(vocab, token, buf, size, 0, True)
        if k < 0:
            raise ValueError(f"token {token} is longer than {size} bytes")
        text = buf.raw[:k]
        attr = ll.llama_vocab_get_attr(vocab, token)
        if attr & control or (attr & user and text.startswith(b"<") and text.endswith(b">")):
            text = _SPECIAL + text
        out.append(text)
        if attr & control and ll.llama_vocab_is_eog(vocab, token):
            eog.append(token)
    for token in (ll.llama_vocab_eos(vocab), ll.llama_vocab_eot(vocab)):
        if token >= 0 and token not in eog:
            eog.append(token)
    return out, eog


_MAGIC = b"EDGESPEC-VOCAB-1"


def _pack(tokens: list[bytes], eog: list[int]) -> bytes:
    head = np.array([len(tokens), len(eog)], dtype=np.uint32)
    lengths = np.array([len(t) for t in tokens], dtype=np.uint32)
    ids = np.array(eog, dtype=np.uint32)
    return _MAGIC + head.tobytes() + ids.tobytes() + lengths.tobytes() + b"".join(tokens)


def _read_vocab(path: Path) -> tuple[list[bytes], list[int]]:
    data = path.read_bytes()
    if not data.startswith(_MAGIC):
        raise ValueError("not a vocabulary cache")
    at = len(_MAGIC)
    n, n_eog = (int(x) for x in np.frombuffer(data, dtype=np.uint32, count=2, offset=at))
    eog = np.frombuffer(data, dtype=np.uint32, count=n_eog, offset=at + 8).tolist()
    at += 8 + 4 * n_eog
    lengths = np.frombuffer(data, dtype=np.uint32, count=n, offset=at)
    ends = np.cumsum(lengths, dtype=np.int64) + at + 4 * n
    if n == 0 or ends[-1] != len(data):
        raise ValueError("a truncated vocabulary cache")
    starts = ends - lengths
    return [data[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)], eog


def _cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(os.environ.get("EDGESPEC_CACHE_DIR") or user_cache_dir("edgespec")) / "tokenizers"
