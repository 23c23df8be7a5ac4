#!/usr/bin/env python3
"""Write the benchmark corpus: workloads built from text every Debian machine with Python has.

Usage::

    .venv/bin/python benchmarks/make_corpus.py [OUT_DIR] [--per-kind N]

OUT_DIR (default ``build/corpus``, git-ignored) gets one TOML workload per text,
in ``OUT_DIR/tuning/`` or ``OUT_DIR/validation/`` by a hash of its name
(``edgespec.bench.corpus.split_of``: fixed before any result is seen), and
``manifest.json`` listing each with its kind, split, source file and prompt size.
``edgespec bench --corpus OUT_DIR --split validation`` runs one half.

The kinds (N each, 12 by default), all from real files:

* ``edit``: an excerpt of a standard-library module shown in two identical
  revisions, then a third that renames one function or argument (begun): the
  output copies the file.
* ``quote``: a licence text (``/usr/share/common-licenses``, then Debian
  ``/usr/share/doc/*/copyright`` files) and a request to quote one paragraph.
* ``summarise``: a man page, a module's docstring or a copyright file, summarised.
* ``code``: a standard-library module cut in the middle of a function, continued.
* ``revise``: a chat in which an assistant shows a function, renames an argument
  on request, and is then asked for a second rename (its answer begun).
* ``write``: free writing (a story, an essay, a poem, a letter) on a passage from
  the same texts, at T = 0.7 to 1.0.

Everything is chosen in a fixed order (sorted file names, preferred lists), so
the corpus is the same on machines with the same files; a source that is missing
is skipped and the next candidate used. Prompts are a few hundred to about 1,500
tokens and max_tokens 96-128: sized for a 2-core CPU.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package

import corpus_sources as sources  # noqa: E402
from corpus_sources import excerpt, functions, paragraphs, stdlib_files, toml_string  # noqa: E402

from edgespec import parse_workload, split_of  # noqa: E402

KINDS = ("edit", "quote", "summarise", "code", "revise", "write")
PER_KIND = 12
TEMPERATURES = (0.7, 0.8, 0.9, 1.0)
FORMS = (
    ("story", "a short story inspired by"),
    ("essay", "a short essay on the ideas in"),
    ("poem", "a poem about"),
    ("letter", "a letter to a friend about"),
)
RENAMES = {
    "get": "fetch", "set": "assign", "make": "build", "read": "load", "write": "save",
    "parse": "decode", "find": "locate", "check": "verify", "split": "divide",
    "join": "combine", "add": "append", "remove": "drop", "format": "render",
    "name": "label", "value": "amount", "text": "content", "line": "row",
    "lines": "rows", "path": "location", "data": "payload", "result": "outcome",
    "size": "length", "key": "field", "item": "entry", "count": "total",
    "index": "position", "start": "begin", "end": "stop", "file": "stream",
    "s": "string", "n": "number", "x": "item", "fp": "stream", "obj": "target",
}  # fmt: skip


@dataclass(frozen=True)
class Item:
    """One workload before it is written."""

    name: str
    kind: str
    description: str
    prompt: str
    source: str
    temperature: float = 0.0
    max_tokens: int = 128


def rename_to(old: str, taken: str) -> str | None:
    """A natural new name for identifier old that does not occur in taken."""
    lead = len(old) - len(old.lstrip("_"))
    parts = old[lead:].split("_")
    new_parts = [RENAMES.get(p, p) for p in parts]
    new = old[:lead] + "_".join(new_parts)
    if new == old:
        new = old[:lead] + "new_" + old[lead:]
    return None if re.search(rf"\b{re.escape(new)}\b", taken) else new


def renamed(text: str, old: str, new: str) -> str:
    return re.sub(rf"\b{re.escape(old)}\b", new, text)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:40] or "x"


# ------------------------------------------------------------------ the kinds


def make_edit(n: int) -> Iterator[Item]:
    """Excerpts of modules in two revisions and a renaming third, begun."""
    for i, (module, path, source) in enumerate(stdlib_files()):
        funcs = functions(source, 900, 2000)
        if not funcs:
            continue
        name, args, text = funcs[len(funcs) // 2]
        candidates = [name] if i % 2 == 0 else [*args, name]
        for old in [a for a in candidates if a not in ("self", "cls") and len(a) > 1]:
            if len(re.findall(rf"\b{re.escape(old)}\b", text)) < (1 if old == name else 2):
                continue
            new = rename_to(old, text)
            if new is None:
                continue
            after = renamed(text, old, new)
            head = "\n".join(after.splitlines()[:1])
            what = "function" if old == name else "argument"
            prompt = (
                f"The function `{name}` of {module}.py in three successive revisions. Revision 2 "
                f"changed nothing; revision 3 renames the {what} `{old}` to `{new}` and "
                f"changes nothing else.\n\n### revision 1\n\n```python\n{text}\n```\n\n"
                f"### revision 2\n\n```python\n{text}\n```\n\n### revision 3\n\n"
                f"```python\n{head}\n"
            )
            yield Item(f"edit-{slug(module)}", "edit",
                       f"rewrite {module}.{name} with the {what} {old} renamed to {new}",
                       prompt, str(path))  # fmt: skip
            break


def make_quote(n: int) -> Iterator[Item]:
    """A licence excerpt and a request to quote one of its paragraphs."""
    for i, (name, path, text) in enumerate(sources.licence_texts()):
        ex = excerpt(text, 1800, 4200, skip=2 + i % 3)
        if ex is None:
            continue
        paras = [p for p in paragraphs(ex) if len(p) >= 250 and len(p.split()) > 12]
        if not paras:
            continue
        target = paras[len(paras) // 2].lstrip()
        words = target.split()[:8]
        begin = target[: target.index(words[-1], len(" ".join(words[:-1]))) + len(words[-1])]
        title = f"the {path.name} licence" if path.parent == sources.LICENSES else (
            f"the Debian copyright file of {path.parent.name}")  # fmt: skip
        prompt = (
            f"Below is an excerpt from {title}, a question about it, and the answer, which "
            f"quotes the excerpt word for word.\n\n### Excerpt\n\n{ex}\n\n### Question\n\n"
            f"Quote, word for word, the paragraph that begins with the words: "
            f"{' '.join(words)}\n\n### Answer\n\n{begin}"
        )
        yield Item(f"quote-{slug(name)}", "quote",
                   f"quote a paragraph of {path} verbatim", prompt, str(path))  # fmt: skip


def _docstrings(low: int) -> Iterator[tuple[str, Path, str]]:
    for module, path, source in stdlib_files():
        doc = ast.get_docstring(ast.parse(source))
        if doc and len(doc) >= low:
            yield module, path, doc


def _summary_sources() -> Iterator[tuple[str, str, Path, str]]:
    """(label, title, path, text), taking a man page, a docstring and a copyright
    file in turn while each lasts."""
    streams: list[Iterator[tuple[str, str, Path, str]]] = [
        ((f"man-{n}", f"The manual page of {n}(1)", p, t) for n, p, t in sources.man_pages()),
        (
            (f"py-{m}", f"The documentation of Python's {m} module", p, t)
            for m, p, t in _docstrings(900)
        ),  # fmt: skip
        (
            (f"doc-{n}", f"The copyright file of the Debian package {p.parent.name}", p, t)
            for n, p, t in sources.licence_texts()
            if p.parent != sources.LICENSES
        ),  # fmt: skip
    ]
    while streams:
        for s in list(streams):
            got = next(s, None)
            if got is None:
                streams.remove(s)
            else:
                yield got


def make_summarise(n: int) -> Iterator[Item]:
    """A man page, docstring or copyright file, summarised in three sentences."""
    for label, title, path, text in _summary_sources():
        ex = excerpt(text, 1200, 3800)
        if ex is None:
            continue
        prompt = f"{title}:\n\n{ex}\n\nA summary of the text above, in three sentences:\n"
        yield Item(f"summarise-{slug(label)}", "summarise", f"summarise {path}", prompt,
                   str(path), max_tokens=96)  # fmt: skip


def make_code(n: int) -> Iterator[Item]:
    """A module cut part-way through a function (with the code before it), continued."""
    for i, (module, path, source) in enumerate(stdlib_files()):
        if i % 2 == 0:
            continue  # the other modules make the edits: a different text each
        lines = source.splitlines()
        nodes = [d for d in ast.parse(source).body
                 if isinstance(d, ast.FunctionDef | ast.ClassDef) and d.end_lineno]  # fmt: skip
        big = [d for d in nodes if (d.end_lineno or 0) - d.lineno >= 25]
        if not big:
            continue
        node = big[len(big) // 2]
        cut = node.lineno + ((node.end_lineno or node.lineno) - node.lineno) * 2 // 5
        start = cut
        while start > 1 and len("\n".join(lines[start - 2 : cut])) < 3600:
            start -= 1
        body = "\n".join(lines[start - 1 : cut])
        if len(body) < 1200:
            continue
        prompt = f"# Lib/{path.name} (from line {start})\n\n{body}\n"
        yield Item(f"code-{slug(module)}", "code",
                   f"continue {module}.py from line {cut + 1}, inside {node.name}", prompt,
                   str(path))  # fmt: skip


def make_revise(n: int) -> Iterator[Item]:
    """A chat: a function shown, an argument renamed on request, then a second rename."""
    for i, (module, path, source) in enumerate(stdlib_files()):
        if i % 3 != 1:
            continue
        for name, args, text in functions(source, 500, 1400):
            olds = [a for a in args if a not in ("self", "cls") and len(a) > 1
                    and len(re.findall(rf"\b{re.escape(a)}\b", text)) >= 2]  # fmt: skip
            if not olds:
                continue
            old = olds[0]
            new = rename_to(old, text)
            new_name = rename_to(name, text)
            if new is None or new_name is None or new_name == new:
                continue
            first = renamed(text, old, new)
            second = renamed(first, name, new_name)
            prompt = (
                "A conversation between a user and a programming assistant, who always "
                "answers with the complete code.\n\n"
                f"User: Show me the function `{name}` from Python's {module} module.\n\n"
                f"Assistant: Here it is:\n\n```python\n{text}\n```\n\n"
                f"User: Rename its argument `{old}` to `{new}`.\n\n"
                f"Assistant: Here is the function with `{old}` renamed to `{new}`:\n\n"
                f"```python\n{first}\n```\n\n"
                f"User: Good. Now rename the function itself to `{new_name}`, please.\n\n"
                f"Assistant: Here is the function renamed to `{new_name}`:\n\n"
                f"```python\n{second.splitlines()[0]}\n"
            )
            yield Item(f"revise-{slug(module)}", "revise",
                       f"a chat revising {module}.{name} twice (two renames)", prompt,
                       str(path))  # fmt: skip
            break


def _passages() -> Iterator[tuple[str, str, Path, str]]:
    """(label, where from, path, passage of 500-1,800 characters) for free writing."""
    streams: list[Iterator[tuple[str, str, Path, str]]] = [
        (
            (f"py-{m}", f"the documentation of Python's {m} module", p, t)
            for m, p, t in _docstrings(500)
        ),  # fmt: skip
        (
            (f"lic-{n}", f"the {p.name} licence", p, t)
            for n, p, t in sources.licence_texts()
            if p.parent == sources.LICENSES
        ),  # fmt: skip
        ((f"man-{n}", f"the manual page of {n}(1)", p, t) for n, p, t in sources.man_pages()),
    ]
    k = 0
    while streams:
        for s in list(streams):
            got = next(s, None)
            if got is None:
                streams.remove(s)
                continue
            label, where, path, text = got
            k += 1
            if k % 2 == 0:  # every other one, for variety across the sources
                continue
            ex = excerpt(text, 500, 1800, skip=1)
            if ex is not None:
                yield label, where, path, ex


def make_write(n: int) -> Iterator[Item]:
    """Free writing (story, essay, poem, letter) on a passage, at T = 0.7-1.0."""
    for i, (label, where, path, passage) in enumerate(_passages()):
        form, lead = FORMS[i % len(FORMS)]
        temperature = TEMPERATURES[i % len(TEMPERATURES)]
        prompt = (
            f"This passage is from {where}:\n\n{passage}\n\n"
            f"What follows is {lead} this passage, written for a general reader.\n\n"
            f"{form.capitalize()}:\n\n"
        )
        yield Item(f"write-{form}-{slug(label)}", "write",
                   f"free writing ({form}) at T={temperature:g} on a passage of {path}",
                   prompt, str(path), temperature=temperature, max_tokens=96)  # fmt: skip


MAKERS: dict[str, Callable[[int], Iterator[Item]]] = {
    "edit": make_edit, "quote": make_quote, "summarise": make_summarise,
    "code": make_code, "revise": make_revise, "write": make_write,
}  # fmt: skip


# ------------------------------------------------------------------ writing


def to_toml(item: Item) -> str:
    esc = json.dumps  # a JSON string is a valid TOML basic string for these fields
    return (
        f"name = {esc(item.name)}\nkind = {esc(item.kind)}\n"
        f"description = {esc(item.description)}\n"
        f"temperature = {item.temperature}\nmax_tokens = {item.max_tokens}\n"
        f"# from {item.source}\nprompt = {toml_string(item.prompt)}\n"
    )


def build_corpus(per_kind: int = PER_KIND) -> list[Item]:
    """Up to per_kind items of each kind, each name once."""
    items: list[Item] = []
    names: set[str] = set()
    for make in MAKERS.values():
        got = 0
        for item in make(per_kind):
            if item.name in names:
                continue
            names.add(item.name)
            items.append(item)
            got += 1
            if got == per_kind:
                break
    return items


def write_corpus(out: Path, items: list[Item]) -> dict:
    """Write items under out/tuning and out/validation (replacing earlier workload
    files there) and out/manifest.json; the manifest."""
    for split in ("tuning", "validation"):
        folder = out / split
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.toml"):
            old.unlink()
    manifest = {"workloads": []}
    for item in items:
        split = split_of(item.name)
        text = to_toml(item)
        parsed = parse_workload(text)
        assert parsed.prompt == item.prompt and parsed.kind == item.kind, item.name
        (out / split / f"{item.name}.toml").write_text(text, encoding="utf-8")
        manifest["workloads"].append(
            {
                "name": item.name,
                "kind": item.kind,
                "split": split,
                "source": item.source,
                "prompt_chars": len(item.prompt),
                "temperature": item.temperature,
                "max_tokens": item.max_tokens,
            }  # fmt: skip
        )
    counts: dict[str, dict[str, int]] = {}
    for w in manifest["workloads"]:
        counts.setdefault(w["kind"], {"tuning": 0, "validation": 0})[w["split"]] += 1
    manifest["counts"] = counts
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path, default=ROOT / "build" / "corpus")
    p.add_argument("--per-kind", type=int, default=PER_KIND, help=f"texts per kind ({PER_KIND})")
    args = p.parse_args(argv)
    items = build_corpus(args.per_kind)
    manifest = write_corpus(args.out, items)
    for kind, c in manifest["counts"].items():
        print(f"{kind:<10} {c['tuning'] + c['validation']:3d}  "
              f"(tuning {c['tuning']}, validation {c['validation']})")  # fmt: skip
    print(f"{len(items)} workloads in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
