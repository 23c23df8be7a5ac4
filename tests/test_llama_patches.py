"""edgespec's patches to the vendored llama.cpp (scripts/patches) still apply to the
pristine sdist that scripts/bootstrap.sh downloaded and built from. What each patch
does is tested where it matters (the ring's placement: tests/test_sliding_window.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHES = sorted((ROOT / "scripts" / "patches").glob("*.patch"))
SDISTS = sorted((Path(sys.prefix) / "llama-sdist").glob("llama_cpp_python-*.tar.gz"))


def test_there_is_a_patch_and_the_pristine_sdist_it_was_built_from() -> None:
    assert PATCHES, "scripts/patches holds no patch"
    assert len(SDISTS) == 1, f"expected the sdist bootstrap keeps in {sys.prefix}/llama-sdist"


def _patched_files(patch: Path) -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)", patch.read_text(), flags=re.MULTILINE)


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_the_patch_applies_to_the_pristine_sdist(patch: Path, tmp_path: Path) -> None:
    files = _patched_files(patch)
    assert files, f"{patch.name} names no file"
    with tarfile.open(SDISTS[0]) as tar:
        top = tar.getnames()[0].split("/")[0]
        for name in files:
            member = tar.extractfile(f"{top}/{name}")
            assert member is not None, name
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name).write_bytes(member.read())
    # git apply takes no fuzz; the ceiling stops it from finding a repository above tmp_path
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    run = subprocess.run(
        [shutil.which("git") or "git", "apply", "--check", "-v", "-p1", str(patch)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for name in files:  # -v names each file it checked: proof that none was skipped
        assert f"Checking patch {name}" in run.stderr, run.stderr
    assert "offset" not in run.stderr.lower(), run.stderr  # every hunk where it was written
