"""Models pulled by Hub name, as they lie in the store: listing and removing them.

``installed_hf_models`` scans ``<model dir>/hf/OWNER/REPO`` (no hashing) for what
``edgespec models`` shows; ``find_installed`` applies a spec's rule
(edgespec.modelstore.hfspec) to the local files, as ``edgespec rm`` names a model;
``remove_files`` removes a model's files under the store's locks.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import EdgespecError, ModelFetchError
from . import store
from .fields import valid_repo_id
from .hfspec import (
    _SPLIT,
    HF_PREFIX,
    STORE_FOLDER,
    AmbiguousSpec,
    HfFile,
    HfSpec,
    _is_model,
    _prune,
    _split_info,
    repo_dir,
    select,
)
from .store import Progress, models_dir

__all__ = [
    "InstalledHfModel",
    "find_installed",
    "installed_hf_models",
    "model_files",
    "remove_files",
]


@dataclass(frozen=True)
class InstalledHfModel:
    """A model pulled by Hub name: its files (parts, sidecars, partials) in the store."""

    name: str  # hf:OWNER/REPO/FILE.gguf (the first part)
    repo: str
    file: str  # path in the repo of the first part
    parts: tuple[Path, ...]  # the complete parts present
    count: int  # parts the model has
    partial_bytes: int
    state: str  # verified, unverified, incomplete (parts missing), partial (only a partial)

    @property
    def present(self) -> bool:
        """Whether the whole file is there (verified or not)."""
        return self.state in ("verified", "unverified")

    @property
    def path(self) -> Path:
        """The file (its first part, for a split GGUF)."""
        return self.parts[0] if self.parts else Path()

    @property
    def size_on_disk(self) -> int:
        """Bytes its parts take on disk (parts that vanished count 0)."""
        total = 0
        for p in self.parts:
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total


_PARTIAL = re.compile(r"^\.(.+\.gguf)\.[0-9A-Za-z]+\.partial$")


def installed_hf_models(directory: Path | None = None) -> list[InstalledHfModel]:
    """Every model under ``<model dir>/hf/OWNER/REPO``, by name (a quick scan, no hashing)."""
    base = Path(directory if directory is not None else models_dir()) / STORE_FOLDER
    out: list[InstalledHfModel] = []
    for owner in _subdirs(base):
        for name in _subdirs(owner):
            repo = f"{owner.name}/{name.name}"
            if valid_repo_id(repo):
                out += _models_of(repo, name)
    return sorted(out, key=lambda m: m.name)


def _subdirs(folder: Path) -> list[Path]:
    try:
        return sorted(
            p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir()
            and not p.is_symlink()
        )  # fmt: skip
    except OSError:
        return []


def _models_of(repo: str, root: Path) -> list[InstalledHfModel]:
    groups: dict[tuple[str, int], dict[str, object]] = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = Path(folder).relative_to(root).parts
        for fname in names:
            partial = _PARTIAL.match(fname)
            target = partial.group(1) if partial else fname
            if not _is_model(target) or (fname.startswith(".") and not partial):
                continue
            repo_path = "/".join([*rel, target])
            prefix, index, count = _split_info(repo_path)
            g = groups.setdefault((prefix, count), {"parts": {}, "partial": 0})
            full = Path(folder) / fname
            if partial:
                with contextlib.suppress(OSError):
                    g["partial"] = int(g["partial"]) + full.stat().st_size  # type: ignore[call-overload]
            else:
                g["parts"][index] = full  # type: ignore[index]
    out = []
    for (prefix, count), g in groups.items():
        parts: dict[int, Path] = g["parts"]  # type: ignore[assignment]
        first = prefix + (f"-00001-of-{count:05d}" if count > 1 else "") + ".gguf"
        if count > 1 and 1 in parts:
            first = "/".join([*parts[1].relative_to(root).parts])
        ordered = tuple(parts[i] for i in sorted(parts))
        if not ordered:
            state = "partial"
        elif len(ordered) < count:
            state = "incomplete"
        elif all(store.file_state(p, None, "") == "verified" for p in ordered):
            state = "verified"
        else:
            state = "unverified"
        out.append(
            InstalledHfModel(
                name=f"{HF_PREFIX}{repo}/{first}", repo=repo, file=first, parts=ordered,
                count=count, partial_bytes=int(g["partial"]), state=state,  # type: ignore[call-overload]
            )
        )  # fmt: skip
    return out


def find_installed(spec: HfSpec, directory: Path | None = None) -> InstalledHfModel | None:
    """The installed model ``spec`` names (the same rule as pulling, on the local files)."""
    models = [m for m in installed_hf_models(directory) if m.repo == spec.repo]
    if not models:
        return None
    files = [HfFile(path) for m in models for path in _part_names(m.file)]
    try:
        chosen = select(files, spec)[0]
    except AmbiguousSpec:
        raise
    except ModelFetchError:
        return None
    return next(m for m in models if m.file == chosen.path)


def _part_names(first: str) -> list[str]:
    """The paths of every part of the model whose first part is ``first``."""
    prefix, _, count = _split_info(first)
    if count == 1:
        return [first]
    m = _SPLIT.match(first[: -len(".gguf")])
    of = first[len(prefix) + 6 : len(prefix) + 10] if m else "-of-"  # keep the file's case
    return [f"{prefix}-{i:05d}{of}{count:05d}.gguf" for i in range(1, count + 1)]


def model_files(model: InstalledHfModel, directory: Path | None = None) -> list[Path]:
    """Every file of ``model`` in the store: parts, their sidecars, partials and lock files."""
    root = repo_dir(model.repo, directory)
    out = []
    for repo_path in _part_names(model.file):
        dest = root.joinpath(*repo_path.split("/"))
        out += [dest, store.marker_path(dest)]
        out += sorted(dest.parent.glob(f".{dest.name}.*.partial"))
    return out


def remove_files(
    paths: Iterable[Path], root: Path, lock_names: Iterable[Path], say: Progress = store.quiet
) -> tuple[int, int]:
    """Remove ``paths`` (those that exist) under the store locks of ``lock_names``.

    Every path must lie inside ``root`` (after resolving symlinked folders); a path that
    does not is refused before anything is removed. Returns (files removed, bytes freed).
    Empty folders left under ``root/hf`` are removed too.
    """
    real_root = root.resolve()
    paths = list(paths)
    for p in paths:
        if not p.parent.resolve().is_relative_to(real_root):
            raise EdgespecError(f"refusing to remove {p}: it is outside the model directory {root}")
    removed = freed = 0
    with contextlib.ExitStack() as stack:
        for dest in lock_names:
            if not dest.parent.is_dir():
                continue
            stack.enter_context(store.locked(dest.with_name(f".lock-{dest.name}"), say))
        for p in paths:
            try:
                size = p.lstat().st_size
                p.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise EdgespecError(f"cannot remove {p}: {exc.strerror or exc}") from None
            removed += 1
            freed += size
    hf_root = real_root / STORE_FOLDER
    for p in paths:
        if p.parent.resolve().is_relative_to(hf_root):
            _prune(p.parent.resolve(), real_root)
    return removed, freed
