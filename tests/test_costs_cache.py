"""The calibration cache: any unreadable file is measured again and replaced; writers merge."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgespec.policy import costs
from edgespec.policy.costs import CostCurve, load_or_measure, machine_key

MAX_K = 4
DEEP = 100_000
MEASURED: list[str] = []  # the models measure_curve was called for, in order


@dataclass
class FakeModel:
    """What load_or_measure and machine_key read of a model."""

    path: Path
    n_batch: int = 512
    n_threads: int = 1
    n_gpu_layers: int = 0


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache directory, an empty process cache, and a fake, instant measurement."""
    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_process_curves", {})
    MEASURED.clear()

    def measure(model: FakeModel, *, max_k: int) -> CostCurve:
        MEASURED.append(model.path.name)
        return CostCurve(
            model=model.path.name,
            key=machine_key(model, max_k),  # type: ignore[arg-type]
            seconds=tuple(0.01 * k for k in range(1, max_k + 1)),
            timed=tuple(range(1, max_k + 1)),
        )

    monkeypatch.setattr(costs, "measure_curve", measure)
    (tmp_path / "cache").mkdir()
    path = tmp_path / "cache" / "calibration.json"
    return path


def fake_model(tmp_path: Path, name: str = "m.gguf") -> FakeModel:
    p = tmp_path / name
    p.write_bytes(b"GGUF")
    return FakeModel(p)


def deep(n: int = DEEP) -> str:
    return "[" * n + "]" * n


def bad_caches(key: str) -> dict[str, bytes]:
    return {
        "deep list": deep().encode(),
        "deep object": ('{"a": ' + deep() + "}").encode(),
        "deep entry": json.dumps({key: {"model": "m", "seconds": []}})
        .replace("[]", deep())
        .encode(),
        "a list": b"[1, 2]",
        "a number": b"5",
        "entry is a list": json.dumps({key: [1, 2]}).encode(),
        "entry is a string": json.dumps({key: "fast"}).encode(),
        "seconds nested": json.dumps(
            {key: {"model": "m", "seconds": [[1], [2], [3], [4]]}}
        ).encode(),
        "timed nested": json.dumps(
            {key: {"model": "m", "seconds": [1, 2, 3, 4], "timed": [[1]]}}
        ).encode(),
        "timed a number": json.dumps(
            {key: {"model": "m", "seconds": [1, 2, 3, 4], "timed": 5}}
        ).encode(),
        "invalid utf-8": b'{"\xff\xfe": 1}',
        "torn": b'{"a": {"seconds": [1, 2',
    }


def assert_rebuilt(cache: Path, model: FakeModel) -> None:
    """The file is now a valid cache holding this model's curve, and it is used."""
    key = machine_key(model, MAX_K)  # type: ignore[arg-type]
    data = json.loads(cache.read_text(encoding="utf-8"))
    assert data[key]["seconds"] == pytest.approx([0.01, 0.02, 0.03, 0.04])
    costs._process_curves.clear()
    before = len(MEASURED)
    assert load_or_measure(model, max_k=MAX_K).seconds[0] == pytest.approx(0.01)  # type: ignore[arg-type]
    assert len(MEASURED) == before  # read, not measured
    assert sorted(p.name for p in cache.parent.iterdir() if p.suffix == ".tmp") == []


@pytest.mark.parametrize("kind", list(bad_caches("k")))
def test_an_unreadable_cache_is_measured_again_and_replaced(
    cache: Path, tmp_path: Path, kind: str
) -> None:
    model = fake_model(tmp_path)
    key = machine_key(model, MAX_K)  # type: ignore[arg-type]
    cache.write_bytes(bad_caches(key)[kind])
    curve = load_or_measure(model, max_k=MAX_K)  # type: ignore[arg-type]
    assert curve.seconds[-1] == pytest.approx(0.04)
    assert MEASURED == ["m.gguf"]
    assert_rebuilt(cache, model)


def test_a_bad_sibling_entry_is_dropped_and_good_ones_kept(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path)
    good = {"model": "other", "key": "g", "seconds": [1, 2], "noisy": False, "timed": [1, 2]}
    text = json.dumps({"good": good, "bad": {"seconds": []}, "worse": 3})
    cache.write_text(text.replace("[]", deep(500)), encoding="utf-8")
    load_or_measure(model, max_k=MAX_K)  # type: ignore[arg-type]
    data = json.loads(cache.read_text(encoding="utf-8"))
    assert data["good"] == good and "bad" not in data and "worse" not in data
    assert_rebuilt(cache, model)


def test_an_empty_directory_in_its_place_is_replaced(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path)
    cache.mkdir()
    load_or_measure(model, max_k=MAX_K)  # type: ignore[arg-type]
    assert cache.is_file()
    assert_rebuilt(cache, model)


