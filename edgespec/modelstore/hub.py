"""The Hugging Face Hub source: one file of a model repository, resumable.

Hub access goes through ``huggingface_hub``'s public API: :func:`get_hf_file_metadata`
for the HEAD of the ``/resolve/`` URL (redirects, ETag, ``X-Linked-Size``,
``X-Repo-Commit``, and its errors for gated, private or missing repos), and
:func:`get_session` (its configured ``httpx2.Client``) for the transfer, which this
module does itself: ``Range`` requests, resuming within a run after a dropped
connection, a progress bar. So ``HF_ENDPOINT`` (read at call time), ``HF_TOKEN`` /
the saved login, ``HF_HUB_OFFLINE`` and ``HF_HUB_DOWNLOAD_TIMEOUT`` apply as they do
for ``hf_hub_download``.

Why not ``hf_hub_download`` itself: since huggingface_hub 1.x it downloads into a
process-unique temporary file and deletes it on any failure, so a download
interrupted by Ctrl-C or a lost connection starts again from zero, and it keeps
its own cache (``~/.cache/huggingface``), which would hold a second copy of every
model. Here the bytes go to ``<model dir>/.<file>.<etag>.partial``; a later run
finds it and asks only for the rest (``Range: bytes=N-``). The partial's name is
hidden and keyed by the Hub's ETag, so it never looks complete and is never
resumed against a different version of the file.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import ModelFetchError
from . import store
from .catalog import HubSource
from .store import BarFactory, Progress

__all__ = [
    "DEFAULT_ENDPOINT",
    "endpoint",
    "explain_error",
    "fetch_hub",
    "is_offline",
    "partial_path",
    "quiet_hub",
]

DEFAULT_ENDPOINT = "https://huggingface.co"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TRUE = {"1", "on", "yes", "true"}
#: Bytes asked of the connection at a time while downloading.
CHUNK_SIZE = 1 << 20
#: Attempts in a row that may end without a new byte before the transfer gives up.
RETRIES = 5
#: Seconds between attempts.
RETRY_WAIT = 1.0


def endpoint() -> str:
    """The Hub endpoint: ``$HF_ENDPOINT`` (read now, not at import) or huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set (now, or when huggingface_hub was imported)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return True
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def partial_path(dest: Path, etag: str) -> Path:
    """Where an unfinished download of ``dest`` at version ``etag`` is kept."""
    tag = re.sub(r"[^0-9A-Za-z]", "", etag)[:16] or "noetag"
    return dest.with_name(f".{dest.name}.{tag}.partial")


