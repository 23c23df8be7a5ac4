"""A server that heals: the target on RPC workers runs in a child process.

ggml-rpc aborts from inside ``llama_decode`` when a worker dies or stops answering;
nothing can be unwound there, and a parked thread keeps its model for good. So with
``--rpc`` the process a client talks to holds no model: it listens on the address
asked for and forwards each request (edgespec.server.proxy) to a child ``edgespec
serve`` on a private loopback port, which owns the models. A lost worker fails the
child's requests (each with an error naming the worker), saves its lookup history
and ends the child with ``EXIT_WORKER_LOST``; the child's other crashes end it too.
The ``Supervisor`` then probes the workers (their HELLO) with backoff and starts a
new child when they all answer, reading the lookup history back. While it
recovers, /health is 503 ``recovering`` (the loss, the attempt) and requests get
503 with Retry-After. ``--rpc-retry N`` bounds the attempts after one loss.
``serve --supervise`` runs a local target the same way, with no workers to probe:
a crashed child (an abort in llama.cpp, out of memory) is started again after the
same backoff.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .metrics import Metric

EXIT_WORKER_LOST = 75  # a child that lost a worker ends with this (EX_TEMPFAIL)
DEFAULT_RPC_RETRY = 150  # attempts after one loss (backoff to 2 s: about 5 minutes)
# between probes of lost workers (also chat's, tui/screens/recovery.py); each probe, a
# HELLO, waits up to unanswering_rpc_workers' 2 s
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.25, 2.0
_READY = re.compile(r"^edgespec: serving .* on http://([\d.]+):(\d+)\s*$")
_PR_SET_PDEATHSIG = 1
_ENDPOINT = re.compile(r"\d+\.\d+\.\d+\.\d+:\d+")
_LOSS = "edgespec: error: lost an RPC worker"  # the child's last line before it ends


@dataclass
class State:
    """What the front process knows about its child: its address, or why it has none."""

    status: str = "loading"  # loading, ok, recovering or failed
    child: tuple[str, int] | None = None
    error: str | None = None  # the loss, then the last probe's or reload's failure
    lost: list[str] = field(default_factory=list)  # the workers named in the loss
    attempt: int = 0
    losses: int = 0  # children ended by a lost worker
    crashes: int = 0  # children ended otherwise (an abort, a signal)
    recoveries: int = 0
    retry_after: float = BACKOFF_MAX_S
    lost_at: float | None = None  # monotonic time of the last loss
    back_at: float | None = None  # ... and of the first reload that answered after it

    def health(self) -> dict[str, object]:
        """/health's body while the child cannot answer."""
        return {
            "status": self.status,
            **({"error": self.error} if self.error else {}),
            **({"lost_workers": self.lost} if self.lost else {}),
            "attempt": self.attempt,
            "losses": self.losses,
            "recoveries": self.recoveries,
        }

    def metrics(self) -> list[Metric]:
        """The supervisor's counters for /metrics."""
        return [
            Metric("edgespec_rpc_worker_losses_total", "counter",
                   "Targets lost with an RPC worker", (({}, self.losses),)),
            Metric("edgespec_target_crashes_total", "counter",
                   "Targets ended otherwise (an abort, a signal)", (({}, self.crashes),)),
            Metric("edgespec_target_recoveries_total", "counter",
                   "Targets reloaded after a loss or crash", (({}, self.recoveries),)),
            Metric("edgespec_target_up", "gauge", "1 while the target answers",
                   (({}, float(self.status == "ok")),)),
        ]  # fmt: skip


