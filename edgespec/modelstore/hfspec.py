"""Models by Hugging Face Hub name, as llama-server's ``-hf repo[:quant]``.

A spec is ``hf:OWNER/REPO`` (llama.cpp's default quant: Q4_K_M, else Q8_0, else the
first model file), ``hf:OWNER/REPO:QUANT`` (the ``.gguf`` whose name has
``QUANT`` followed by ``.`` or ``-``, case-insensitively, as llama.cpp matches it)
or ``hf:OWNER/REPO/FILE.gguf`` (that file of the repo). Files that are not models
(``mmproj``, ``imatrix``, ``mtp-``, ``eagle3-``, ``dflash-``, ``dspark-``) are never
picked; a model split into ``NAME-00001-of-0000N.gguf`` parts is fetched whole and
loaded from its first part.

The files go to ``<model dir>/hf/OWNER/REPO/<path in the repo>``, fetched like a
catalog model's (:func:`edgespec.modelstore.store.ensure_file`: size and sha256 from
the Hub's file listing, checked again against the ``/resolve/`` HEAD and the
downloaded bytes; resumable partial files; one lock per file). A model installed
that way is named ``hf:OWNER/REPO/FILE.gguf`` (its first part) by ``edgespec
models``; every spec names the same files for ``pull``, ``--target``/``--draft`` and
``rm``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelFetchError, ModelLoadError
from . import store
from .catalog import HubSource
from .fields import valid_repo_id
from .store import BarFactory, Progress, models_dir

__all__ = [
    "HF_PREFIX",
    "HfFile",
    "HfSpec",
    "ensure_hf_model",
    "is_hf_spec",
    "parse_hf_spec",
    "select",
]

HF_PREFIX = "hf:"
#: What ``hf:OWNER/REPO`` picks, in order (llama.cpp's ``find_best_model``), then the first.
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
REVISION = "main"
STORE_FOLDER = "hf"
_QUANT = re.compile(r"^[A-Za-z0-9_]+$")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")


class AmbiguousSpec(ModelFetchError):
    """Several files of a repo match the spec's quant."""


@dataclass(frozen=True)
class HfSpec:
    """``hf:OWNER/REPO[:QUANT|/FILE.gguf]`` taken apart (at most one of quant, file)."""

    repo: str
    quant: str | None = None
    file: str | None = None

    def __str__(self) -> str:
        if self.file:
            return f"{HF_PREFIX}{self.repo}/{self.file}"
        return f"{HF_PREFIX}{self.repo}" + (f":{self.quant}" if self.quant else "")


@dataclass(frozen=True)
class HfFile:
    """One file of a repository: its path there, size, and sha256 if the Hub knows it."""

    path: str
    size: int | None = None
    sha256: str = ""


def is_hf_spec(text: str) -> bool:
    """True if ``text`` names a model by Hub name (``hf:...``)."""
    return text.startswith(HF_PREFIX)


def parse_hf_spec(text: str) -> HfSpec:
    """Take ``hf:OWNER/REPO[:QUANT|/FILE.gguf]`` apart; ModelLoadError (one line) if malformed."""
    usage = "expected hf:OWNER/REPO, hf:OWNER/REPO:QUANT or hf:OWNER/REPO/FILE.gguf"
    if not is_hf_spec(text):
        raise ModelLoadError(f"{text!r} is not a Hub model name ({usage})")
    rest = text[len(HF_PREFIX) :]
    parts = rest.split("/", 2)
    if len(parts) < 2:
        raise ModelLoadError(f"{text!r}: {usage}")
    owner, name = parts[0], parts[1]
    quant = file = None
    if len(parts) == 2 and ":" in name:
        name, quant = name.split(":", 1)
    repo = f"{owner}/{name}"
    if not valid_repo_id(repo):
        raise ModelLoadError(
            f"{text!r}: {repo!r} is not a valid Hugging Face repo id (OWNER/REPO: letters, "
            'digits and _.- only, not starting or ending with - or ., no "--" or "..")'
        )
    if len(parts) == 3:
        file = parts[2]
        if not _safe_path(file) or not file.endswith(".gguf"):
            raise ModelLoadError(
                f"{text!r}: the file must be a path in the repo ending in .gguf (no empty, "
                f". or .. parts, no hidden names, backslashes or control characters)"
            )
    if quant is not None and not _QUANT.match(quant):
        raise ModelLoadError(
            f"{text!r}: the quant must be letters, digits and _ (like Q4_K_M), got {quant!r}"
        )
    return HfSpec(repo, quant, file)


