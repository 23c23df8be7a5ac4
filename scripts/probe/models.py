"""Class 1: broken model files (truncations, byte flips, bad headers, odd paths)."""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path
from typing import NamedTuple

from .common import ClassStats, edgespec_cmd, head, run


class Case(NamedTuple):
    label: str
    path: str
    stdin: bytes | None = None  # fed to the command (the path reads it)
    prompt: str = "hi"


def gguf_data_offset(path: Path) -> int:
    import gguf

    return int(gguf.GGUFReader(str(path)).data_offset)


def broken_models(tmp: Path, target: Path, maker) -> list[Case]:
    """One case for each broken model input, written under tmp/broken."""
    d = tmp / "broken"
    d.mkdir()
    good = target.read_bytes()
    size = len(good)
    data_off = gguf_data_offset(target)
    out: list[Case] = []

    def put(label: str, data: bytes) -> None:
        p = d / f"{len(out):03d}.gguf"
        p.write_bytes(data)
        out.append(Case(label, str(p)))

    def patched(off: int, fmt: str, value: int) -> bytes:
        packed = struct.pack(fmt, value)
        return good[:off] + packed + good[off + len(packed) :]

    def flipped(pos: int) -> bytes:
        b = bytearray(good)
        b[pos] ^= 0xFF
        return bytes(b)

    cuts = [1, 3, 4, 7, 8, 12, 16, 23, 24, 31, 40, 64, 200, 1000]
    cuts += [int(data_off * f) for f in (0.25, 0.5, 0.75, 0.9, 0.97)]
    cuts += [data_off - 1, data_off, data_off + 1, data_off + 100]
    cuts += [data_off + (size - data_off) // 2, size - 4096, size - 1]
    for c in sorted(set(cuts)):
        put(f"truncated at {c}/{size}", good[:c])
    rng = random.Random(16)
    for n, lo, hi, where in (
        (14, 4, data_off, "header/metadata"),
        (2, data_off, size, "tensor data"),
    ):
        for _ in range(n):
            pos = rng.randrange(lo, hi)
            put(f"byte flip at {pos} ({where})", flipped(pos))
    put("wrong magic GGUX", b"GGUX" + good[4:])
    put("wrong magic GGML", b"lmgg" + good[4:])
    for v in (0, 1, 2, 4, 0xFFFFFFFF):
        put(f"version {v}", patched(4, "<I", v))
    for name, off in (("n_tensors", 8), ("n_kv", 16)):
        for v in (0, 10**6, 2**62, 2**64 - 1):
            put(f"{name}={v}", patched(off, "<Q", v))
    put("first key length 2^62", patched(24, "<Q", 2**62))
    put("first key length 0", patched(24, "<Q", 0))
    put("text file", b"hello, this is not a model\n")
    put("all zeros", bytes(size))
    put("random bytes", rng.randbytes(size))
    put("GGUF header only", good[:24])
    put("empty file", b"")
    nob = str(maker.write_without_byte_tokens(d / "no_byte_tokens.gguf"))
    out.append(Case("SPM vocab without byte tokens (prompt hi)", nob))
    out.append(Case("SPM vocab without byte tokens (prompt 語)", nob, prompt="語"))
    (d / "a_directory.gguf").mkdir()
    out.append(Case("a directory", str(d / "a_directory.gguf")))
    os.mkfifo(d / "fifo.gguf")
    out.append(Case("a FIFO without writer", str(d / "fifo.gguf")))
    for dev in ("/proc/self/mem", "/dev/null", "/dev/zero"):
        out.append(Case(dev, dev))
    out.append(Case("/dev/stdin pipe (open, no data)", "/dev/stdin", b""))
    out.append(Case("/dev/fd/0 pipe with garbage", "/dev/fd/0", b"GGUF" + b"\0" * 64))
    os.symlink(d / "loop_b.gguf", d / "loop_a.gguf")
    os.symlink(d / "loop_a.gguf", d / "loop_b.gguf")
    out.append(Case("symlink loop", str(d / "loop_a.gguf")))
    os.symlink(d / "nowhere.gguf", d / "dangling.gguf")
    out.append(Case("dangling symlink", str(d / "dangling.gguf")))
    out.append(Case("nonexistent path", str(d / "does_not_exist.gguf")))
    unread = d / "unreadable.gguf"
    unread.write_bytes(good)
    unread.chmod(0)
    out.append(Case("mode 000 file (root may read it)", str(unread)))
    out.append(Case("path with NUL? (newline in name)", str(d / "new\nline.gguf")))
    return out


def generate_cmd(path: str, prompt: str = "hi") -> list[str]:
    cmd = edgespec_cmd() + ["generate", "--target", path, "--prompt", prompt]
    return cmd + ["--max-tokens", "4", "--threads", "1"]


def probe_models(tmp: Path, env: dict[str, str], target: Path, maker) -> ClassStats:
    st = ClassStats("1 model files")
    out = run(generate_cmd(str(target)), env)
    if out.kind != "ok":
        print(f"baseline generate on the good model is not ok: {out.kind}: {head(out.stderr)}")
    for case in broken_models(tmp, target, maker):
        out = run(generate_cmd(case.path, case.prompt), env, input=case.stdin)
        st.add(case.label, out, note_kinds=("ok", "multiline"))
    # the same broken files as a model directory: edgespec models lists local files
    mdir = tmp / "models_broken"
    shutil.copytree(tmp / "broken", mdir, symlinks=True, ignore=lambda *_: ["fifo.gguf"])
    os.mkfifo(mdir / "fifo.gguf")
    out = run(edgespec_cmd() + ["models"], dict(env, EDGESPEC_MODELS_DIR=str(mdir)))
    st.add("edgespec models over a directory of broken files", out)
    if out.kind == "multiline":
        st.notes.append(("edgespec models over broken dir", out.kind, head(out.stderr)))
    return st
