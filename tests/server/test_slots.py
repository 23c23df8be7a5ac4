"""The scheduler: one slot runs jobs one at a time in arrival order; several run at
once; code completions go first; the longest cached prefix picks the slot; a newer
/infill from one client replaces its older one; a full queue refuses; cancelled and
failing jobs don't stop it. (Fake sessions: the scheduler only hands them over.)"""

from __future__ import annotations

import threading
import time

import pytest

from edgespec.errors import InvalidParameterError
from edgespec.server.slots import PRIORITY_CODE, QueueFull, Scheduler


class _Target:
    def __init__(self, tokens: list[int] | None = None) -> None:
        self.tokens = tokens or []
        self.n_ctx = 64


class _Session:
    drafter_name = "none"

    def __init__(self, tokens: list[int] | None = None) -> None:
        self.target = _Target(tokens)


def Worker(n: int = 1, **kwargs) -> Scheduler:  # noqa: N802  (the one-slot server of old)
    return Scheduler([_Session() for _ in range(n)], **kwargs)


def test_jobs_run_in_order_one_at_a_time() -> None:
    w = Worker()
    log: list[tuple[str, int]] = []
    gate = threading.Event()
    running = 0

    def work_for(i: int):
        def work(_s, cancelled):
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

    def endless(_s, cancelled):
        i = 0
        while not cancelled():
            seen.append(i)
            yield i
            i += 1
            if i == 3:
                gate.wait(10)

    running = w.submit(endless)
    queued = w.submit(lambda _s, cancelled: iter([1]))
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

    def broken(_s, cancelled):
        yield 1
        raise ValueError("boom")

    job = w.submit(broken)
    with pytest.raises(ValueError):
        list(job.items())
    assert list(w.submit(lambda _s, c: iter([7])).items()) == [7]
    assert w.failed == 1
    w.stop()


def test_a_client_error_is_counted_as_rejected_not_failed() -> None:
    w = Worker()

    def bad_ids(_s, cancelled):
        raise InvalidParameterError("token id 600 is outside the vocabulary")
        yield

    with pytest.raises(InvalidParameterError):
        list(w.submit(bad_ids).items())
    assert (w.rejected, w.failed) == (1, 0)
    w.stop()


def test_a_reader_whose_client_is_gone_cancels() -> None:
    w = Worker()
    gate = threading.Event()

    def slow(_s, cancelled):
        gate.wait(10)
        yield 1

    job = w.submit(slow)
    assert list(job.items(poll=lambda: True, interval=0.01)) == []
    assert job.cancel.is_set()
    gate.set()
    w.stop()


def _blocker(gate: threading.Event, started: threading.Event | None = None):
    def work(s, cancelled):
        if started is not None:
            started.set()
        gate.wait(10)
        yield s

    return work


def test_several_slots_run_jobs_at_once() -> None:
    w = Worker(3)
    gate = threading.Event()
    started = [threading.Event() for _ in range(3)]
    jobs = [w.submit(_blocker(gate, started[i])) for i in range(3)]
    for e in started:
        assert e.wait(5)  # all three running before any is released
    assert w.processing == 3 and w.queued == 0
    gate.set()
    sessions = [next(iter(j.items())) for j in jobs]
    assert len({id(s) for s in sessions}) == 3  # each on its own slot
    w.stop()


def test_code_completions_jump_the_queue() -> None:
    w = Worker(1)
    gate, started = threading.Event(), threading.Event()
    w.submit(_blocker(gate, started))
    assert started.wait(5)
    order: list[str] = []

    def named(name: str):
        def work(_s, cancelled):
            order.append(name)
            yield name

        return work

    chat = w.submit(named("chat"))
    infill = w.submit(named("infill"), priority=PRIORITY_CODE)
    gate.set()
    list(chat.items()), list(infill.items())
    assert order == ["infill", "chat"]
    w.stop()


def test_a_job_goes_to_the_slot_that_caches_its_prefix() -> None:
    sessions = [_Session([9, 9, 9]), _Session([1, 2, 3, 4]), _Session([1, 2])]
    w = Scheduler(sessions)
    job = w.submit(lambda s, c: iter([s]), prompt=[1, 2, 3, 4, 5])
    assert list(job.items()) == [sessions[1]]
    job = w.submit(lambda s, c: iter([s]), prompt=[9, 9, 7])
    assert list(job.items()) == [sessions[0]]
    w.stop()


def test_a_newer_request_from_the_same_client_replaces_the_older() -> None:
    w = Worker(1)
    gate, started = threading.Event(), threading.Event()
    running = w.submit(_blocker(gate, started), client="editor", prompt=[1, 2, 3, 4])
    assert started.wait(5)
    queued = w.submit(lambda s, c: iter([1]), client="editor", prompt=[1, 2, 3, 4, 5])
    other = w.submit(lambda s, c: iter([2]), client="someone else", prompt=[1, 2, 3, 4, 5])
    # the same address and User-Agent in another file: another editor, not replaced
    elsewhere = w.submit(lambda s, c: iter([4]), client="editor", prompt=[7, 8, 9])
    latest = w.submit(lambda s, c: iter([3]), client="editor", prompt=[1, 2, 3, 4, 5, 6])
    assert running.cancel.is_set() and running.replaced
    assert queued.cancel.is_set() and queued.replaced
    assert not any(j.cancel.is_set() for j in (other, elsewhere, latest))
    gate.set()
    assert list(queued.items()) == []
    assert [list(j.items()) for j in (other, elsewhere, latest)] == [[2], [4], [3]]
    w.stop()


def test_code_first_but_not_for_ever(monkeypatch) -> None:
    from edgespec.server import slots

    monkeypatch.setattr(slots, "PRIORITY_AGE_S", 0.2)
    w = Worker(1)
    gate, started = threading.Event(), threading.Event()
    w.submit(_blocker(gate, started))
    assert started.wait(5)
    order: list[str] = []
    chat = w.submit(lambda s, c: iter(order.append("chat") or [0]))
    time.sleep(0.3)  # the chat has waited past the age
    code = w.submit(lambda s, c: iter(order.append("code") or [0]), priority=PRIORITY_CODE)
    gate.set()
    list(chat.items()), list(code.items())
    assert order == ["chat", "code"]
    w.stop()


def test_a_full_queue_refuses_at_once() -> None:
    w = Worker(1, max_queue=2)
    gate, started = threading.Event(), threading.Event()
    w.submit(_blocker(gate, started))
    assert started.wait(5)
    waiting = [w.submit(lambda s, c, i=i: iter([i])) for i in range(2)]
    with pytest.raises(QueueFull):
        w.submit(lambda s, c: iter([9]))
    assert w.refused == 1
    gate.set()
    assert [list(j.items()) for j in waiting] == [[0], [1]]
    w.stop()


def test_a_job_pinned_to_a_busy_slot_waits_for_it_and_lets_others_by() -> None:
    w = Worker(2)
    gate, started = threading.Event(), threading.Event()
    w.submit(_blocker(gate, started), slot=0)
    assert started.wait(5)
    pinned = w.submit(lambda s, c: iter([s]), slot=0)
    free = w.submit(lambda s, c: iter([s]))
    assert list(free.items()) == [w.slots[1].session]  # went by on the free slot
    assert w.queued == 1
    gate.set()
    assert list(pinned.items()) == [w.slots[0].session]
    w.stop()