def _safe_path(path: str) -> bool:
    """True for a relative path with plain parts, fit to mirror inside the model directory."""
    parts = path.split("/")
    return (
        path.isprintable()
        and "\\" not in path
        and ":" not in path
        and all(p not in ("", ".", "..") and not p.startswith(".") for p in parts)
    )


# --------------------------------------------------------------------------- choosing


def _split_info(path: str) -> tuple[str, int, int]:
    """(prefix without ``.gguf`` and split suffix, part index, part count)."""
    prefix = path[: -len(".gguf")] if path.endswith(".gguf") else path
    m = _SPLIT.match(prefix)
    if m:
        return m.group(1), int(m.group(2)), int(m.group(3))
    return prefix, 1, 1


def quant_of(path: str) -> str:
    """The quant tag of a GGUF file name (``model-Q4_K_M.gguf`` -> ``Q4_K_M``), or ""."""
    m = _TAG.search(_split_info(path)[0])
    return m.group(1).upper() if m else ""


def _is_model(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return path.endswith(".gguf") and not any(word in base for word in _NOT_MODELS)


def _firsts(files: Sequence[HfFile]) -> list[HfFile]:
    """Model files that are whole models or first parts, by path."""
    return sorted(
        (f for f in files if _is_model(f.path) and _split_info(f.path)[1] == 1),
        key=lambda f: f.path,
    )


def _parts(files: Sequence[HfFile], first: HfFile, spec: HfSpec) -> list[HfFile]:
    prefix, _, count = _split_info(first.path)
    if count == 1:
        return [first]
    parts = {}
    for f in files:
        p, index, c = _split_info(f.path)
        if p == prefix and c == count:
            parts[index] = f
    missing = [i for i in range(1, count + 1) if i not in parts]
    if missing:
        raise ModelFetchError(
            f"{spec}: {first.path} is split in {count} parts but part {missing[0]} is missing"
        )
    return [parts[i] for i in range(1, count + 1)]


def _listing(files: Sequence[HfFile], by_file: bool = False) -> str:
    firsts = _firsts(files)
    quants = sorted({q for f in firsts if (q := quant_of(f.path))})
    if quants and not by_file:
        return f"available quants: {', '.join(quants)}"
    if firsts:
        return f"GGUF files: {', '.join(f.path for f in firsts)}"
    return "it has no GGUF model files"


def select(files: Sequence[HfFile], spec: HfSpec, *, first_fallback: bool = True) -> list[HfFile]:
    """The files ``spec`` names among ``files`` (a repo's), first part first.

    llama.cpp's rule: a file by path; else the model file whose name has the quant
    followed by ``.`` or ``-`` (case-insensitive; the default tries Q4_K_M, then
    Q8_0, then, with ``first_fallback``, takes the first model file by path).
    Raises ModelFetchError (one line, with what there is) for none or several.
    """
    where = f"{spec}"
    if spec.file is not None:
        wanted = next((f for f in files if f.path == spec.file), None)
        if wanted is None:
            raise ModelFetchError(
                f"{where}: no file {spec.file} in {spec.repo}; {_listing(files, by_file=True)}"
            )
        prefix, _, count = _split_info(wanted.path)
        first = next(
            (f for f in files if _split_info(f.path) == (prefix, 1, count)), wanted
        )  # another part named: the whole model, loaded from its first part
        return _parts(files, first, spec)
    firsts = _firsts(files)
    for quant in [spec.quant] if spec.quant else list(DEFAULT_QUANTS):
        pattern = re.compile(re.escape(quant) + r"[.-]", re.IGNORECASE)
        matches = [f for f in firsts if pattern.search(f.path)]
        if len(matches) > 1:
            names = ", ".join(f.path for f in matches)
            raise AmbiguousSpec(
                f"{where}: {len(matches)} files of {spec.repo} match {quant}: {names}; "
                f"name one as hf:{spec.repo}/FILE.gguf"
            )
        if matches:
            return _parts(files, matches[0], spec)
    if spec.quant:
        raise ModelFetchError(
            f"{where}: no GGUF file in {spec.repo} matches quant {spec.quant}; {_listing(files)}"
        )
    if first_fallback and firsts:
        return _parts(files, firsts[0], spec)
    raise ModelFetchError(f"{where}: no GGUF model in {spec.repo}; {_listing(files)}")


# --------------------------------------------------------------------------- the Hub


def remote_files(spec: HfSpec) -> list[HfFile]:
    """The repo's files, with size and (LFS) sha256, from the Hub's tree listing."""
    from huggingface_hub import HfApi, RepoFile

    from .hub import endpoint, explain_error, is_offline, quiet_hub

    base = endpoint()
    if is_offline():
        raise ModelFetchError(f"{spec}: Hugging Face Hub offline mode is on (HF_HUB_OFFLINE)")
    try:
        with quiet_hub():
            tree = HfApi(endpoint=base).list_repo_tree(spec.repo, recursive=True, revision=REVISION)
            entries = [e for e in tree if isinstance(e, RepoFile)]
    except Exception as exc:  # noqa: BLE001 - mapped to one line, or re-raised
        raise explain_error(exc, HubSource(spec.repo, "(file list)", REVISION), base) from None
    out = []
    for e in entries:
        if not _safe_path(e.path):
            continue  # never mirrored into the model directory
        sha = (e.lfs.sha256 if e.lfs is not None else "") or ""
        out.append(HfFile(e.path, e.size, sha.lower()))
    return out


# --------------------------------------------------------------------------- the store


def repo_dir(repo: str, directory: Path | None = None) -> Path:
    """Where the files of ``repo`` go in the model directory."""
    owner, name = repo.split("/")
    return Path(directory if directory is not None else models_dir()) / STORE_FOLDER / owner / name


def local_path(repo: str, path: str, directory: Path | None = None) -> Path:
    """Where file ``path`` of ``repo`` lives (or would live) in the model directory."""
    return repo_dir(repo, directory).joinpath(*path.split("/"))


def local_files(repo: str, directory: Path | None = None) -> list[HfFile]:
    """The complete files of ``repo`` in the model directory (not partials, markers)."""
    root = repo_dir(repo, directory)
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = Path(folder).relative_to(root)
        for name in sorted(names):
            if name.startswith(".") or not name.endswith(".gguf"):
                continue
            path = "/".join([*rel.parts, name])
            with contextlib.suppress(OSError):
                out.append(HfFile(path, (Path(folder) / name).stat().st_size))
    return out


def _usable_here(spec: HfSpec, directory: Path | None) -> list[Path] | None:
    """The local files ``spec`` names, if they are all in place and verified, else None.

    Without a quant or file, only a local Q4_K_M counts (the Hub may have one when the
    model directory has only another quant); offline, the full rule applies.
    """
    from .hub import is_offline

    files = local_files(spec.repo, directory)
    if not files:
        return None
    offline = is_offline()
    narrowed = spec
    if spec.quant is None and spec.file is None and not offline:
        narrowed = HfSpec(spec.repo, DEFAULT_QUANTS[0])
    try:
        chosen = select(files, narrowed, first_fallback=offline)
    except ModelFetchError:
        return None
    paths = [local_path(spec.repo, f.path, directory) for f in chosen]
    if all(store.file_state(p, None, "") == "verified" for p in paths):
        return paths
    return None


def ensure_hf_model(
    spec: str | HfSpec,
    *,
    directory: Path | None = None,
    say: Progress = store.quiet,
    bar: BarFactory | None = None,
) -> Path:
    """The path of the model ``spec`` names (its first part), fetching what is missing.

    Verified files already in place are used without asking the Hub (for a bare
    ``hf:OWNER/REPO``, only a Q4_K_M one: the Hub decides otherwise). Raises
    ModelLoadError for a malformed spec, ModelFetchError (one line) for a repo, quant
    or file that is not there (listing what is), or a failed download.
    """
    from .hub import fetch_hub

    if isinstance(spec, str):
        spec = parse_hf_spec(spec)
    here = _usable_here(spec, directory)
    if here is not None:
        return here[0]
    say(f"listing files of {spec.repo} ...")
    chosen = select(remote_files(spec), spec)
    if len(chosen) > 1:
        say(f"{chosen[0].path} is split in {len(chosen)} parts: fetching them all")
    try:
        for f in chosen:
            dest = local_path(spec.repo, f.path, directory)
            source = HubSource(spec.repo, f.path, REVISION)

            def fetch(
                f: HfFile = f, dest: Path = dest, source: HubSource = source
            ) -> tuple[Path, str | None]:
                return fetch_hub(source, dest, size=f.size, sha256=f.sha256, say=say, bar=bar)

            store.ensure_file(
                dest, size=f.size, sha256=f.sha256, fetchers=[(source.describe(), fetch)],
                say=say, bar=bar,
            )  # fmt: skip
    except BaseException:
        # A failed pull leaves no empty folders behind (a partial file keeps its own).
        top = Path(directory if directory is not None else models_dir())
        for f in chosen:
            _prune(local_path(spec.repo, f.path, directory).parent, top)
        raise
    return local_path(spec.repo, chosen[0].path, directory)


def _prune(folder: Path, top: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``top`` while empty."""
    while folder != top and folder.is_relative_to(top):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
