"""Trim llama-cpp-python's source package to what a CUDA build of it reads.

The sdist of llama-cpp-python 0.3.36 is 77 MB compressed (217 MB unpacked), over
the device machine's 64 MiB limit on what travels. Most of it is llama.cpp's
vocabulary models, docs, web UI, tests and the sources of backends other than
CPU and CUDA; a build with ``LLAVA_BUILD=off`` and llama.cpp's tests, tools and
examples off reads none of them. This writes the rest as one ``.tar.gz``::

    python benchmarks/device/trim_sdist.py llama_cpp_python-0.3.36.tar.gz OUT.tar.gz

(the source may also be an unpacked sdist folder). The archive's top folder is the
sdist's own (``llama_cpp_python-0.3.36/``), with its ``PKG-INFO``, so pip builds it
as it would the original.
"""

from __future__ import annotations

import fnmatch
import io
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

LLAMA = "vendor/llama.cpp"
#: ggml backends a CUDA build compiles (RPC kept: scripts/bootstrap.sh builds it too).
KEEP_BACKENDS = {"ggml-cpu", "ggml-cuda", "ggml-rpc", "ggml-blas"}
#: Paths (relative to the sdist's top folder; fnmatch patterns) the build never reads.
DROP = (
    ".git",  # the sdist carries llama.cpp's git history (39 MB); build info falls back
    f"{LLAMA}/.git",
    "docs",
    "docker",
    "examples",
    "tests",
    "media",
    ".github",
    f"{LLAMA}/models",
    f"{LLAMA}/docs",
    f"{LLAMA}/media",
    f"{LLAMA}/.github",
    f"{LLAMA}/benches",
    f"{LLAMA}/tests",
    f"{LLAMA}/examples",
    f"{LLAMA}/pocs",
    f"{LLAMA}/tools",  # only tools/mtmd, built when LLAVA_BUILD=on
    f"{LLAMA}/app",
    f"{LLAMA}/gguf-py",
    f"{LLAMA}/conversion",
    f"{LLAMA}/scripts",
    f"{LLAMA}/skills",
    f"{LLAMA}/ci",
    f"{LLAMA}/grammars",
    f"{LLAMA}/requirements",
    f"{LLAMA}/convert_*.py",
)


def dropped(rel: str) -> bool:
    """Whether the sdist path ``rel`` (posix, relative to its top folder) is left out."""
    parts = PurePosixPath(rel).parts
    for n in range(1, len(parts) + 1):
        prefix = "/".join(parts[:n])
        if any(fnmatch.fnmatchcase(prefix, pattern) for pattern in DROP):
            return True
    backends = f"{LLAMA}/ggml/src/".split("/")[:-1]
    if len(parts) > len(backends) and list(parts[: len(backends)]) == backends:
        name = parts[len(backends)]
        if name.startswith("ggml-") and name not in KEEP_BACKENDS and "." not in name:
            return True  # another backend's folder (its files ggml-*.c/.cpp stay)
    return False


def _members(source: Path) -> Iterable[tuple[str, bytes | None, int]]:
    """(relative path, contents or None for a folder, mode) of every entry in ``source``."""
    if source.is_dir():
        for path in sorted(source.rglob("*")):
            rel = path.relative_to(source).as_posix()
            if path.is_symlink():
                continue
            if path.is_dir():
                yield rel, None, 0o755
            else:
                yield rel, path.read_bytes(), path.stat().st_mode & 0o777
        return
    with tarfile.open(source) as tar:
        for info in tar:
            rel = "/".join(PurePosixPath(info.name).parts[1:])  # without the top folder
            if not rel or not (info.isfile() or info.isdir()):
                continue
            f = tar.extractfile(info) if info.isfile() else None
            yield rel, (f.read() if f else None), info.mode & 0o777


def top_folder(source: Path) -> str:
    """The sdist's top folder name, e.g. ``llama_cpp_python-0.3.36``."""
    if source.is_dir():
        return source.name
    with tarfile.open(source) as tar:
        first = tar.next()
        assert first is not None, f"{source} is empty"
        return PurePosixPath(first.name).parts[0]


def trim(source: Path, out: Path) -> dict[str, int]:
    """Write ``out`` (.tar.gz) with the kept entries of ``source``; return counts and bytes.

    Returns ``{"kept_files", "dropped_files", "kept_bytes", "dropped_bytes",
    "archive_bytes"}`` (file bytes uncompressed, the archive's as written).
    """
    stats = dict.fromkeys(("kept_files", "dropped_files", "kept_bytes", "dropped_bytes"), 0)
    top = top_folder(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        for rel, data, mode in _members(source):
            if dropped(rel):
                if data is not None:
                    stats["dropped_files"] += 1
                    stats["dropped_bytes"] += len(data)
                continue
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            stats["kept_files"] += 1
            stats["kept_bytes"] += len(data)
    stats["archive_bytes"] = out.stat().st_size
    return stats


def main(argv: list[str]) -> int:
    """``trim_sdist.py SOURCE OUT.tar.gz``: print the counts as ``key=value`` lines."""
    if len(argv) != 3:
        print(f"usage: {argv[0]} SDIST(.tar.gz or folder) OUT.tar.gz", file=sys.stderr)
        return 2
    for key, value in trim(Path(argv[1]), Path(argv[2])).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
