"""Read a GGUF file's metadata (header and key/value pairs) without loading the model.

Used to refuse, with a clear message, a file that lacks what the engine needs
(:func:`check_usable`), and by ``edgespec models`` to run the draft/target
vocabulary rule on files that are present without loading their weights
(:class:`GgufVocab` gives :func:`edgespec.drafting.compat.incompatibility` what it reads
from a loaded model). Only little-endian GGUF v2/v3 is understood, as llama.cpp.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ModelLoadError
from ..files import check_regular_file

if TYPE_CHECKING:
    from ..backend import VocabInfo

__all__ = [
    "GgufMeta",
    "GgufVocab",
    "check_usable",
    "missing_keys",
    "read_metadata",
    "vocab_problem",
]

MAGIC = b"GGUF"
_SCALARS = {  # GGUF value type -> struct format
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
#: Arrays longer than this are not kept unless asked for (token lists, merges, scores).
_KEEP_ARRAY = 64
#: llama.cpp's vocabulary types by tokenizer.ggml.model (enum llama_vocab_type).
VOCAB_TYPES = {"no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "bert": 3, "t5": 4}
VOCAB_TYPES |= {"rwkv": 5, "plamo2": 6}


@dataclass
class GgufMeta:
    """Metadata of one GGUF file: ``kv`` holds scalars and short arrays; long arrays
    appear in ``array_lengths`` (and ``tokens`` holds the token texts if read)."""

    path: Path
    version: int
    tensor_count: int
    kv: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tokens: list[str] | None = None
    #: Raw bytes of the token texts of at most 6 bytes (where byte tokens like <0x0A> are).
    short_tokens: set[bytes] = field(default_factory=set)

    @property
    def architecture(self) -> str | None:
        """``general.architecture``, if present."""
        value = self.kv.get("general.architecture")
        return value if isinstance(value, str) else None

    def has(self, key: str) -> bool:
        """True if the file has metadata ``key`` (scalar or array)."""
        return key in self.kv or key in self.array_lengths


class _Reader:
    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise ModelLoadError(f"cannot load {self.path.name}: GGUF metadata is truncated")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.buf):
            raise ModelLoadError(f"cannot load {self.path.name}: GGUF metadata is truncated")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", "replace")

    def skip_strings(self, count: int, short: set[bytes] | None = None) -> None:
        """Skip ``count`` strings, adding those of at most 6 bytes to ``short`` if given."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise ModelLoadError(f"cannot load {self.path.name}: GGUF metadata is truncated")
            n = unpack(buf, pos)[0]
            if short is not None and n <= 6:
                short.add(bytes(buf[pos + 8 : pos + 8 + n]))
            pos += 8 + n
        if pos > end:
            raise ModelLoadError(f"cannot load {self.path.name}: GGUF metadata is truncated")
        self.pos = pos

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        raise ModelLoadError(f"cannot load {self.path.name}: bad GGUF value type {vtype}")


