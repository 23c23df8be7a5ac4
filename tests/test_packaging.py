"""What the wheel installs: only edgespec-named top-level packages, and every subpackage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _source_dir(package: str) -> Path:
    """The folder setuptools takes ``package`` from (package-dir, else the dotted path)."""
    mapping = CONFIG.get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[i:])
    return ROOT / Path(*parts)


def test_top_level_names_are_edgespec_only() -> None:
    tops = {p.split(".")[0] for p in CONFIG["packages"]}
    assert tops == {"edgespec", "edgespec_tui"}
    for generic in ("tui", "models", "tests", "scripts"):
        assert generic not in tops


def test_every_package_folder_is_listed() -> None:
    """packages is an explicit list: a new subpackage left out would be missing from the wheel."""
    listed = set(CONFIG["packages"])
    for package in listed:
        assert (_source_dir(package) / "__init__.py").is_file(), package
    sources = {_source_dir(p).resolve() for p in listed}
    for top in ("edgespec", "tui"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.parent.resolve() in sources, f"{init.parent} is not in pyproject's packages"


def test_package_data_exists() -> None:
    for package, patterns in CONFIG["package-data"].items():
        for pattern in patterns:
            assert list(_source_dir(package).glob(pattern)), (package, pattern)


def test_the_catalog_and_styles_load_as_installed() -> None:
    from importlib.resources import files

    assert files("edgespec.models").joinpath("catalog.toml").is_file()
    assert files("edgespec_tui").joinpath("edgespec.tcss").is_file()


def test_the_catalog_lives_in_models_as_package_data_of_edgespec() -> None:
    """models/ holds the catalog and its README; it installs as edgespec.models (package
    data), never as a top-level ``models`` package, and no second copy hides in the code."""
    assert CONFIG["package-dir"]["edgespec.models"] == "models"
    assert {"catalog.toml", "README.md"} <= set(CONFIG["package-data"]["edgespec.models"])
    assert (ROOT / "models" / "catalog.toml").is_file()
    assert (ROOT / "models" / "README.md").is_file()
    assert not list((ROOT / "edgespec").rglob("catalog.toml"))
    from edgespec.modelstore.catalog import load_catalog

    origin = Path(load_catalog().origin).resolve()
    assert origin == (ROOT / "models" / "catalog.toml").resolve()  # (an editable install)


def test_the_wheel_installs_the_catalog_where_the_loader_finds_it(tmp_path: Path) -> None:
    """Build the wheel as pip does (setuptools in an isolated build environment), install
    it alone into a folder and load the catalog from there in a fresh interpreter."""
    src = tmp_path / "src"  # a copy: the build writes build/ and *.egg-info beside its input
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("edgespec", "tui", "models"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run = subprocess.run(
        [*pip, "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (wheel,) = dist.glob("edgespec-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {"edgespec/models/catalog.toml", "edgespec/models/README.md"} <= names
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"edgespec", "edgespec_tui"}, tops
    target = tmp_path / "site"
    run = subprocess.run(
        [*pip, "install", "--quiet", "--no-deps", "--no-index", "-t", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    probe = (
        "import edgespec.modelstore.catalog as c; "
        "print(c.__file__); print(c.load_catalog().origin); print(len(c.load_catalog().pairs))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    env.pop("EDGESPEC_CATALOG", None)
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.split("\n")  # fmt: skip
    module, origin, pairs = out[0], out[1], int(out[2])
    assert Path(module).is_relative_to(target), module  # the installed copy, not the checkout
    assert Path(origin) == target / "edgespec" / "models" / "catalog.toml"
    assert pairs >= 1
