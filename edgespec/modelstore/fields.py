"""Checks of the catalog's fields: names, Hub repo ids and revisions, TOML tables."""

from __future__ import annotations

import re
from collections.abc import Set
from typing import Any

from ..errors import CatalogError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# huggingface_hub.utils.validate_repo_id's rule (kept here so that reading the catalog
# does not import huggingface_hub): each part 1-96 word characters, "." or "-", not
# starting or ending with "-" or ".", no "--" or "..", not ending in ".git".
_REPO_PART = r"(?:\w|\w[\w.-]{0,94}\w)"
_REPO = re.compile(rf"{_REPO_PART}/{_REPO_PART}")
# Revisions are branch or tag names or commit hashes: refuse what git refuses in a ref
# name (control characters, spaces, ~^:?*[ and backslash, "..", "@{", "//", a leading
# or trailing "/", a leading "-", a trailing "." or ".lock").
_BAD_REVISION = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^/|/$|^-|\.lock$|\.$")


def bad_revision(revision: str) -> bool:
    """True if git would refuse revision as a ref name (see _BAD_REVISION)."""
    return _BAD_REVISION.search(revision) is not None


def check_name(name: str, where: str) -> None:
    """CatalogError unless name is a catalog name (letters, digits and ._+-)."""
    if not _NAME.match(name):
        raise CatalogError(f"{where}: invalid name (letters, digits and ._+- only)")


def valid_repo_id(repo: str) -> bool:
    """True if huggingface_hub's ``validate_repo_id`` would accept ``repo`` (owner/name)."""
    return (
        _REPO.fullmatch(repo) is not None
        and "--" not in repo
        and ".." not in repo
        and not repo.endswith(".git")
    )


def table(value: Any, where: str) -> dict[str, Any]:
    """value, if it is a TOML table (CatalogError otherwise)."""
    if not isinstance(value, dict):
        raise CatalogError(f"{where}: expected a table")
    return value


def keys(
    e: dict[str, Any], allowed: set[str], where: str, required: Set[str] = frozenset()
) -> None:
    """CatalogError naming the first unknown or missing key of e."""
    unknown = sorted(set(e) - allowed)
    if unknown:
        raise CatalogError(f"{where}: unknown key {unknown[0]!r}")
    missing = sorted(required - set(e))
    if missing:
        raise CatalogError(f"{where}: missing key {missing[0]!r}")


_NO_DEFAULT = object()


def string(
    e: dict[str, Any], key: str, where: str, *, empty_ok: bool = False, default: Any = _NO_DEFAULT
) -> str:
    """e[key] as a string (default where absent, if given), checked."""
    if key not in e:
        if default is _NO_DEFAULT:
            raise CatalogError(f"{where}: missing key {key!r}")
        return default
    value = e[key]
    if not isinstance(value, str) or (not value and not empty_ok):
        raise CatalogError(f"{where}: {key} must be a non-empty string")
    if "\x00" in value:  # no path, name or message may carry one
        raise CatalogError(f"{where}: {key} must not contain a NUL character")
    return value
