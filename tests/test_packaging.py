"""What the wheel installs: only edgespec-named top-level packages, and every subpackage."""

from __future__ import annotations

import tomllib
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

    assert files("edgespec.modelstore").joinpath("catalog.toml").is_file()
    assert files("edgespec_tui").joinpath("edgespec.tcss").is_file()
