"""``edgespec bench --load N``: the busy processes start, and are gone afterwards (after an
error, and after their parent dies without killing them too). No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgespec.bench.load import BusyLoad, load_line
from edgespec.cli import main

TINY = 'name = "tiny"\nkind = "code"\nprompt = "one two three one two three one"\nmax_tokens = 8\n'


def _running(pid: int) -> bool:
    """Whether pid is a live process (a zombie, exited but not yet reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _busy_children() -> list[int]:
    """This process's children that run the busy loop."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and b"getppid" in cmd and _running(int(entry.name)):
            out.append(int(entry.name))
    return out


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def test_the_busy_processes_run_while_the_block_does_and_not_after() -> None:
    with BusyLoad(2) as busy:
        pids = [p.pid for p in busy.processes]
        assert len(pids) == 2 and all(_running(pid) for pid in pids)
        assert sorted(_busy_children()) == sorted(pids)
        assert busy.describe()["busy_processes"] == 2
    assert not any(_running(pid) for pid in pids) and not _busy_children()


def test_an_error_in_the_block_still_kills_them() -> None:
    with pytest.raises(KeyboardInterrupt), BusyLoad(1) as busy:
        pid = busy.processes[0].pid
        raise KeyboardInterrupt
    assert not _running(pid)


def test_a_busy_process_exits_when_its_parent_dies_without_killing_it() -> None:
    code = (
        "import os\n"
        "from edgespec.bench.load import BusyLoad\n"
        "busy = BusyLoad(1).__enter__()\n"
        "print(busy.processes[0].pid, flush=True)\n"
        "os._exit(0)\n"  # no cleanup: as if killed
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def test_zero_is_no_load_and_bad_n_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with BusyLoad(0) as busy:
        assert busy.processes == []
    assert "beside" not in load_line(busy.describe())
    for bad in ("-1", "x", "1.5", "100000"):
        with pytest.raises(SystemExit) as exc:
            main(["bench", "--load", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("edgespec: error: argument --load: load must be")
        assert err.count("\n") == 1


def test_bench_runs_beside_the_load_and_records_it(
    synthetic_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY)
    out = tmp_path / "out.json"
    rc = main(
        [
            "bench", "--target", str(synthetic_models["target"]), "--drafters", "ngram",
            "--workloads", str(tiny), "--reps", "1", "--gammas", "auto", "--load", "1",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    assert not _busy_children()
    load = json.loads(out.read_text())["load"]
    assert load["busy_processes"] == 1 and load["cpu_count"] == os.cpu_count()
    text = capsys.readouterr().out
    assert "beside 1 busy process started by the bench (--load 1)" in text
