"""Every local llama_decode runs on one thread, whichever thread asks (edgespec.backend.compute)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from edgespec.backend import LlamaModel
from edgespec.backend import model as backend_model
from edgespec.backend.compute import ComputeThread, local_compute


def test_calls_from_many_threads_run_on_the_one_thread_in_order() -> None:
    compute = ComputeThread("test-compute")
    seen: list[tuple[int, int]] = []

    def call(i: int) -> int:
        seen.append((threading.get_ident(), i))
        return i * i

    results: dict[int, int] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, compute.run(call, i)))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: i * i for i in range(8)}
    assert len({ident for ident, _ in seen}) == 1
    assert seen[0][0] not in {t.ident for t in threads} | {threading.get_ident()}
    compute.stop()


def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    compute = ComputeThread("test-compute")

    def boom() -> None:
        raise ValueError("no such thing")

    with pytest.raises(ValueError, match="no such thing"):
        compute.run(boom)
    assert compute.run(lambda: 7) == 7
    assert compute.run(lambda: compute.run(lambda: 8)) == 8  # (from its own thread: inline)
    compute.stop()


def test_a_ctrl_c_waits_for_the_call_to_return() -> None:
    # Python's own Ctrl-C handler, even where the run inherited SIGINT ignored (a
    # shell's background job): the test is about what edgespec does with a Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_waits_for_the_call()
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_waits_for_the_call() -> None:
    compute = ComputeThread("test-compute")
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.5)
        finished.set()

    # a real SIGINT reaches the main thread while it waits: the KeyboardInterrupt
    # comes only once the call (which may use the caller's buffers) has returned
    main = threading.main_thread().ident
    assert threading.get_ident() == main
    timer = threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        compute.run(slow)
    assert finished.is_set()
    timer.join()
    compute.stop()


def test_models_decoding_from_several_threads_share_one_compute_thread(
    synthetic_models, monkeypatch
) -> None:
    idents: list[int] = []
    real = backend_model.ll.llama_decode

    def recording(ctx, batch):
        idents.append(threading.get_ident())
        return real(ctx, batch)

    monkeypatch.setattr(backend_model.ll, "llama_decode", recording)
    with (
        LlamaModel(synthetic_models["target"], n_ctx=128, n_threads=1) as a,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=128, n_threads=1, n_seq=2) as b,
    ):
        jobs = [
            lambda: a.decode([1, 2, 3]),
            lambda: b.sequence(0).decode([4, 5]),
            lambda: b.sequence(1).decode([6, 7, 8]),
        ]
        threads = [threading.Thread(target=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a.decode([9])
    assert len(idents) >= 4
    assert set(idents) == {local_compute()._thread.ident}


def test_a_forked_child_gets_a_compute_thread_of_its_own() -> None:
    import os

    parent = local_compute()
    assert parent.run(lambda: 1) == 1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread is not here; a call must not hang
        try:
            ok = local_compute() is not parent and local_compute().run(lambda: 2) == 2
            os.write(w, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 2)
    os.waitpid(pid, 0)
    assert got == b"ok"