def read_metadata(path: str | Path, *, tokens: bool = False) -> GgufMeta:
    """Parse the header and all key/value pairs of ``path``.

    ``tokens=True`` also keeps ``tokenizer.ggml.tokens`` (a few hundred ms for a
    262k-token vocabulary). Raises ModelLoadError for a missing, non-GGUF,
    truncated or malformed file.
    """
    path = Path(path)
    check_regular_file(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                raise ModelLoadError(f"not a GGUF file: {path}")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(_Reader(buf, path), path, tokens)
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None


def _parse(r: _Reader, path: Path, want_tokens: bool) -> GgufMeta:
    r.pos = 4
    version = r.take("I")
    if version not in (2, 3):
        raise ModelLoadError(f"cannot load {path.name}: unsupported GGUF version {version}")
    tensor_count, kv_count = r.take("Q"), r.take("Q")
    if kv_count > 1_000_000:
        raise ModelLoadError(f"cannot load {path.name}: corrupt GGUF header")
    meta = GgufMeta(path=path, version=version, tensor_count=tensor_count)
    for _ in range(kv_count):
        key = r.string()
        vtype = r.take("I")
        if vtype != _ARRAY:
            meta.kv[key] = r.value(vtype)
            continue
        itype, count = r.take("I"), r.take("Q")
        keep = count <= _KEEP_ARRAY or (want_tokens and key == "tokenizer.ggml.tokens")
        if itype == _STRING:
            is_vocab = key == "tokenizer.ggml.tokens"
            if keep:
                items = [r.string() for _ in range(count)]
                if is_vocab:
                    meta.short_tokens = {t.encode() for t in items if len(t.encode()) <= 6}
            else:
                r.skip_strings(count, meta.short_tokens if is_vocab else None)
        elif itype in _SCALARS:
            width = struct.calcsize("<" + _SCALARS[itype])
            if keep:
                items = [r.take(_SCALARS[itype]) for _ in range(count)]
            else:
                r.pos += width * count
                if r.pos > len(r.buf):
                    raise ModelLoadError(f"cannot load {path.name}: GGUF metadata is truncated")
        else:
            raise ModelLoadError(f"cannot load {path.name}: unsupported GGUF array of {itype}")
        meta.array_lengths[key] = count
        if keep:
            if key == "tokenizer.ggml.tokens" and want_tokens:
                meta.tokens = items
            else:
                meta.kv[key] = items
    return meta


def missing_keys(meta: GgufMeta) -> list[str]:
    """The metadata keys llama.cpp and the engine need that ``meta`` lacks."""
    missing = [k for k in ("general.architecture", "tokenizer.ggml.model") if not meta.has(k)]
    arch = meta.architecture
    if arch:
        missing += [
            k
            for k in (f"{arch}.context_length", f"{arch}.embedding_length", f"{arch}.block_count")
            if not meta.has(k)
        ]
    if meta.kv.get("tokenizer.ggml.model") in ("none", "no_vocab") or not meta.array_lengths.get(
        "tokenizer.ggml.tokens"
    ):
        missing.append("tokenizer.ggml.tokens")
    return missing


def vocab_problem(meta: GgufMeta) -> str | None:
    """Why llama.cpp could not tokenize every text with ``meta``'s vocabulary, or None.

    A SentencePiece vocabulary (``llama``) spells a character it lacks as byte tokens
    ``<0xNN>`` (or the byte itself, for ASCII); llama.cpp aborts the process when one
    of those is missing, so every byte needs one.
    """
    if meta.kv.get("tokenizer.ggml.model") != "llama":
        return None
    have = meta.short_tokens
    missing = [
        b
        for b in range(256)
        # llama.cpp's fallback looks the byte up as a C string: NUL is the empty one
        if f"<0x{b:02X}>".encode() not in have
        and (b >= 0x80 or bytes([b]).strip(b"\0") not in have)
    ]
    if not missing:
        return None
    return (
        f"its SentencePiece vocabulary lacks byte tokens (<0x00>..<0xFF>: {len(missing)} of 256"
        f" missing, e.g. <0x{missing[0]:02X}>), so llama.cpp cannot tokenize text outside it"
    )


def check_usable(path: str | Path) -> GgufMeta:
    """Raise ModelLoadError naming what is missing if ``path`` cannot run in edgespec."""
    meta = read_metadata(path)
    missing = missing_keys(meta)
    if missing:
        why = " (no vocabulary: prompts cannot be tokenized)" if "tokenizer" in missing[-1] else ""
        raise ModelLoadError(
            f"{meta.path.name} lacks GGUF metadata the engine needs: {', '.join(missing)}{why}"
        )
    problem = vocab_problem(meta)
    if problem:
        raise ModelLoadError(f"cannot use {meta.path.name}: {problem}")
    return meta


# --------------------------------------------------------------------------- vocabulary


class GgufVocab:
    """A file's vocabulary as llama.cpp would load it, from metadata alone.

    Offers ``path``, ``vocab_info()`` and ``token_text(i)``: what
    :func:`edgespec.drafting.compat.incompatibility` reads from a loaded model. Defaults for
    absent keys follow llama.cpp's per-tokenizer defaults for the common types.
    """

    def __init__(self, path: str | Path) -> None:
        from ..backend import VocabInfo

        meta = read_metadata(path, tokens=True)
        self.path = meta.path
        self._tokens = meta.tokens or []
        kv = meta.kv
        model = str(kv.get("tokenizer.ggml.model", "none"))
        vtype = VOCAB_TYPES.get(model, -1)
        pre = str(kv.get("tokenizer.ggml.pre", ""))
        # llama.cpp's defaults when the keys are absent (llama-vocab.cpp, load()).
        bos, eos = {1: (1, 2), 2: (11, 11), 3: (101, -1), 4: (-1, 1)}.get(vtype, (-1, -1))
        add_bos = vtype in (1, 3) or (vtype == 2 and pre in ("llama3", "llama-v3", "llama-bpe"))
        add_eos = vtype == 4
        self._info = VocabInfo(
            vocab_type=vtype,
            n_vocab=len(self._tokens),
            add_bos=bool(kv.get("tokenizer.ggml.add_bos_token", add_bos)),
            bos=int(kv.get("tokenizer.ggml.bos_token_id", bos)),
            add_eos=bool(kv.get("tokenizer.ggml.add_eos_token", add_eos)),
            eos=int(kv.get("tokenizer.ggml.eos_token_id", eos)),
        )

    def vocab_info(self) -> VocabInfo:
        """Vocabulary facts used by the compatibility check."""
        return self._info

    def token_text(self, token: int) -> str:
        """The stored text of a token, as in the GGUF."""
        return self._tokens[token]
