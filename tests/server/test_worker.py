"""The worker runs jobs one at a time in arrival order; cancelled and failing jobs don't stop it."""

from __future__ import annotations

import threading

import pytest

from edgespec.errors import InvalidParameterError
from edgespec.server.worker import Worker


def test_jobs_run_in_order_one_at_a_time() -> None:
    w = Worker()
    log: list[tuple[str, int]] = []
    gate = threading.Event()
    running = 0

    def work_for(i: int):
        def work(cancelled):
            nonlocal running
            running += 1
            assert running == 1
            if i == 0:
                gate.wait(10)
            log.append(("start", i))
            yield i
            log.append(("end", i))
            running -= 1

        return work

    jobs = [w.submit(work_for(i)) for i in range(5)]
    gate.set()
    assert [list(j.items()) for j in jobs] == [[i] for i in range(5)]
    assert log == [(k, i) for i in range(5) for k in ("start", "end")]
    assert w.served == 5
    w.stop()


def test_cancel_stops_a_job_between_items_and_skips_a_queued_one() -> None:
    w = Worker()
    gate = threading.Event()
    seen: list[int] = []

    def endless(cancelled):
        i = 0
        while not cancelled():
            seen.append(i)
            yield i
            i += 1
            if i == 3:
                gate.wait(10)

    running = w.submit(endless)
    queued = w.submit(lambda cancelled: iter([1]))
    queued.cancel.set()
    items = running.items()
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    running.cancel.set()
    gate.set()
    list(items)
    w.stop()
    assert w.cancelled == 2 and w.served == 0 and len(seen) <= 4
    assert list(queued.items()) == []


def test_errors_reach_the_reader_and_the_worker_goes_on() -> None:
    w = Worker()

    def broken(cancelled):
        yield 1
        raise ValueError("boom")

    job = w.submit(broken)
    with pytest.raises(ValueError):
        list(job.items())
    assert list(w.submit(lambda c: iter([7])).items()) == [7]
    assert w.failed == 1
    w.stop()


def test_a_client_error_is_counted_as_rejected_not_failed() -> None:
    w = Worker()

    def bad_ids(cancelled):
        raise InvalidParameterError("token id 600 is outside the vocabulary")
        yield

    with pytest.raises(InvalidParameterError):
        list(w.submit(bad_ids).items())
    assert (w.rejected, w.failed) == (1, 0)
    w.stop()


def test_a_reader_whose_client_is_gone_cancels() -> None:
    w = Worker()
    gate = threading.Event()

    def slow(cancelled):
        gate.wait(10)
        yield 1

    job = w.submit(slow)
    assert list(job.items(poll=lambda: True, interval=0.01)) == []
    assert job.cancel.is_set()
    gate.set()
    w.stop()