def fetch_hub(
    source: HubSource,
    dest: Path,
    *,
    size: int | None,
    sha256: str,
    say: Progress = store.quiet,
    bar: BarFactory | None = None,
) -> tuple[Path, str]:
    """Download ``source`` into a hidden partial file beside ``dest``, resuming one if present.

    Returns (the complete partial file, its sha256). Checks the Hub's size and
    ETag against the catalog's ``size``/``sha256`` before transferring anything,
    and the downloaded bytes against the ETag (for LFS files it is their sha256).
    Raises ModelFetchError with one line for offline mode, an unreachable endpoint,
    a gated / missing repo, revision or file, a full disk, or a corrupt transfer;
    an interrupted transfer leaves its partial file for the next attempt.
    """
    where = f"{source.repo}/{source.filename}@{source.revision}"
    if is_offline():
        raise ModelFetchError(f"{where}: Hugging Face Hub offline mode is on (HF_HUB_OFFLINE)")
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    base = endpoint()
    url = hf_hub_url(source.repo, source.filename, revision=source.revision, endpoint=base)
    say(f"asking {base} for {where} ...")
    try:
        with quiet_hub():
            meta = get_hf_file_metadata(url, endpoint=base)
    except Exception as exc:  # noqa: BLE001 - mapped to one line below, or re-raised
        raise explain_error(exc, source, base) from None
    etag = meta.etag or ""
    if not meta.commit_hash or not etag:
        raise ModelFetchError(
            f"{base} did not answer like a Hugging Face Hub for {where} "
            "(no X-Repo-Commit/ETag); check HF_ENDPOINT and proxies"
        )
    remote_size = meta.size
    lfs_sha = etag.lower() if _SHA256.match(etag.lower()) else None
    if size is not None and remote_size is not None and remote_size != size:
        raise ModelFetchError(
            f"{where}: the Hub serves {remote_size} bytes, the catalog expects {size} "
            "(the file changed upstream?); nothing was downloaded"
        )
    if sha256 and lfs_sha and lfs_sha != sha256:
        raise ModelFetchError(
            f"{where}: the Hub's sha256 is {lfs_sha[:12]}..., the catalog expects "
            f"{sha256[:12]}... (the file changed upstream?); nothing was downloaded"
        )
    total = size if size is not None else remote_size

    partial = partial_path(dest, etag)
    _drop_stale_partials(dest, keep=partial)
    have = partial.stat().st_size if partial.exists() else 0
    if total is not None and have > total:
        partial.unlink()
        have = 0
    if total is not None:
        store.ensure_space(dest.parent, total - have, dest.name)
    download_url = url if meta.xet_file_data is not None else meta.location or url
    headers = build_hf_headers()
    if _origin(download_url) != _origin(url):
        headers.pop("authorization", None)  # a signed CDN URL: the token stays on the Hub
    if have:
        say(f"resuming {dest.name} at {have / 1e6:.1f} MB")
    else:
        say(f"downloading {where} ...")
    try:
        with quiet_hub():
            _transfer(download_url, partial, total, headers, dest.name, bar)
    except Exception as exc:  # noqa: BLE001 - mapped to one line below, or re-raised
        raise explain_error(exc, source, base, _keep_partial(partial)) from None
    except BaseException:
        _keep_partial(partial)
        raise

    say(f"verifying {dest.name} ...")
    digest = store.sha256_file(partial, bar)
    if lfs_sha and digest != lfs_sha:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise ModelFetchError(
            f"{where}: downloaded bytes have sha256 {digest[:12]}..., the Hub says "
            f"{lfs_sha[:12]}...; the corrupt download was removed"
        )
    return partial, digest


def _timeout() -> float:
    """``$HF_HUB_DOWNLOAD_TIMEOUT`` (seconds without a byte before giving up), else 10."""
    try:
        value = float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or 10)
    except ValueError:
        return 10.0
    return value if value > 0 else 10.0


def _transfer(
    url: str, partial: Path, total: int | None, headers: dict[str, str], name: str,
    bar: BarFactory | None,
) -> None:  # fmt: skip
    """Append the rest of ``url`` to ``partial`` (``Range: bytes=N-`` from its size).

    A connection that drops or stalls is asked again for the rest, up to ``RETRIES``
    times in a row without progress. Raises what huggingface_hub (HTTP errors) or
    httpx2 (transport errors) raised, or OSError from the disk.
    """
    import httpx2
    from huggingface_hub import get_session
    from huggingface_hub.utils import hf_raise_for_status

    session = get_session()
    have = partial.stat().st_size if partial.exists() else 0
    make_bar = bar or _SilentBar
    failures = 0
    with (
        open(partial, "ab") as f,
        make_bar(total=total, initial=have, desc=name, unit="B", unit_scale=True) as shown,
    ):
        while total is None or have < total:
            asked = dict(headers)
            if have:
                asked["Range"] = f"bytes={have}-"
            before = have
            try:
                with session.stream("GET", url, headers=asked, timeout=_timeout()) as r:
                    if r.status_code >= 400:
                        r.read()
                        hf_raise_for_status(r)
                    if have and r.status_code != 206:  # the server ignored the Range
                        f.seek(0)
                        f.truncate()
                        shown.update(-have)
                        have = before = 0
                    for chunk in r.iter_bytes(CHUNK_SIZE):
                        f.write(chunk)
                        have += len(chunk)
                        shown.update(len(chunk))
                f.flush()
                if total is None:
                    return  # read to the end: that is all there is
                if have < total:  # closed early without an error
                    raise httpx2.RemoteProtocolError(
                        f"the server sent {have} of {total} bytes", request=r.request
                    )
            except httpx2.TransportError:
                f.flush()
                failures = 0 if have > before else failures + 1
                if failures > RETRIES:
                    raise
                time.sleep(RETRY_WAIT)