def test_a_directory_with_files_in_its_place_is_left_alone(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path)
    cache.mkdir()
    (cache / "mine").write_text("keep", encoding="utf-8")
    assert load_or_measure(model, max_k=MAX_K).seconds[0] == pytest.approx(0.01)  # type: ignore[arg-type]
    assert (cache / "mine").read_text(encoding="utf-8") == "keep"


def test_a_fifo_in_its_place_does_not_hang(cache: Path, tmp_path: Path) -> None:
    model = fake_model(tmp_path)
    os.mkfifo(cache)
    load_or_measure(model, max_k=MAX_K)  # type: ignore[arg-type]
    assert cache.is_file()
    assert_rebuilt(cache, model)


def test_an_unreadable_file_is_measured_again_and_replaced(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (chmod 000 does not stop root, so the refusal is simulated)
    model = fake_model(tmp_path)
    cache.write_text("{}", encoding="utf-8")
    real_open, real_bytes, real_text, refused = os.open, Path.read_bytes, Path.read_text, []

    def refuse(path) -> None:
        if Path(path) == cache and not refused:  # the first read, however it is made
            refused.append(path)
            raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", lambda path, *a, **k: refuse(path) or real_open(path, *a, **k))
    monkeypatch.setattr(Path, "read_bytes", lambda p: refuse(p) or real_bytes(p))
    monkeypatch.setattr(Path, "read_text", lambda p, *a, **k: refuse(p) or real_text(p, *a, **k))
    load_or_measure(model, max_k=MAX_K)  # type: ignore[arg-type]
    assert refused
    assert_rebuilt(cache, model)


def run_two(first, second) -> None:
    """Run first and second in threads; re-raise what either raised."""
    errors: list[BaseException] = []

    def guard(f):
        def run() -> None:
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                errors.append(e)

        return run

    threads = [threading.Thread(target=guard(f)) for f in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_writer_merges_what_another_wrote_while_it_measured(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = fake_model(tmp_path, "a.gguf"), fake_model(tmp_path, "b.gguf")
    b_done = threading.Event()
    measure = costs.measure_curve

    def slow_for_a(model, *, max_k):
        if model is a:
            b_done.wait()  # b measures and writes while a measures
        return measure(model, max_k=max_k)

    monkeypatch.setattr(costs, "measure_curve", slow_for_a)

    def run_b() -> None:
        try:
            load_or_measure(b, max_k=MAX_K)  # type: ignore[arg-type]
        finally:
            b_done.set()

    run_two(lambda: load_or_measure(a, max_k=MAX_K), run_b)  # type: ignore[arg-type]
    data = json.loads(cache.read_text(encoding="utf-8"))
    assert {machine_key(a, MAX_K), machine_key(b, MAX_K)} <= set(data)  # type: ignore[arg-type]


def test_read_merge_write_holds_a_lock(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a reads the cache to merge into it, then waits until b is either blocked on the
    # lock (the fix) or reading the same old cache (the race): only the lock keeps both
    a, b = fake_model(tmp_path, "a.gguf"), fake_model(tmp_path, "b.gguf")
    a_merging, b_progress, reads = threading.Event(), threading.Event(), {"a": 0, "b": 0}
    read, flock = costs.read_cache, fcntl.flock

    def watched_read(path):
        who = threading.current_thread().name
        reads[who] += 1
        out = read(path)
        if who == "b" and reads["b"] == 2:
            b_progress.set()
        if who == "a" and reads["a"] == 2:
            a_merging.set()
            b_progress.wait()
        return out

    def watched_flock(fd, op):
        try:
            return flock(fd, op)
        except BlockingIOError:
            if threading.current_thread().name == "b":
                b_progress.set()
            raise

    measure = costs.measure_curve

    def b_measures_while_a_merges(model, *, max_k):
        if model is b:
            a_merging.wait()
        return measure(model, max_k=max_k)

    def run_a() -> None:
        try:
            load_or_measure(a, max_k=MAX_K)  # type: ignore[arg-type]
        finally:
            a_merging.set()  # (code that reads only once never merges: let b go on)

    monkeypatch.setattr(costs, "read_cache", watched_read)
    monkeypatch.setattr(fcntl, "flock", watched_flock)
    monkeypatch.setattr(costs, "measure_curve", b_measures_while_a_merges)
    errors: list[BaseException] = []

    def named(target):
        def run() -> None:
            try:
                target()
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                errors.append(e)

        return run

    threads = [
        threading.Thread(target=named(run_a), name="a"),
        threading.Thread(target=named(lambda: load_or_measure(b, max_k=MAX_K)), name="b"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    data = json.loads(cache.read_text(encoding="utf-8"))
    assert {machine_key(a, MAX_K), machine_key(b, MAX_K)} <= set(data)  # type: ignore[arg-type]
