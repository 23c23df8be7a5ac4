"""Every third-party package that edgespec/ and tui/ import is declared in pyproject.toml.

An import that is not declared works on the developer's machine (something else pulled
the package in) and fails on a clean install, or after a dependency stops pulling it
in (huggingface_hub 2 swapped httpx for httpx2). Imports guarded by ``except
ImportError`` are optional: they must be declared in an extra instead. Import names
map to distributions with :func:`importlib.metadata.packages_distributions`.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OWN = {"edgespec", "edgespec_tui"}


def _name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """True if ``node`` sits in a ``try`` whose handlers catch ImportError."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            for handler in parent.handlers:
                names = ast.unparse(handler.type) if handler.type is not None else "ImportError"
                if "ImportError" in names or "ModuleNotFoundError" in names:
                    return True
        child, parent = parent, parents.get(parent)
    return False


def third_party_imports() -> dict[str, dict[str, bool]]:
    """{top-level import name: {file: whether an import of it there is guarded}}.

    One guarded import makes the file's use optional: it fails first (``import
    matplotlib`` in a ``try``, then ``import matplotlib.pyplot`` after it).
    """
    found: dict[str, dict[str, bool]] = {}
    for top in ("edgespec", "tui"):
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    first = name.split(".")[0]
                    if first in sys.stdlib_module_names or first in OWN:
                        continue
                    rel = str(path.relative_to(ROOT))
                    seen = found.setdefault(first, {})
                    seen[rel] = seen.get(rel, False) or _guarded(node, parents)
    return found


def test_the_scan_sees_the_known_imports() -> None:
    found = third_party_imports()
    assert {"huggingface_hub", "httpx2", "filelock", "numpy", "textual"} <= set(found)
    assert found["matplotlib"] and all(found["matplotlib"].values())  # guarded in bench/chart


def test_every_third_party_import_is_declared() -> None:
    required = {_name(r) for r in PROJECT["dependencies"]}
    extras = {_name(r) for reqs in PROJECT.get("optional-dependencies", {}).values() for r in reqs}
    dists = packages_distributions()
    problems = []
    for module, files in sorted(third_party_imports().items()):
        candidates = {_name(d) for d in dists.get(module, [])}
        if not candidates:
            problems.append(f"{module} (imported by {', '.join(files)}) is not installed")
            continue
        optional = all(files.values())
        declared = required | extras if optional else required
        if not candidates & declared:
            where = "an extra or dependencies" if optional else "dependencies"
            problems.append(
                f"{module} (distribution {' or '.join(sorted(candidates))}, imported by "
                f"{', '.join(files)}) is not declared in pyproject.toml's {where}"
            )
    assert not problems, "\n".join(problems)


def test_edgespec_imports_and_locks_without_fcntl(tmp_path: Path) -> None:
    """fcntl does not exist on Windows: every module imports without it, and the locks
    (filelock, which falls back to a lock file of its own there) still work."""
    import subprocess

    code = f"""
import importlib, pkgutil, sys
sys.modules["fcntl"] = None  # import fcntl now raises ImportError
import edgespec
for info in pkgutil.walk_packages(edgespec.__path__, "edgespec."):
    importlib.import_module(info.name)
from pathlib import Path
from edgespec.files import exclusive_lock
from edgespec.modelstore import store
with exclusive_lock(Path({str(tmp_path / "lock")!r})):
    pass
with store.locked(Path({str(tmp_path / ".lock-x.gguf")!r}), store.quiet):
    pass
from edgespec.cli import build_parser
build_parser()
print("ok", "fcntl" in sys.modules and sys.modules["fcntl"] is None)
"""
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok", "True"]
