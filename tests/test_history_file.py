"""``serve --history-file``: the lookup history kept across server restarts."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from edgespec.cli import main
from edgespec.completion.history_file import HistoryFile
from edgespec.drafting.history import LookupHistory
from edgespec.errors import InvalidParameterError


def test_saves_only_when_changed_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    history = LookupHistory(model="m.gguf")
    keeper = HistoryFile(history, path)
    assert keeper.load() == 0 and not keeper.save() and not path.exists()  # nothing yet
    history.add(list(range(100, 160)))
    assert keeper.save() and path.exists()
    mtime = path.stat().st_mtime_ns
    assert not keeper.save() and path.stat().st_mtime_ns == mtime  # unchanged: not rewritten
    again = LookupHistory(model="m.gguf")
    assert HistoryFile(again, path).load() == 1
    assert again.lookup([*range(100, 120)], 4) == ([120, 121, 122, 123], 20)


def test_close_saves_what_came_after_the_last_periodic_save(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    history = LookupHistory()
    keeper = HistoryFile(history, path, interval=3600)
    keeper.start()
    history.add(list(range(10, 50)))
    keeper.close()  # stops the timer thread at once, then saves
    assert json.loads(path.read_text())["documents"] == [list(range(10, 50))]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a saved lookup history"),
        ('{"format": "something else"}', "not a saved lookup history"),
        (
            '{"format": "edgespec-lookup-history", "version": 1, "model": "other.gguf", '
            '"documents": []}',
            "saved for model 'other.gguf', not 'm.gguf'",
        ),
    ],
)
def test_a_bad_file_is_one_line_and_left_as_it_was(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "history.json"
    path.write_text(content)
    with pytest.raises(InvalidParameterError) as e:
        HistoryFile(LookupHistory(model="m.gguf"), path).load()
    assert message in str(e.value) and "\n" not in str(e.value)
    assert path.read_text() == content


def test_a_failed_save_is_reported_and_retried(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    history = LookupHistory()
    logged: list[str] = []
    keeper = HistoryFile(history, folder / "history.json", log=logged.append)
    history.add(list(range(10, 50)))
    folder.rmdir()  # the folder went away: the save fails, the server goes on
    assert not keeper.save() and len(logged) == 1 and "cannot save the history file" in logged[0]
    folder.mkdir()
    assert keeper.save()  # still counted as unsaved, so the next save writes it


def test_serve_refuses_a_history_file_in_a_missing_folder_before_loading(
    tmp_path: Path, capsys
) -> None:
    rc = main(["serve", "--history-file", str(tmp_path / "no" / "h.json"),
               "--target", str(tmp_path / "never-loaded.gguf")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and "history file's folder does not exist" in err[0]


def test_serve_refuses_a_history_file_without_the_lookup(synthetic_models, tmp_path, capsys):
    rc = main(["serve", "--history-file", str(tmp_path / "h.json"), "--draft", "none",
               "--port", "0", "--target", str(synthetic_models["target"])])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and "--history-file needs the n-gram lookup" in err[-1]


def _serve(target: Path, history: Path) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec.cli", "serve", "--port", "0", "--quiet",
         "--target", str(target), "--draft", "ngram", "--history-file", str(history)],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        # a Ctrl-C reaches it even where this run inherited SIGINT ignored (a
        # background job of a shell), as it does in a user's terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert proc.stderr is not None
    said = proc.stderr.readline()
    line = proc.stderr.readline()
    m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
    assert m, (said, line)
    return proc, said, f"http://127.0.0.1:{m.group(1)}"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_restarted_server_starts_from_the_saved_history(
    synthetic_models, tmp_path: Path, stop: signal.Signals
) -> None:
    history = tmp_path / "history.json"
    target = synthetic_models["target_fim"]
    proc, said, base = _serve(target, history)
    assert "none yet, saved to" in said
    try:
        req = urllib.request.Request(
            base + "/infill",
            data=json.dumps({"input_prefix": "def f(a, b):\n", "n_predict": 8}).encode(),
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.load(r)["tokens_predicted"] >= 1
    finally:
        proc.send_signal(stop)
        proc.communicate(timeout=60)
    assert proc.returncode == (0 if stop == signal.SIGINT else -signal.SIGTERM)
    saved = json.loads(history.read_text())
    assert saved["model"] == target.name and len(saved["documents"]) == 1
    proc, said, _ = _serve(target, history)
    try:
        assert f"1 earlier request from {history}" in said
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