def _drop_stale_partials(dest: Path, keep: Path) -> None:
    """Remove unfinished downloads of other versions of ``dest``."""
    for p in dest.parent.glob(f".{dest.name}.*.partial"):
        if p != keep:
            with contextlib.suppress(OSError):
                p.unlink()


def _keep_partial(partial: Path) -> Path | None:
    """After a failed transfer: ``partial`` if it holds bytes to resume from, else remove
    it (an empty one is just litter) and return None."""
    try:
        if partial.stat().st_size > 0:
            return partial
        partial.unlink()
    except OSError:
        pass
    return None


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Silence huggingface_hub's own log lines and warnings for the duration.

    Its retries log a dozen lines ("Error while downloading from ...", "Trying to
    resume download...") before the error that edgespec reports as one line anyway.
    ``HF_HUB_VERBOSITY`` (huggingface_hub's own switch) keeps its logging as it is.
    """
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    if not os.environ.get("HF_HUB_VERBOSITY"):
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _failed_host(exc: Exception, base: str) -> str:
    """The origin (``scheme://host:port``) of the request that failed, if not the Hub's:
    a download redirected to a CDN fails there, not at ``base``."""
    try:
        url = str(exc.request.url)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # httpx raises RuntimeError when none is set
        return base
    if _origin(url) == _origin(base):
        return base
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return (parts.scheme, parts.hostname, parts.port)


def explain_error(
    exc: Exception, source: HubSource, base: str, partial: Path | None = None
) -> ModelFetchError:
    """One-line ModelFetchError for what huggingface_hub / httpx / the disk raised."""
    import httpx2
    from huggingface_hub import errors as hf

    repo, where = source.repo, f"{source.repo}/{source.filename}@{source.revision}"
    kept = f" (partial download kept for resume: {partial.name})" if partial else ""
    if isinstance(exc, hf.GatedRepoError):
        return ModelFetchError(
            f"{repo} is a gated repo: accept its terms at {base}/{repo} and set HF_TOKEN "
            "(or run `hf auth login`)"
        )
    if isinstance(exc, hf.RepositoryNotFoundError):
        return ModelFetchError(f"repo {repo} not found on {base} (a private repo needs HF_TOKEN)")
    if isinstance(exc, hf.RevisionNotFoundError):
        return ModelFetchError(f"revision {source.revision} not found in {repo} on {base}")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return ModelFetchError(f"file {source.filename} not found in {repo}@{source.revision}")
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return ModelFetchError(f"{where}: Hugging Face Hub offline mode is on (HF_HUB_OFFLINE)")
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        host = _failed_host(exc.response, base) if exc.response is not None else base
        who = "the Hub" if host == base else f"the Hub's download server {host}"
        return ModelFetchError(f"{where}: {who} answered HTTP {status}{kept}")
    if isinstance(exc, httpx2.HTTPError):
        reason = str(exc) or type(exc).__name__
        host = _failed_host(exc, base)
        if host != base:
            return ModelFetchError(
                f"cannot download {where} from {host} (the Hub at {base} redirected there): "
                f"{reason}{kept}"
            )
        return ModelFetchError(f"cannot reach {base} for {where}: {reason}{kept}")
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = exc.strerror
        else:
            reason = exc.strerror or str(exc).splitlines()[0]
        return ModelFetchError(f"{where}: {reason}{kept}")
    if isinstance(exc, ModelFetchError):
        return exc
    raise exc


class _SilentBar:
    """A tqdm stand-in that shows nothing (library use without a bar)."""

    def __init__(self, **_kwargs: Any) -> None:
        pass

    def __enter__(self) -> _SilentBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def update(self, _n: float = 1) -> None:
        """Ignore progress."""

    def close(self) -> None:
        """Nothing to close."""