class Supervisor:
    """Start the child ``edgespec serve`` and restart it after a loss (see the module).

    ``argv`` is the serve command's own (``serve --target ...``); the child gets it
    with ``--host 127.0.0.1 --port 0`` and ``--supervised DIR`` added.
    """

    def __init__(
        self,
        argv: Sequence[str],
        endpoints: Sequence[str],
        *,
        retries: int = DEFAULT_RPC_RETRY,
        log: Callable[[str], None] | None = None,
        on_first_ready: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.endpoints = list(endpoints)
        self.retries = retries
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.on_first_ready = on_first_ready
        self.state = State()
        self.lock = threading.Condition()
        self._stopping = False
        self._forwarder: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="edgespec-serve-")

    # ------------------------------------------------------------------ child

    def _spawn(self) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "edgespec.cli", *self.argv]
        cmd += ["--host", "127.0.0.1", "--port", "0", "--supervised", self._dir.name]
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            preexec_fn=_die_with_parent,
            start_new_session=True,  # a terminal's Ctrl+C reaches the front only
        )

    def _wait_ready(self, proc: subprocess.Popen[str], first: bool) -> list[str]:
        """Forward the child's stderr until it serves (sets the child's address; its
        lines after that go on being forwarded) or ends; its last lines."""
        assert proc.stderr is not None
        tail: list[str] = []
        for line in proc.stderr:
            line = line.rstrip("\n")
            if (m := _READY.match(line)) is not None:
                with self.lock:
                    self.state.child = (m.group(1), int(m.group(2)))
                if first and self.on_first_ready is not None:
                    self.on_first_ready(line)
                self._forwarder = threading.Thread(
                    target=self._forward, args=(proc, tail), daemon=True
                )
                self._forwarder.start()
                return tail
            self.log(line)
            tail[:] = [*tail[-4:], line]
        return tail

    def _forward(self, proc: subprocess.Popen[str], tail: list[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip("\n")
            self.log(line)
            tail[:] = [*tail[-4:], line]
            if line.startswith(_LOSS):  # it is ending: answer for it from now on
                self._lost(line.removeprefix("edgespec: error: "))

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        """Start the child, restart it after each loss; the exit status once stopped
        (0), the first start failed (the child's status) or the retries ran out (1)."""
        first = True
        while True:
            proc = self._spawn()
            with self.lock:
                self._proc = proc
            tail = self._wait_ready(proc, first)
            if self.state.child is not None:  # it serves
                self._served(first)
                rc = proc.wait()
                # its last stderr lines forwarded first: a loss it told of is a loss
                # (on a busy machine the forwarder may lag the exit)
                if self._forwarder is not None:
                    self._forwarder.join(timeout=5.0)
                if self._stopped():
                    return 0
                self._ended(rc, tail)
            else:
                rc = proc.wait()
                if self._stopped():
                    return 0
                if first:
                    return rc if rc > 0 else 1
                reason = _reason(rc, tail)
                with self.lock:
                    self.state.error = reason
                when = " when the workers answer" if self.endpoints else ""
                self.log(f"edgespec: reloading the target failed ({reason}); retrying{when}")
            first = False
            if not self._wait_for_workers():
                return 0 if self._stopped() else 1

    def _served(self, first: bool) -> None:
        with self.lock:
            st = self.state
            was = st.status
            st.status, st.error, st.lost, st.attempt = "ok", None, [], 0
            if not first and was == "recovering":
                st.recoveries += 1
                st.back_at = time.monotonic()
                took = st.back_at - (st.lost_at or st.back_at)
                self.log(f"edgespec: recovered: serving again, {took:.1f} s after the loss")
            self.lock.notify_all()

    def _lost(self, reason: str) -> None:
        """The child said it lost a worker (its last line): it is ending."""
        with self.lock:
            st = self.state
            if st.status != "ok":
                return
            st.child = None
            st.status, st.error, st.attempt = "recovering", reason, 0
            st.lost = _ENDPOINT.findall(reason)
            st.lost_at = time.monotonic()
            st.losses += 1
            self.lock.notify_all()

    def _ended(self, rc: int, tail: list[str]) -> None:
        reason = _reason(rc, tail)
        with self.lock:
            st = self.state
            if st.status == "ok":  # (not a loss it told of first: a crash)
                st.child = None
                st.status, st.error, st.attempt, st.lost = "recovering", reason, 0, []
                st.lost_at = time.monotonic()
                st.crashes += 1
            self.lock.notify_all()
        when = " when the workers answer" if self.endpoints else ""
        self.log(f"edgespec: the target is gone ({reason}); reloading{when}")

    def _wait_for_workers(self) -> bool:
        """Probe the workers with backoff until all answer (True), or the attempts
        run out or the server stops (False)."""
        from ..backend import unanswering_rpc_workers

        backoff = BACKOFF_FIRST_S
        while not self._stopped():
            with self.lock:
                self.state.attempt += 1
                attempt = self.state.attempt
                self.state.retry_after = backoff
            if attempt > self.retries:
                with self.lock:
                    self.state.status = "failed"
                self.log(
                    f"edgespec: error: gave up reloading the target after {self.retries} "
                    f"attempts (--rpc-retry): {self.state.error}"
                )
                return False
            if not self.endpoints:  # a local target (--supervise): restart after backoff
                with self.lock:
                    self.lock.wait(backoff if attempt > 1 else 0.0)
                    backoff = min(2 * backoff, BACKOFF_MAX_S)
                return not self._stopping
            failed = unanswering_rpc_workers(self.endpoints)
            if not failed:
                return True
            with self.lock:  # the workers that do not answer now: the lost ones
                self.state.lost = [ep for ep, _ in failed]
                self.state.error = failed[0][1]
                self.lock.wait(backoff)  # (stop() wakes it)
                backoff = min(2 * backoff, BACKOFF_MAX_S)
        return False

    def _stopped(self) -> bool:
        with self.lock:
            return self._stopping

    def stop(self) -> None:
        """End the child (SIGTERM: it saves its lookup history) and the loop."""
        with self.lock:
            self._stopping = True
            proc = self._proc
            self.lock.notify_all()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self._dir.cleanup()

    def wait_for_loss_reason(self, timeout: float = 3.0) -> str | None:
        """The reason the child went away, waiting up to timeout for it to end (a
        forwarded request that failed knows first); None if it still serves."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.state.status == "ok" and time.monotonic() < deadline:
                self.lock.wait(max(0.0, deadline - time.monotonic()))
            return None if self.state.status == "ok" else self.state.error


def _reason(rc: int, tail: list[str]) -> str:
    """The child's last error line, or how it ended."""
    for line in reversed(tail):
        if line.startswith("edgespec: error: "):
            return line.removeprefix("edgespec: error: ")
    if rc < 0:
        return f"the model's process ended by signal {signal.Signals(-rc).name}"
    return f"the model's process ended with status {rc}"


def _die_with_parent() -> None:
    """(In the child, before exec.) End with the front process, even if it is killed."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
