"""A server's lookup history kept in a file across restarts (``serve --history-file``).

An editor's completions in one project teach the cross-request lookup what its files
and suggestions look like (``edgespec.drafting.history``); a restarted server that
starts from an empty history drafts from nothing for its first requests again.
``HistoryFile`` loads the saved history when the server starts, saves it every
``interval`` seconds while it changes and once more when the server stops. Saves
replace the file whole (a reader, or a crash mid-save, sees the old file or the new
one), and a save that fails (a full disk) is reported and retried at the next
interval, never fatal to the server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..drafting.history import LookupHistory
from ..errors import InvalidParameterError

DEFAULT_SAVE_INTERVAL_S = 60.0


def check_history_path(path: str | Path) -> Path:
    """``path`` as a Path; InvalidParameterError (one line) where its folder does not
    exist, so a server learns it before loading its models, not at its first save."""
    path = Path(path)
    if not path.absolute().parent.is_dir():
        raise InvalidParameterError(f"history file's folder does not exist: {path}")
    return path


class HistoryFile:
    """Keeps ``history`` in ``path``: ``load()`` at start, ``start()`` the periodic
    saves, ``close()`` the last save.

    Args:
        history: the session's lookup history.
        path: the file (created on the first save; its folder must exist).
        interval: seconds between saves while the history changes.
        log: where a failed save is reported (one line).
    """

    def __init__(
        self,
        history: LookupHistory,
        path: str | Path,
        *,
        interval: float = DEFAULT_SAVE_INTERVAL_S,
        log: Callable[[str], object] = lambda _msg: None,
    ) -> None:
        self.history = history
        self.path = Path(path)
        self.interval = interval
        self._log = log
        self._saved = history.changes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # one save at a time (the timer's, close's); reentrant: SIGTERM may arrive mid-save
        self._lock = threading.RLock()

    def load(self) -> int:
        """Add the documents saved at ``path`` (none if there is no file yet).

        Raises InvalidParameterError (one line) for a file that cannot be read, is no
        saved history, or was saved for another model; the file is left as it is.
        """
        if not self.path.exists():
            check_history_path(self.path)
            return 0
        try:
            n = self.history.load(self.path)
        except ValueError as e:
            raise InvalidParameterError(f"cannot use the history file {e}") from None
        except OSError as e:
            raise InvalidParameterError(
                f"cannot read the history file {self.path}: {e.strerror or e}"
            ) from None
        self._saved = self.history.changes
        return n

    def save(self) -> bool:
        """Save now if the history changed since the last save; True if it wrote."""
        with self._lock:
            changes = self.history.changes
            if changes == self._saved:
                return False
            try:
                self.history.save(self.path)
            except OSError as e:
                self._log(f"edgespec: cannot save the history file {self.path}: {e.strerror or e}")
                return False
            self._saved = changes
            return True

    def start(self) -> None:
        """Save every ``interval`` seconds (when changed) on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="edgespec-history", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the periodic saves and save a last time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        self.save()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.save()
